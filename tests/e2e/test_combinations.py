"""Every combination of features ends: a pairwise suite over the features users combine, on the
double (the teams stack of examples/teams/teams.yaml), each case a request submitted with the
others at once.

The cases are every pair of the factors' values at least once (``allpairspy``'s AllPairs over
``FACTORS``, minus the combinations that cannot be asked for: ``allowed``), not a hand-picked
list. Every case asserts what its combination implies, derived from the documented rules
(docs/outcomes.md, docs/sweeps.md, docs/retry.md), never from what the code recorded:

* the run, and every child of a sweep, ends in the state the combination implies (``expected``);
* no workload of it is left in the cluster;
* while they run, the liveness check (``core.liveness``, as the reconciler reads it) finds no run
  that can never move.

* each attempt's chip-hours are what its own pods were read holding, added up pod by pod (a pod
  gone by a later read keeps its time), or what Kueue held for it once it ended when that is
  more; no pod counts twice, and a cancelled training attempt records its pods' time up to the
  cancel (the cancel reads them once more before deleting them).

Chip-hours come from the pods a status read sees (core.chip_hours). At this suite's pace an
attempt's workers can start and end wholly between two of the workflow's polls, and then no read
sees them; one read after its JobSet ended still has what Kueue held (the Workload outlives the
workers).
tests/e2e/test_e2e.py holds the figures at the demo's pace: a preempted run whose every training
attempt is read holding its slice, and a cancel read to the moment.

The ``upstream`` way in is a watch entry per such case (its team's, its template the case's
request), one release pushed to the Hub double, and the upstream poll's two ticks (the baseline,
then the release): every upstream case starts from the same release, as teams' entries would. (The
defect this factor found: an entry's template was checked against the built-in allowlists, not
its team's, so a team's entry naming its own token Secret was refused, and two teams' entries
with one template made one run.)

What the double cannot play (Kueue's cohort borrowing and reclaim) runs on the real control plane
(tests/cluster/real_plane/).
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from allpairspy import AllPairs

from rlpipe.cli import runs
from rlpipe.cli import submit as submit_cli
from rlpipe.cli.retry_command import request_retry
from rlpipe.control.lifecycle.team_usage import TeamUsageStore
from rlpipe.core import identity, liveness
from rlpipe.core.request.grid import child_key
from rlpipe.core.runs.record import RunRecord
from rlpipe.upstream.watchlist import WATCH_LIST, WatchEntry
from tests.conftest import ROOT, minimal_request
from tests.e2e.test_e2e import FAST_RETRY, Local, running_stack
from tests.harness.patience import ceiling

pytestmark = pytest.mark.slow

FACTORS: dict[str, list[str]] = {
    "team": ["vision", "speech"],  # vision: active_runs 4; speech: sweep_children 2
    "shape": ["single", "sweep"],  # a sweep: 4 children over rl.grpo_beta, select by post mean_reward
    "early_stop": ["none", "median"],
    "capacity": ["reservation", "spot", "flex-start"],
    "disruption": ["none", "preempt"],  # preempted at step 30 of its first training attempt
    "gate": ["none", "pass", "held"],
    "publish": ["no", "yes"],
    "ending": ["runs", "cancel", "retry"],  # cancelled mid-training; failed (exit 1) then retried
    "reward": ["builtin", "custom"],
    # Which step export loads: the last, or the best evaluated (steps 20 and 40 here: a checkpoint
    # every 20, an evaluation every 10), which the gate and a sweep's selection then judge.
    "export": ["last", "best"],
    # How the request arrives: a file in the team's folder, or a release of the watched model that
    # the team's watch entry turns into the request (its template; debounce 0).
    "way_in": ["file", "upstream"],
}
NAMES = list(FACTORS)
SIZE = 4  # a sweep's children: the median rule needs three peers of a child
SECRETS = {team: {"name": f"hf-{team}", "key": "token"} for team in FACTORS["team"]}


def allowed(row: list[str]) -> bool:
    """The combinations a request can ask for (AllPairs calls it with each partial row)."""
    case = dict(zip(NAMES, row, strict=False))
    if case.get("early_stop") == "median" and case.get("shape") == "single":
        return False  # early stopping is a sweep's rule
    if case.get("ending") == "retry" and case.get("shape") == "sweep":
        return False  # the retried failure is one run's exit code (a sweep's retry: docs/retry.md)
    # One disruption per training attempt: a stalled or failing attempt is not also preempted.
    return not (case.get("ending") in ("cancel", "retry") and case.get("disruption") == "preempt")


@dataclass(frozen=True)
class Case:
    index: int
    team: str
    shape: str
    early_stop: str
    capacity: str
    disruption: str
    gate: str
    publish: str
    ending: str
    reward: str
    export: str
    way_in: str

    def __str__(self) -> str:
        return f"case {self.index} (" + ", ".join(f"{n}={getattr(self, n)}" for n in NAMES) + ")"


def _pairs(row: tuple[str, ...]) -> set[tuple[int, str, int, str]]:
    return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}


def pairwise_rows() -> list[tuple[str, ...]]:
    """AllPairs' rows under ``allowed``, then a row for each pair its greedy search passed over
    (with constraints it can leave some uncovered), each completed by the allowed row that covers
    the most pairs still missing."""
    rows = [tuple(r) for r in AllPairs(list(FACTORS.values()), filter_func=allowed)]
    every = [r for r in itertools.product(*FACTORS.values()) if allowed(list(r))]
    wanted = set().union(*(_pairs(r) for r in every))
    missing = wanted - set().union(*(_pairs(r) for r in rows))
    while missing:
        best = max(every, key=lambda r: len(_pairs(r) & missing))
        rows.append(best)
        missing -= _pairs(best)
    return rows


CASES = [Case(i, *row) for i, row in enumerate(pairwise_rows())]


def expected(case: Case) -> tuple[str, set[str]]:
    """(the run's state, the states each child may end in), from the documented rules."""
    if case.ending == "cancel":
        return "cancelled", {"cancelled"}
    if case.gate == "held":
        return "gated", {"gated"}  # every child held back: the sweep is gated (docs/sweeps.md)
    children = {"succeeded", "stopped"} if case.early_stop == "median" else {"succeeded"}
    return "succeeded", children


@dataclass
class Submitted:
    case: Case
    run_id: str
    runs: list[str]  # the runs that do the work: the run itself, or the sweep's children
    cancelled: bool = False
    retried: bool = False
    seen_running: set[str] = field(default_factory=set)


def _request(case: Case, request_id: str) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "hf_token_secret": SECRETS[case.team],
        "retry": FAST_RETRY,
        "training": {"checkpoint_period": 20, "num_batches": 40},
    }
    if case.capacity != "reservation":
        fields["tpu"] = {"provisioning": case.capacity}
    if case.gate == "pass":
        fields["gate"] = {"min_post_mean_reward": 0.0}
    elif case.gate == "held":
        fields["gate"] = {"min_reward_gain": 5.0}  # more than a reward can rise
    if case.publish == "yes":
        fields["publish"] = {
            "repo": f"{case.team}-org/combination-{request_id}",
            "token_secret": {"name": f"hf-{case.team}-write", "key": "token"},
        }
    if case.reward == "custom":  # beside a file; inline in a watch template, which has no folder
        reward = ROOT / "examples/rewards/exact_match_length.py"
        fields["rewards"] = {
            "file": {"path": "rewards/exact_match_length.py"}
            if case.way_in == "file"
            else {"inline": reward.read_text()},
            "functions": ["exact_match", "length_penalty"],
        }
    if case.export == "best":
        # A learning rate ten times the tuned one makes the played evaluations noisy, and this seed
        # makes step 20 better than the last (docs/simulator.md, the reward curve), so that best
        # and last export different steps.
        fields["export"] = {"step": "best"}
        fields["training"] = {**fields["training"], "learning_rate": 2e-4}
        fields["maxtext_overrides"] = {"data_shuffle_seed": 1}
    if case.way_in == "file":
        fields["request_id"] = request_id
    if case.shape == "sweep":
        fields["sweep"] = {
            "grid": {"maxtext_overrides.rl.grpo_beta": [0.02, 0.04, 0.08, 0.16][:SIZE]},
            "max_parallel": SIZE,
            "select": {"metric": "post_mean_reward"},
            "early_stop": case.early_stop,
        }
    return minimal_request(**fields)


