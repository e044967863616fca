"""A sweep's early stopping in the control plane, on the real ledger (fake-gcs-server behind the
strict layer): each child's status read copies its evaluations into the parent and is judged there,
under the parent's compare-and-swap; a stop is written once, whatever the redeliveries, and a
stopped child holds no slot and is never selected."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.sweep import coordination as sweeps
from rlpipe.control.sweep import early_stopping
from rlpipe.core.runs.record import Attempt, RunRecord, now
from tests.conftest import Buckets
from tests.control.sweep.test_sweep_control import _claimed

ASHA = {"select": {"metric": "post_mean_reward"}, "early_stop": {"rule": "asha", "eta": 2, "min_step": 10}}


def _training(ledger: Ledger, child: RunRecord, evaluations: dict[int, float], attempt: int = 1) -> RunRecord:
    """The child training, its record holding the evaluations a status read folded in."""

    def change(r: RunRecord) -> str:
        if r.state != "training":
            r.set_state("training")
        if r.attempt_record("train", attempt) is None:  # its train attempt, running
            r.attempts.append(
                Attempt(stage="train", attempt=attempt, workload=f"{r.run_id}-train-a{attempt}",
                        launched_at=now(), phase="running")
            )  # fmt: skip
        known = {(e["attempt"], e["step"]): e for e in r.results.get("intermediate", [])}
        for step, reward in evaluations.items():
            known[(attempt, step)] = {
                "step": step,
                "attempt": attempt,
                "mean_reward": reward,
                "accuracy": 50.0,
            }
        r.results = {"pre": {"mean_reward": 0.1}, "post": None, "intermediate": list(known.values())}
        return "progress"

    return ledger.edit(child.run_id, change)


def _stopped(ledger: Ledger, parent: RunRecord) -> list[int]:
    after = ledger.get(parent.run_id)
    assert after is not None and after.sweep is not None
    return sorted(s.index for s in after.sweep.stopped)


def test_asha_judges_each_child_on_arrival_against_those_already_at_the_rung(buckets: Buckets) -> None:
    """eta 2, rung 10, arriving best first (0.40, 0.30, 0.20, 0.10): the first is alone (n < eta);
    then each arrival is outside the top floor(n/2): 0.30 of 2 (keep 1), 0.20 of 3 (keep 1), 0.10
    of 4 (keep 2, the 2nd best 0.30)."""
    ledger, parent, children = _claimed(buckets, **ASHA)
    verdicts = [
        early_stopping.judge(ledger, _training(ledger, child, {10: value}))
        for child, value in zip(children, [0.40, 0.30, 0.20, 0.10], strict=True)
    ]
    assert [v is not None for v in verdicts] == [False, True, True, True]
    last = verdicts[3]
    assert last is not None and (last.rule, last.step, last.value, last.threshold) == ("asha", 10, 0.10, 0.30)
    assert last.compared == {"0": 0.40, "1": 0.30, "2": 0.20}
    # In words: the evaluation named as one (not as post_mean_reward), the share ASHA keeps, the bar.
    assert last.reason.startswith(
        "stopped early by asha: at the rung at step 10 its evaluation there (mean_reward 0.1000) is outside "
        "the top 2 of the 4 children evaluated there: with eta 2, ASHA keeps the best 1/2 of those at a "
        "rung (here 2), and the 2nd best there was 0.3000"
    ), last.reason
    assert _stopped(ledger, parent) == [1, 2, 3]


def test_asha_arriving_worst_first_stops_nobody(buckets: Buckets) -> None:
    """The same values in the other order: each arrival is the best so far, so it goes on (the
    asynchronous rule judges with what has arrived, as in the paper)."""
    ledger, parent, children = _claimed(buckets, **ASHA)
    for child, value in zip(children, [0.10, 0.20, 0.30, 0.40], strict=True):
        assert early_stopping.judge(ledger, _training(ledger, child, {10: value})) is None
    assert _stopped(ledger, parent) == []


def test_a_redelivered_read_gets_the_same_stop_and_writes_nothing(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets, **ASHA)
    for child, value in zip(children[:2], [0.40, 0.30], strict=True):
        read = _training(ledger, child, {10: value})
        first = early_stopping.judge(ledger, read)
    assert first is not None and first.index == 1
    seq = ledger.get(parent.run_id).seq  # type: ignore[union-attr]
    again = early_stopping.judge(ledger, read)
    assert again == first
    after = ledger.get(parent.run_id)
    assert after is not None and after.seq == seq and _stopped(ledger, parent) == [1]


def test_a_read_with_nothing_new_decides_nothing(buckets: Buckets) -> None:
    """Only a new evaluation is judged: child 0 read again after three better siblings arrived is
    not stopped by that read (it is judged when it reaches the next rung)."""
    ledger, _parent, children = _claimed(buckets, **ASHA)
    first = _training(ledger, children[0], {10: 0.10})
    assert early_stopping.judge(ledger, first) is None
    for child, value in zip(children[1:], [0.50, 0.60, 0.70], strict=True):
        early_stopping.judge(ledger, _training(ledger, child, {10: value}))
    assert early_stopping.judge(ledger, first) is None
    # At the next rung (20) it is among 2 (keep 1) behind child 1: stopped there.
    early_stopping.judge(ledger, _training(ledger, children[1], {20: 0.55}))
    late = early_stopping.judge(ledger, _training(ledger, children[0], {20: 0.12}))
    assert late is not None and (late.step, late.threshold) == (20, 0.55)


@pytest.mark.parametrize("repeat", range(3))
def test_children_reporting_at_once_lose_no_evaluation_and_never_stop_the_best(
    buckets: Buckets, repeat: int
) -> None:
    values = [0.40, 0.30, 0.20, 0.10]
    ledger, parent, children = _claimed(buckets, **ASHA)
    reads = [_training(ledger, c, {10: v}) for c, v in zip(children, values, strict=True)]
    with ThreadPoolExecutor(4) as pool:
        verdicts = list(pool.map(lambda r: early_stopping.judge(ledger, r), reads))
    after = ledger.get(parent.run_id)
    assert after is not None and after.sweep is not None
    assert after.sweep.evaluations == {c.run_id: {"10": v} for c, v in zip(children, values, strict=True)}
    assert verdicts[0] is None  # the best is within the top half of any cohort it is judged in
    stopped = [v for v in verdicts if v is not None]
    assert sorted(s.index for s in after.sweep.stopped) == sorted(s.index for s in stopped)
    for stop in stopped:  # each stop was judged on values that were really there, none lost
        assert all(values[int(i)] == v for i, v in stop.compared.items())
        better = sum(v > stop.value for v in [*stop.compared.values()])  # type: ignore[operator]
        assert better >= (len(stop.compared) + 1) // 2


def test_a_stopped_child_frees_its_slot_and_is_never_selected(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets, **ASHA)
    assert sweeps.take_slot(ledger, children[0], conversion_ready=True) is None
    assert sweeps.take_slot(ledger, children[1], conversion_ready=True) is None
    queued = sweeps.take_slot(ledger, children[2], conversion_ready=True)
    assert queued is not None and "slots are in use" in queued.reason
    early_stopping.judge(ledger, _training(ledger, children[0], {10: 0.40}))
    # Child 1 has the better final reward, but was stopped at the rung: it is never a candidate.
    stop = early_stopping.judge(ledger, _training(ledger, children[1], {10: 0.30}))
    assert stop is not None
    ended = ledger.edit(children[1].run_id, lambda r: (r.set_state("stopped"), "stopped")[1])
    sweeps.child_ended(ledger, ended)
    assert sweeps.take_slot(ledger, children[2], conversion_ready=True) is None  # its slot, at once
    for child, post in [(children[0], 0.5), (children[2], 0.6)]:
        ledger.edit(child.run_id, lambda r, p=post: _post(r, p))
    ledger.edit(children[3].run_id, lambda r: (r.set_state("cancelled"), "cancelled")[1])
    ledger.edit(children[1].run_id, lambda r: _post(r, 0.9, state=None))  # its post, had it gone on
    answers = [sweeps.arrive(ledger, ledger.get(c.run_id)) for c in (children[0], children[2])]  # type: ignore[arg-type]
    assert answers[-1]["wait"] is False
    final = ledger.get(parent.run_id)
    assert final is not None and final.sweep is not None and final.sweep.selection is not None
    assert final.sweep.selection.index == 2
    row = next(r for r in final.sweep.selection.table if r["index"] == 1)
    assert row["status"] == "not a candidate: stopped early"


def _post(r: RunRecord, post: float, state: str | None = "exporting") -> str:
    if state is not None and r.state != state:
        r.set_state("training") if r.state == "accepted" else None
        r.set_state(state)  # type: ignore[arg-type]
    r.results = {**r.results, "post": {"mean_reward": post}}
    return "post"


def test_a_run_outside_a_sweep_is_never_stopped(buckets: Buckets) -> None:
    ledger, _parent, children = _claimed(buckets, **ASHA)
    alone = children[0].model_copy(update={"lineage": children[0].lineage.model_copy(update={"sweep": None})})
    assert early_stopping.EarlyStopping(ledger, Logger("test")).evaluated(alone) is None


def test_no_rule_no_decision_and_no_copy(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets, select={"metric": "post_mean_reward"})
    for child, value in zip(children, [0.40, 0.30, 0.20, 0.10], strict=True):
        assert early_stopping.judge(ledger, _training(ledger, child, {10: value})) is None
    after = ledger.get(parent.run_id)
    assert after is not None and after.sweep is not None and after.sweep.evaluations == {}


def test_a_child_past_training_is_never_stopped_by_a_late_read(buckets: Buckets) -> None:
    """A read that lands after the child left training (it is exporting) records its values but
    stops nothing: only training can be cut short, and a trained child is a candidate."""
    ledger, parent, children = _claimed(buckets, **ASHA)
    early_stopping.judge(ledger, _training(ledger, children[0], {10: 0.40}))
    late = _training(ledger, children[1], {10: 0.10})
    late = ledger.edit(late.run_id, lambda r: (r.set_state("exporting"), "exporting")[1])
    assert early_stopping.judge(ledger, late) is None
    after = ledger.get(parent.run_id)
    assert after is not None and after.sweep is not None
    assert after.sweep.evaluations[late.run_id] == {"10": 0.10} and after.sweep.stopped == []


def test_a_child_whose_stop_was_written_but_not_carried_out_is_never_selected(buckets: Buckets) -> None:
    """The stop is on the parent, but the child's own end was interrupted and it trained on and
    arrived at selection: the parent's record of the stop stands, and it is not a candidate."""
    ledger, parent, children = _claimed(buckets, **ASHA)
    early_stopping.judge(ledger, _training(ledger, children[0], {10: 0.40}))
    assert early_stopping.judge(ledger, _training(ledger, children[1], {10: 0.30})) is not None
    for child, post in [(children[0], 0.5), (children[1], 0.9)]:  # the stopped one would win
        ledger.edit(child.run_id, lambda r, p=post: _post(r, p))
    for child in children[2:]:
        ledger.edit(child.run_id, lambda r: (r.set_state("cancelled"), "cancelled")[1])
    for child in children[:2]:
        sweeps.arrive(ledger, ledger.get(child.run_id))  # type: ignore[arg-type]
    final = ledger.get(parent.run_id)
    assert final is not None and final.sweep is not None and final.sweep.selection is not None
    assert final.sweep.selection.index == 0
    row = next(r for r in final.sweep.selection.table if r["index"] == 1)
    assert row["status"] == "not a candidate: stopped early"
