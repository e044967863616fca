"""What one status read of a sweep's child changes in its parent's record: the child's new
evaluations copied into the parent's table, and the early-stopping rule's verdict on that child.

Kept apart from ``control.sweep.early_stopping`` for the reason ``sweep_record`` is: the change is a
compare-and-swap on the parent, which may apply it again on a newer record, so it is one function
of the record being replaced. Two children reporting at once are then judged one after the other,
each against the other's values, and a stop written before is found and returned again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlpipe.core import early_stop
from rlpipe.core.request.sweep import EarlyStop, Metric, SelectRule
from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import EarlyStopRecord, RunRecord, now

# The number each select metric is at an intermediate evaluation: the field of train_rl's
# ``Intermediate Eval`` line that its post value is read from (``core.gate.metric``).
_FIELD: dict[str, str] = {
    "post_mean_reward": "mean_reward",
    "reward_gain": "mean_reward",
    "post_accuracy": "accuracy",
}


def evaluations(raw_results: object, metric: Metric) -> dict[int, float]:
    """A child's evaluations of ``metric`` by step, from its record's results.

    A resumed attempt evaluates again at steps an earlier one reached; the newest attempt's value
    stands, as it is the model that goes on. ``reward_gain`` at a step is that step's mean_reward
    minus the base model's (``pre``): without a ``pre`` there is no gain, so no evaluation. Every
    child of a sweep starts from the same pinned model and data, so the gain orders the children
    as mean_reward does; it is read as a gain so the values shown are the metric's own."""
    read = recorded.results(raw_results)
    pre = read.pre.mean_reward if read.pre is not None else None
    field = _FIELD[metric]
    newest: dict[int, tuple[int, float]] = {}
    for e in read.intermediate or []:
        value = getattr(e, field)
        if e.step is None or value is None:
            continue
        if metric == "reward_gain":
            if pre is None:
                continue
            value = value - pre
        attempt = e.attempt or 0
        if e.step not in newest or attempt >= newest[e.step][0]:
            newest[e.step] = (attempt, float(value))
    return {step: value for step, (_, value) in newest.items() if math.isfinite(value)}


@dataclass(frozen=True)
class ChildRead:
    """What the child's read brought, and what its rule needs to judge it."""

    run_id: str
    index: int  # its place in the sweep's grid
    evaluations: dict[str, float]  # step → the select metric, before the final step
    training: bool  # training now: only such a child can be cut short
    stop: EarlyStop
    select: SelectRule
    rungs: Sequence[int]


def judge(r: RunRecord, read: ChildRead) -> tuple[str | None, EarlyStopRecord | None]:
    """(the event to record or None, the child's stop or None) for the parent ``r``."""
    s = r.sweep
    if s is None:
        raise ValueError(f"run {r.run_id} is not a sweep's parent")
    me = read.run_id
    done = next((x for x in s.stopped if x.run_id == me), None)
    if done is not None:
        return None, done  # decided before (a redelivered read): the same answer
    known = s.evaluations.get(me, {})
    table = {**known, **read.evaluations}
    if table == known:
        return None, None
    s.evaluations[me] = dict(sorted(table.items(), key=lambda kv: int(kv[0])))
    if s.selection is not None or me in s.arrived or not read.training:
        return "sweep-evaluated", None
    tables = {
        i: {int(step): value for step, value in s.evaluations.get(run_id, {}).items()}
        for i, run_id in enumerate(s.children)
    }
    fresh = {int(step) for step in table if step not in known}
    decision = early_stop.decide(read.stop, tables, read.index, me, read.select, read.rungs, new_steps=fresh)
    if decision is None or not decision.stop:
        return "sweep-evaluated", None
    record = EarlyStopRecord(
        run_id=me,
        index=read.index,
        rule=decision.rule,
        metric=read.select.metric,
        step=decision.step,
        value=decision.value,
        threshold=decision.threshold,
        compared={str(i): v for i, v in decision.compared},
        reason=f"stopped early by {decision.rule}: {decision.reason}",
        at=now(),
    )
    s.stopped.append(record)
    return "sweep-early-stopped", record