def _faults(case: Case, working: list[str]) -> list[dict[str, Any]]:
    fault = {"preempt": "preempt@30"}.get(case.disruption)
    fault = {"cancel": "stall", "retry": "exit:1"}.get(case.ending, fault)
    if fault is None:
        return []
    attempt = None if fault == "stall" else 1
    return [{"stage": "train", "attempt": attempt, "fault": fault, "run": run_id} for run_id in working]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    """The teams of examples/teams/teams.yaml, each letting its requests bring reward code (the
    custom reward factor; a team refuses it unless its operator allows it). The stack's played
    operator operates every team (local/teams_declaration.py), so cancel and retry go through."""
    root = tmp_path_factory.mktemp("combinations-stack")
    declared = yaml.safe_load((ROOT / "examples/teams/teams.yaml").read_text())
    for team in declared["teams"].values():
        team["allow_user_code"] = True
    (root / "teams.yaml").write_text(yaml.safe_dump(declared))
    yield from running_stack(root / "stack", teams_file=str(root / "teams.yaml"), poll_seconds=3)


WATCHED = "google/gemma-4-26b-a4b-it"  # a model of the Hub double the simulator converts


def _watch_entry(case: Case, request_id: str) -> dict[str, Any]:
    template = {k: v for k, v in _request(case, request_id).items() if k not in ("hf_repo", "request_id")}
    template["labels"] = {"combination": str(case.index)}  # two cases' requests may be the same
    return {"hf_repo": WATCHED, "team": case.team, "debounce_minutes": 0, "template": template}


