"""Early stopping of a sweep's children, decided where the sweep's other decisions are: its parent.

Why on the parent, under one compare-and-swap: a decision compares a child with its siblings, and
siblings report at once. Each status read of a child that records new evaluations copies them into
the parent's table (``SweepParent.evaluations``) and asks the request's rule (``core.early_stop``)
about that child in the same write, so two children reporting together are judged one after the
other, each against the other's values. A stop is written once (``SweepParent.stopped``); a
redelivered read finds it and gets the same answer, so carrying it out again (deleting the
workloads, finishing the child ``stopped``) is safe. The change itself is ``core.runs.stop_record``.
"""

from __future__ import annotations

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import RunPolicy
from rlpipe.control.sweep.coordination import parent_of, spec_of
from rlpipe.core.request import Request
from rlpipe.core.request.stop_schedule import rungs_of, schedule_of
from rlpipe.core.runs import stop_record
from rlpipe.core.runs.record import EarlyStopRecord, RunRecord


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
    mine = {str(step): value for step, value in stop_record.evaluations(child.results, select.metric).items()}
    request = Request.model_validate(child.request)
    _, final = schedule_of(request)
    # The evaluation at the final step is the end of training: nothing is left to save.
    mine = {step: value for step, value in mine.items() if int(step) < final}

    read = stop_record.ChildRead(me, member.index, mine, training, stop, select, rungs_of(stop, request))
    _, stopped = ledger.update(
        parent.run_id,
        lambda r: stop_record.judge(r, read),
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
