"""Early stopping of a sweep's children, decided where the sweep's other decisions are: its parent.

Why on the parent, under one compare-and-swap: a decision compares a child with its siblings, and
siblings report at once. Each status read of a child that records new evaluations copies them into
the parent's table (``SweepParent.evaluations``) and asks the request's rule (``core.early_stop``)
about that child in the same write, so two children reporting together are judged one after the
other, each against the other's values. A stop is written once (``SweepParent.stopped``); a
redelivered read finds it and gets the same answer, so carrying it out again (deleting the
workloads, finishing the child ``stopped``) is safe.
"""

from __future__ import annotations

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import RunPolicy
from rlpipe.control.sweep.coordination import parent_of, spec_of
from rlpipe.core import early_stop
from rlpipe.core.request import Request
from rlpipe.core.request.stop_schedule import rungs_of, schedule_of
from rlpipe.core.runs.record import EarlyStopRecord, RunRecord, now


def judge(ledger: Ledger, child: RunRecord) -> EarlyStopRecord | None:
    """The stop of ``child`` (its status read just recorded its evaluations), or None: it goes on.

    A stop written before is returned whatever the read brought, so a stop whose carrying out
    was interrupted is carried out by the next read. Otherwise the child is judged only when the
    read brought an evaluation the parent had not seen, only before the selection, and only while
    its training attempt runs."""
    member = child.lineage.sweep
    if member is None:
        return None
    parent = parent_of(ledger, child)
    spec = spec_of(parent)
    stop, select = spec.stopping, spec.select
    if stop.rule == "none" or select is None:
        return None
    me = child.run_id
    attempt = child.current_attempt("train")
    # Only a child training now can be cut short (a read that found its training ended decides nothing).
    training = child.state == "training" and attempt is not None and attempt.phase == "running"
    mine = {str(step): value for step, value in early_stop.evaluations(child.results, select.metric).items()}
    request = Request.model_validate(child.request)
    rungs = rungs_of(stop, request)
    _, final = schedule_of(request)
    # The evaluation at the final step is the end of training: nothing is left to save.
    mine = {step: value for step, value in mine.items() if int(step) < final}

    def change(r: RunRecord) -> tuple[str | None, EarlyStopRecord | None]:
        s = r.sweep
        assert s is not None
        done = next((x for x in s.stopped if x.run_id == me), None)
        if done is not None:
            return None, done  # decided before (a redelivered read): the same answer
        known = s.evaluations.get(me, {})
        table = {**known, **mine}
        if table == known:
            return None, None
        s.evaluations[me] = dict(sorted(table.items(), key=lambda kv: int(kv[0])))
        if s.selection is not None or me in s.arrived or not training:
            return "sweep-evaluated", None
        tables = {
            i: {int(step): value for step, value in s.evaluations.get(run_id, {}).items()}
            for i, run_id in enumerate(s.children)
        }
        fresh = {int(step) for step in table if step not in known}
        decision = early_stop.decide(stop, tables, member.index, me, select, rungs, new_steps=fresh)
        if decision is None or not decision.stop:
            return "sweep-evaluated", None
        record = EarlyStopRecord(
            run_id=me,
            index=member.index,
            rule=decision.rule,
            metric=select.metric,
            step=decision.step,
            value=decision.value,
            threshold=decision.threshold,
            compared={str(i): v for i, v in decision.compared},
            reason=f"stopped early by {decision.rule}: {decision.reason}",
            at=now(),
        )
        s.stopped.append(record)
        return "sweep-early-stopped", record

    _, stopped = ledger.update(
        parent.run_id,
        change,
        detail=lambda r: {"child": me, "evaluations": mine},
    )
    return stopped


class EarlyStopping(RunPolicy):
    """The sweep's early-stopping rule as a run policy: a child's new evaluations, judged (``judge``)
    at each status read of its training; every other run goes on."""

    def __init__(self, ledger: Ledger, log: Logger) -> None:
        self.ledger = ledger
        self.log = log

    def evaluated(self, record: RunRecord) -> EarlyStopRecord | None:
        if record.lineage.sweep is None:
            return None
        stop = judge(self.ledger, record)
        if stop is not None:
            self.log.bind(run_id=record.run_id).info(
                "sweep stopped a child early", rule=stop.rule, step=stop.step, reason=stop.reason
            )
        return stop