def _working(case: Case, key: str) -> tuple[str, list[str]]:
    run_id = identity.run_id_for(key)
    if case.shape == "sweep":
        return run_id, [identity.run_id_for(child_key(key, i)) for i in range(SIZE)]
    return run_id, [run_id]


def _submit_all(local: Local) -> list[Submitted]:
    """Every case at once: the watch list's baseline taken first, then the release pushed, the
    faults set for every run (an upstream run's id follows from the release), the files submitted
    and the poll that turns the release into the upstream cases' runs."""
    (local.tmp / "rewards").mkdir(exist_ok=True)
    shutil.copy(ROOT / "examples/rewards/exact_match_length.py", local.tmp / "rewards")
    tag = uuid.uuid4().hex[:6]
    request_ids = {case.index: f"combo-{case.index}-{tag}" for case in CASES}
    upstream = [case for case in CASES if case.way_in == "upstream"]
    entries = [_watch_entry(case, request_ids[case.index]) for case in upstream]
    watch_list = local.client.bucket(local.settings.requests_bucket).blob(WATCH_LIST)
    watch_list.upload_from_string(json.dumps({"watch": entries}))  # JSON is YAML, without aliases
    assert local.stack.upstream_tick() == 200  # the baseline of every entry
    sha = local.stack.hub_release(WATCHED)["sha"]
    planned = []
    for case in CASES:
        if case.way_in == "file":
            key = identity.key_for_request_id(request_ids[case.index], case.team)
        else:
            key = WatchEntry.model_validate(entries[upstream.index(case)]).release_key(sha)
        planned.append((case, *_working(case, key)))
    local.stack.set_timing("fast")
    local.stack.set_faults([f for case, _, working in planned for f in _faults(case, working)])
    submitted = []
    for case, run_id, working in planned:
        if case.way_in == "file":
            path = local.tmp / f"{request_ids[case.index]}.yaml"
            path.write_text(yaml.safe_dump(_request(case, request_ids[case.index]), sort_keys=False))
            got = submit_cli.submit(
                local.settings, path, via="gcs", team=case.team, storage_client=local.client
            )
            assert got.run_id == run_id, (str(case), got)
        submitted.append(Submitted(case, run_id, working))
    assert local.stack.upstream_tick() == 200  # the release: one run per upstream case's entry
    for case, run_id, _ in planned:
        record = local.ledger.get(run_id)
        assert case.way_in == "file" or (record is not None and record.lineage.hf_revision == sha), (
            str(case),
            (local.stack.logs / "upstream_poll.log").read_text()[-3000:],
        )
    return submitted


