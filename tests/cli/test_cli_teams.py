"""The team in the CLI: `rlpipe list --team` shows that team's runs only and every listing names each
run's team; `rlpipe status` names it, and why the run is queued under its team's limits. Against
records in memory, as tests/cli/test_cli_outcomes.py reads them."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from rlpipe.cli import main as cli
from rlpipe.cli import runs
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.runs.record import Admission, RunRecord, Source
from tests.harness.mutants import mutant


def _run(run_id: str, team: str | None, created: str, waiting: str | None = None) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        key=run_id,
        source=Source(kind="gcs", team=team),
        request={"model": "gemma4-26b"},
        created_at=created,
        admission=Admission(waits_for="team-place", reason=waiting, since=created) if waiting else None,
    )


RUNS = [
    _run("rvision00001", "vision", "2026-12-03T10:00:00.000000Z"),
    _run("rspeech00001", "speech", "2026-12-03T11:00:00.000000Z"),
    _run("rbefore00001", None, "2026-12-01T09:00:00.000000Z"),  # recorded before teams
    _run(
        "rqueued00001",
        "vision",
        "2026-12-03T12:00:00.000000Z",
        waiting="queued: team vision has 4 of 4 active runs",
    ),
]


STUCK = "run rqueued00001 waits for a place under its team's limits, held by runs that can never give it"


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RLPIPE_LOCAL", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cli, "_settings", lambda: Settings(project="p", artifacts_bucket="a"))
    by_id = {r.run_id: r for r in RUNS}
    # The report is about the wait the run is in (what for, since when), as the reconciler writes it.
    wait = {"waits_for": "team-place", "waits_since": "2026-12-03T12:00:00.000000Z"}
    stuck = {"rqueued00001": {"event": "reconcile-stuck-waiting", "message": STUCK, **wait}}
    ledger = SimpleNamespace(
        get=by_id.get,
        rejection=lambda i: None,
        last_event=lambda run_id, what: stuck.get(run_id) if what == "reconcile-stuck-waiting" else None,
    )
    monkeypatch.setattr(cli, "_ledger", lambda s: ledger)
    monkeypatch.setattr(
        runs, "list_runs", lambda ledger: sorted(RUNS, key=lambda r: r.created_at, reverse=True)
    )


def filter_problems(module: ModuleType) -> list[str]:
    """What ``module.RunFilter`` (cli.runs or a mutant of it) selects wrong by team."""
    problems = []
    for teams, expected in (
        ({"vision"}, ["rvision00001", "rqueued00001"]),
        ({"default"}, ["rbefore00001"]),  # a run before teams is the default team's
        ({"vision", "speech"}, ["rvision00001", "rspeech00001", "rqueued00001"]),
        (set(), [r.run_id for r in RUNS]),
    ):
        chosen = [r.run_id for r in RUNS if module.RunFilter(teams=frozenset(teams)).matches(r)]
        if chosen != expected:
            problems.append(f"--team {sorted(teams)} chose {chosen}")
    return problems


def test_the_team_filter_chooses_the_teams_runs() -> None:
    assert filter_problems(runs) == []


def test_a_filter_that_ignores_the_team_is_reported(tmp_path: Path) -> None:
    with mutant(
        runs,
        "        if self.teams and record.team not in self.teams:\n            return False\n",
        "",
        tmp_path,
    ) as m:
        problems = filter_problems(m)
    assert any("--team ['vision'] chose" in p for p in problems), problems


def test_list_team_shows_that_teams_runs_with_a_team_column(
    deployment: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["list", "--team", "vision"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "TEAM" in lines[0].split()
    assert [line.split()[0] for line in lines[1:]] == ["rqueued00001", "rvision00001"]
    assert all(line.split()[4] == "vision" for line in lines[1:])
    assert cli.main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert {r["run_id"]: r["team"] for r in listed}["rbefore00001"] == "default"


def test_list_refuses_what_is_no_team_name(deployment: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(["list", "--team", "Vision Team"])
    assert refused.value.code == 2 and "not a team name" in capsys.readouterr().err


def test_status_names_the_team_and_why_the_run_is_queued(
    deployment: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "rqueued00001"]) == 0
    out = capsys.readouterr().out
    assert "  team        vision" in out
    assert (
        "  waiting     for a place under its team's limits since 2026-12-03T12:00:00Z: "
        "queued: team vision has 4 of 4 active runs"
    ) in out
    assert f"  stuck       {STUCK}" in out  # the reconciler's liveness report
    assert cli.main(["status", "rqueued00001", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["stuck"] == STUCK
    assert (info["team"], info["waiting"]) == ("vision", "queued: team vision has 4 of 4 active runs")


def test_a_run_its_teams_budget_refused_is_told_both_ways_on() -> None:
    from rlpipe.cli.watch import next_step
    from rlpipe.core.failure_rules import reported
    from rlpipe.core.runs.record import Failure

    refused = _run("rbudget00001", "vision", "2026-12-03T10:00:00.000000Z")
    refused.state = "failed"
    refused.failure = Failure(
        tag="permanent",
        message="team vision's TPU budget ...",
        stage="plan",
        rule=reported.TEAM_BUDGET_EXCEEDED,
    )
    step = next_step(refused) or ""
    assert "fewer chips or shorter deadlines" in step and 'rlpipe retry rbudget00001 --reason "…"' in step
    assert "would fail the same way" not in step


def test_status_leaves_out_a_stuck_report_about_a_wait_the_run_has_left(
    deployment: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run waits again, but since a later moment than the wait the report was about: that
    report is no longer the truth about it."""
    later = RUNS[3].model_copy(deep=True)
    assert later.admission is not None
    later.admission.since = "2026-12-04T08:00:00.000000Z"
    ledger = cli._ledger(cli._settings())
    monkeypatch.setattr(ledger, "get", lambda run_id: later if run_id == later.run_id else None)
    assert cli.main(["status", "rqueued00001", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["stuck"] is None and info["waiting"] == "queued: team vision has 4 of 4 active runs"
