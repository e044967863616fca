"""``make demo SCENARIO=teams`` in pieces (cli/teams_demo.py): the scenario is chosen on both
clusters with no fault to refuse, the played reclamation is a fault the simulator takes for one
run only, the per-team table adds up hand-made ledgers, and the demo's verdict fails when any
of what it shows did not happen (each piece taken away from a passing set, one at a time)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from rlpipe.cli.demo import choose_scenario
from rlpipe.cli.teams_demo import (
    RECLAIM_STEP,
    REQUESTS,
    Followed,
    outcome_checks,
    planned_run_id,
    reclaim_fault,
    refusal_lines,
    team_summary,
)
from rlpipe.core import identity
from rlpipe.core.runs.record import Attempt, RunRecord, Source, SweepParent, SweepSelection
from rlpipe.local.simulator import Scenario
from rlpipe.local.teams_declaration import read_teams_file
from tests.conftest import ROOT

NAMESPACES = {"vision": "rlpipe-vision", "speech": "rlpipe-speech"}
RECLAIMED = (
    "JobSet rv-train-a1 failed: evicted by Kueue (Preempted: Preempted to accommodate a workload "
    "(UID: u, JobUID: j) due to reclamation within the cohort)"
)
REFUSAL = {
    "message": "request rejected: 1 problem",
    "problems": [
        {
            "path": "hf_token_secret",
            "message": "Secret hf-speech (key token) is not one team vision lets requests use here",
            "fix": "use one of: hf-vision:token (name:key); an operator lists them in teams.vision.read_secrets",
        }
    ],
}


def _attempt(stage: str, n: int, hours: float | None = None, **fields: object) -> Attempt:
    return Attempt(
        stage=stage,  # type: ignore[arg-type]
        attempt=n,
        workload=f"w-{stage}-{n}",
        launched_at="2026-12-06T10:00:00.000000Z",
        phase="failed" if fields.get("failure_class") else "succeeded",
        chip_hours=hours,
        **fields,  # type: ignore[arg-type]
    )


def _record(run_id: str, team: str | None, state: str, attempts: list[Attempt]) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        key=run_id,
        source=Source(kind="gcs", team=team),
        request={},
        state=state,
        attempts=attempts,
    )


def _passing() -> tuple[list[Followed], dict[str, object]]:
    vision = _record(
        "rv",
        "vision",
        "succeeded",
        [
            _attempt("convert", 1),
            _attempt("train", 1, 0.25, failure_class="preempted", reason=RECLAIMED),
            _attempt("train", 2, 0.5, resume_step=30),
            _attempt("export", 1),
        ],
    )
    speech = _record("rs", "speech", "succeeded", [_attempt("train", 1, 1.0)])
    sweep = _record("rsweep", "speech", "succeeded", [])
    sweep.sweep = SweepParent(
        children=["rsc0", "rsc1", "rsc2"],
        points=[{}, {}, {}],
        max_parallel=3,
        selection=SweepSelection(
            run_id="rsc1",
            index=1,
            metric="post_mean_reward",
            direction="max",
            value=0.6,
            reason="best",
            at="t",
        ),
    )
    return [
        Followed("vision", "rv", namespaces={"rlpipe-vision"}, record=vision),
        Followed("speech", "rs", namespaces={"rlpipe-speech"}, record=speech),
        Followed("speech", "rsweep", namespaces={"rlpipe-speech"}, record=sweep, sweep_places=2),
    ], copy.deepcopy(REFUSAL)


@pytest.mark.parametrize("cluster", ["double", "real"])
def test_the_scenario_runs_the_teams_declaration_on_either_cluster_with_no_fault_to_refuse(
    cluster: str,
) -> None:
    example, faults, scenario_file = choose_scenario(
        "teams", cluster, Path("examples/gemma4-26b-v6e-32.yaml")
    )
    assert example == Path("examples/teams/teams.yaml") and (ROOT / example).is_file()
    assert faults == [] and scenario_file is None  # the reclamation is set per run, on the double only


def test_the_played_reclamation_strikes_the_borrowers_first_training_attempt_only() -> None:
    [fault] = Scenario.from_document({"faults": [reclaim_fault("rvision00001")]}).faults
    assert (fault.kind, fault.why, fault.step, fault.attempt) == (
        "evict",
        "cohort-reclamation",
        RECLAIM_STEP,
        1,
    )
    assert fault.matches("train", 1, "rvision00001")
    assert not fault.matches("train", 1, "rspeech00001") and not fault.matches("train", 2, "rvision00001")


def test_the_borrower_checkpoints_before_the_step_it_is_taken_back_at() -> None:
    """Otherwise the resume the demo shows would start over from step 0."""
    import yaml

    period = yaml.safe_load(REQUESTS["vision"][0].read_text())["training"]["checkpoint_period"]
    assert 0 < period < RECLAIM_STEP


def test_the_run_id_the_fault_names_is_the_one_intake_keys_the_teams_request_under() -> None:
    teams = read_teams_file(ROOT / "examples" / "teams" / "teams.yaml").teams
    vision = teams.named("vision")
    assert vision is not None
    path = ROOT / REQUESTS["vision"][0]
    assert planned_run_id(path, vision) == identity.run_id_for(
        identity.key_for_request_id("vision-gemma4-grpo", "vision")
    )


def test_the_per_team_table_counts_runs_states_chip_hours_and_refusals() -> None:
    records = [
        _record("r1", "vision", "succeeded", [_attempt("train", 1, 0.25), _attempt("train", 2, 0.5)]),
        _record("r2", "vision", "failed", [_attempt("train", 1, 2.0, failure_class="permanent")]),
        _record("r3", "speech", "succeeded", [_attempt("convert", 1), _attempt("train", 1, 1.125)]),
    ]
    rows = {line.split()[0]: line.split() for line in team_summary(records, {"vision": 1}).splitlines()[2:]}
    assert rows["vision"] == ["vision", "2", "1", "failed,", "1", "succeeded", "2.750", "1"]
    assert rows["speech"] == ["speech", "1", "1", "succeeded", "1.125", "0"]


def test_a_run_recorded_before_teams_is_the_default_teams() -> None:
    table = team_summary([_record("r0", None, "succeeded", [_attempt("train", 1, 0.5)])])
    assert table.splitlines()[2].split()[:2] == ["default", "1"]


def test_the_refusal_is_printed_with_its_field_and_the_teams_allowlist() -> None:
    text = "\n".join(refusal_lines(REFUSAL))
    assert "hf_token_secret: Secret hf-speech" in text and "teams.vision.read_secrets" in text


def test_everything_the_demo_shows_passes() -> None:
    runs, refusal = _passing()
    checks = outcome_checks(runs, refusal, played=True, namespaces=NAMESPACES)
    assert checks and all(ok for _, ok in checks), checks


def _break(what: str, runs: list[Followed], refusal: dict[str, object]) -> None:
    vision = runs[0].record
    assert vision is not None
    if what == "a-run-failed":
        runs[1].record.state = "failed"  # type: ignore[union-attr]
    elif what == "another-teams-namespace":
        runs[0].namespaces.add("rlpipe-speech")
    elif what == "recorded-as-another-team":
        runs[1].record.source = Source(kind="pubsub", team="vision")  # type: ignore[union-attr]
    elif what == "preempted-within-its-queue":
        vision.attempts[1].reason = RECLAIMED.replace(
            "reclamation within the cohort", "prioritization in the ClusterQueue"
        )
    elif what == "no-resume":
        vision.attempts[2].resume_step = None
    elif what == "nothing-refused":
        refusal["problems"] = []
    elif what == "sweep-without-a-winner":
        runs[2].record.sweep.selection = None  # type: ignore[union-attr]
    elif what == "sweep-within-its-places":
        runs[2].sweep_places = 3


@pytest.mark.parametrize(
    "what",
    [
        "a-run-failed",
        "another-teams-namespace",
        "recorded-as-another-team",
        "preempted-within-its-queue",
        "no-resume",
        "nothing-refused",
        "sweep-without-a-winner",
        "sweep-within-its-places",
    ],
)
def test_the_demo_fails_when_any_of_it_did_not_happen(what: str) -> None:
    runs, refusal = _passing()
    _break(what, runs, refusal)
    failed = [
        check for check, ok in outcome_checks(runs, refusal, played=True, namespaces=NAMESPACES) if not ok
    ]
    assert len(failed) == 1, failed


def test_on_the_real_plane_no_reclamation_is_expected() -> None:
    runs, refusal = _passing()
    runs[0].record.attempts = [_attempt("train", 1, 0.5)]  # type: ignore[union-attr]  # never taken back
    checks = outcome_checks(runs, refusal, played=False, namespaces=NAMESPACES)
    assert all(ok for _, ok in checks) and not any("taken back" in what for what, _ in checks)


def test_a_local_teams_file_naming_a_team_twice_is_refused_naming_it(tmp_path: Path) -> None:
    """`rlpipe local up --teams FILE` reads the file as the functions read RLPIPE_TEAMS: YAML keeps
    the last of two equal keys, so the repeat is caught while the text is parsed, not after."""
    from rlpipe.local.teams_declaration import TeamsFileInvalid

    twice = tmp_path / "teams.yaml"
    twice.write_text("teams:\n  vision: {}\n  speech: {}\n  vision:\n    allow_user_code: true\n")
    with pytest.raises(TeamsFileInvalid, match="vision") as refused:
        read_teams_file(twice)
    assert "twice" in str(refused.value) or "more than once" in str(refused.value), str(refused.value)