def _holders(local: Local) -> dict[str, list[str]]:
    """Each team's runs holding a place, as the reconciler reads them."""
    usage = TeamUsageStore(local.ledger.store, local.ledger, poll_seconds=1)
    return {
        team: [h.run_id for h in doc.holders]
        for team in FACTORS["team"]
        if (doc := usage.read(team)) is not None
    }


# A cycle the liveness check reports must be seen on this many passes in a row (a second apart)
# before the test fails on it. The holders and the records are separate objects, read one after
# another: a run can take its place between the two reads, and one pass then sees it both holding
# and waiting, a cycle for a moment (seen once in a run under load). A deadlock never ends.
STUCK_PASSES = 3


def _drive(local: Local, submitted: list[Submitted]) -> None:
    """Cancel and retry each case when its moment comes; check liveness; until every case ended."""
    every = [i for s in submitted for i in {s.run_id, *s.runs}]
    seen: list[dict[str, str]] = []  # the liveness check's findings, newest first
    deadline = time.monotonic() + ceiling(240)
    while time.monotonic() < deadline:
        # Each record read once a pass, and a pass a poll: the workflows read each run's status
        # once a second (poll_seconds), so reading the ledger more often sees nothing new.
        holders = _holders(local)  # first: a run holding a place now still holds it, or has ended, below
        records = {r.run_id: r for r in (local.ledger.get(i) for i in every) if r is not None}
        done, acted = True, False
        for s in submitted:
            record = records.get(s.run_id)
            working = [records.get(r) for r in s.runs]
            if s.case.ending == "cancel" and not s.cancelled:
                training = [
                    w
                    for w in working
                    if w
                    and w.state == "training"
                    and w.attempts[-1].stage == "train"
                    and w.attempts[-1].phase == "running"
                ]
                if (
                    training
                ):  # a training attempt, read running, stalls there: cancel the run (a sweep's parent)
                    runs.cancel(local.settings, local.ledger, s.run_id)
                    s.cancelled, acted = True, True
            if s.case.ending == "retry" and not s.retried and record is not None and record.state == "failed":
                request_retry(
                    local.settings, local.ledger, s.run_id, reason="the exit code is fixed", by="combo"
                )
                s.retried, acted = True, True
            finished = record is not None and record.terminal
            if s.case.ending == "retry" and not s.retried:
                finished = False
            done = done and finished
        if not acted:  # the records read before a cancel or a retry are not the state after it
            stuck = liveness.stuck(records, liveness.waits(records, holders))
            seen = [stuck, *seen][:STUCK_PASSES]
            lasting = {k: v for k, v in stuck.items() if all(k in earlier for earlier in seen)}
            assert len(seen) < STUCK_PASSES or lasting == {}, lasting
        if done:
            return
        time.sleep(1.0)
    raise AssertionError(
        "not every combination ended: "
        + "; ".join(
            f"{s.case}: {runs.describe(r) if (r := local.ledger.get(s.run_id)) else 'no record'}"
            for s in submitted
        )
    )


def _chip_hours_wrong(w: RunRecord, *, cancelled: bool) -> list[str]:
    """What is wrong with one run's chip-hours: each attempt's total is what its own pods were read
    holding, added up, or what Kueue held for it once it ended when that is more; no pod is counted
    for two attempts, and a training attempt that was read running when it was cancelled records
    the time its pods held up to the cancel."""
    wrong, owners = [], {}
    for a in w.attempts:
        held = max(sum(a.pod_chip_hours.values()), a.reserved_chip_hours or 0.0)
        if abs((a.chip_hours or 0.0) - held) > 1e-9:
            wrong.append(
                f"{w.run_id}: {a.stage} attempt {a.attempt} records {a.chip_hours}, its pods "
                f"{a.pod_chip_hours}, Kueue's reservation {a.reserved_chip_hours}"
            )
        for uid in a.pod_chip_hours:
            if uid in owners:
                wrong.append(f"{w.run_id}: pod {uid} counted for {owners[uid]} and {a.stage} {a.attempt}")
            owners[uid] = f"{a.stage} {a.attempt}"
    last = w.attempts[-1] if w.attempts else None
    if (
        cancelled
        and w.state == "cancelled"
        and last is not None
        and last.stage == "train"
        and not last.chip_hours
    ):
        wrong.append(f"{w.run_id}: its cancelled training attempt {last.attempt} recorded no chip-hours")
    return wrong


def _expected_export(case: Case, w: RunRecord) -> int | None:
    """The step export loads, by docs/outcomes.md ("The exported step"): the last; or, for best,
    the higher mean_reward of step 20's evaluation (the newest attempt's) and the final one at 40
    (a tie goes to the later step)."""
    if case.export == "last":
        return w.lineage.final_step
    at_20 = [e for e in w.results.get("intermediate") or [] if e.get("step") == 20]
    reward_20 = max(at_20, key=lambda e: e.get("attempt") or 0)["mean_reward"] if at_20 else None
    final = w.results["post"]["mean_reward"]
    return 20 if reward_20 is not None and reward_20 > final else 40


def _check(local: Local, s: Submitted) -> list[str]:
    """What is wrong with one case's end (empty: it ended as its combination implies)."""
    case = s.case
    wrong = []
    state, child_states = expected(case)
    record = local.ledger.get(s.run_id)
    assert record is not None
    if record.state != state:
        wrong.append(f"ended {record.state}, not {state}: {record.failure}")
    working = [w for w in (local.ledger.get(r) for r in s.runs) if w is not None]
    for w in working:
        if case.shape == "sweep" and w.state not in child_states:
            wrong.append(f"child {w.run_id} ended {w.state}, not one of {sorted(child_states)}: {w.failure}")
        train = [a for a in w.attempts if a.stage == "train"]
        if (
            case.disruption == "preempt"
            and w.state != "stopped"
            and (not train or train[0].failure_class != "preempted")
        ):
            wrong.append(f"{w.run_id}: its first training attempt was not preempted: {train[:1]}")
        wrong += _chip_hours_wrong(w, cancelled=case.ending == "cancel")
        if w.state == "succeeded" and w.lineage.exported_step != _expected_export(case, w):
            wrong.append(f"{w.run_id}: exported step {w.lineage.exported_step} ({w.lineage.export_reason})")
        if case.ending == "retry" and (
            w.round != 2 or [a.failure_class for a in train] != ["permanent", None]
        ):
            wrong.append(f"{w.run_id}: not one failed round then one retried: round {w.round}, {train}")
    left = [x for x in local.workloads() if any(x.startswith(r) for r in s.runs)]
    if left:
        wrong.append(f"workloads left: {left}")
    if case.shape == "sweep" and state == "succeeded":
        assert record.sweep is not None
        chosen = [w for w in working if w.lineage.sweep and w.lineage.sweep.selected]
        if len(chosen) != 1:
            wrong.append(f"{len(chosen)} children selected")
    if case.publish == "yes" and state == "succeeded":
        winner = [
            w for w in working if case.shape == "single" or (w.lineage.sweep and w.lineage.sweep.selected)
        ]
        if not winner or not winner[0].lineage.published_commit:
            wrong.append("nothing published")
    return wrong


# The hang guard never cuts a wait shorter than the wait's own ceiling (pyproject's 600 s is for
# tests that take a minute; this one takes two to three on a quiet machine).
@pytest.mark.timeout(int(ceiling(240)) + 120)
def test_every_pairwise_combination_of_the_features_ends_as_it_implies(local: Local) -> None:
    submitted = _submit_all(local)
    _drive(local, submitted)
    time.sleep(1)  # cleanup runs before finish; the double deletes what was asked at once
    wrong = {str(s.case): problems for s in submitted if (problems := _check(local, s))}
    assert wrong == {}, "\n".join(f"{case}: {problems}" for case, problems in wrong.items())


def test_the_cases_cover_every_pair_of_values_that_can_be_asked_for() -> None:
    """Every pair of two factors' values that some allowed request holds is in a case, and the
    cases are far fewer than the product."""
    rows = [tuple(getattr(c, n) for n in NAMES) for c in CASES]
    assert all(allowed(list(r)) for r in rows)
    for (i, a), (j, b) in itertools.combinations(enumerate(NAMES), 2):
        for va, vb in itertools.product(FACTORS[a], FACTORS[b]):
            possible = any(
                allowed(list(r)) and r[i] == va and r[j] == vb for r in itertools.product(*FACTORS.values())
            )
            assert not possible or any(r[i] == va and r[j] == vb for r in rows), (a, va, b, vb)
    assert len(CASES) <= 20  # pairwise, not the product of 3,888
