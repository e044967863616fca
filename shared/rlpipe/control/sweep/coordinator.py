"""A sweep's coordinator: the hooks of ``control.lifecycle.coordinator`` for a sweep's parent and children.

Wired into intake and the stage operations by ``control.services`` (and the reconciler's wiring),
so a sweep's runs coordinate through their parent's record (``coordination``) while a run that
is not in a sweep gets the plain answers of ``RunCoordinator``, exactly as if no sweep existed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.coordinator import (
    ClaimMember,
    Delivery,
    EndMember,
    GatherFiles,
    Pins,
    RunCoordinator,
)
from rlpipe.control.lifecycle.intake_result import IntakeResult
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.sweep import coordination as sweeps
from rlpipe.control.sweep import early_stopping
from rlpipe.control.sweep import intake as sweep_intake
from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.request import Request
from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.record import EarlyStopRecord, RunRecord

SELECT_STEP = "select"  # in the plan's stage list: the workflow calls the select op there


class SweepCoordinator(RunCoordinator):
    def __init__(self, ledger: Ledger, log: Logger) -> None:
        self.ledger = ledger
        self.log = log

    def admit(
        self, request: Request, delivery: Delivery, claim: ClaimMember, gather: GatherFiles
    ) -> IntakeResult:
        """One parent record and a child run per point of the grid (``sweep.intake``)."""
        return sweep_intake.submit(self.ledger, request, delivery, claim, gather)

    def pins(self, record: RunRecord, resolve: Callable[[], Pins]) -> Pins:
        """A child trains on the commits the first of its siblings to plan pinned."""
        if record.lineage.sweep is None:
            return super().pins(record, resolve)
        return sweeps.shared_pins(self.ledger, record, resolve)

    def slot(self, record: RunRecord, *, conversion_ready: bool) -> Queued | None:
        """A child beyond ``max_parallel``, or waiting for the one conversion, is queued."""
        if record.lineage.sweep is None:
            return super().slot(record, conversion_ready=conversion_ready)
        return sweeps.take_slot(self.ledger, record, conversion_ready=conversion_ready)

    def with_selection(self, record: RunRecord, stages: list[str]) -> list[str]:
        """A child of a sweep with a select rule waits at ``select`` before publish (or at its end)."""
        if record.lineage.sweep is None:
            return super().with_selection(record, stages)
        if sweeps.spec_of(sweeps.parent_of(self.ledger, record)).select is None:
            return stages
        at = stages.index("publish") if "publish" in stages else len(stages)
        return [*stages[:at], SELECT_STEP, *stages[at:]]

    def select(self, record: RunRecord) -> dict[str, Any]:
        if record.lineage.sweep is None:
            return super().select(record)
        if record.terminal:
            return {"wait": False, "selected": False, "reason": f"run {record.run_id} is {record.state}"}
        answer = sweeps.arrive(self.ledger, record)
        self.log.bind(run_id=record.run_id).info("sweep selection", **answer)
        return answer

    def evaluated(self, record: RunRecord) -> EarlyStopRecord | None:
        """A child's new evaluations, judged by its sweep's early-stopping rule (``early_stopping``)."""
        if record.lineage.sweep is None:
            return super().evaluated(record)
        stop = early_stopping.judge(self.ledger, record)
        if stop is not None:
            self.log.bind(run_id=record.run_id).info(
                "sweep stopped a child early", rule=stop.rule, step=stop.step, reason=stop.reason
            )
        return stop

    def end_group(
        self, record: RunRecord, outcome: str, *, caller: str | None, end_member: EndMember
    ) -> RunRecord:
        """Only a person ends a sweep (``rlpipe cancel``; ``caller`` the identity verified on it,
        recorded on the parent and on each child it ends); its children end it otherwise."""
        if record.sweep is None:
            return super().end_group(record, outcome, caller=caller, end_member=end_member)
        if outcome != "cancelled":
            raise PermanentFailure(
                f"run {record.run_id} is a sweep; it ends when its children do (only cancel ends it early)"
            )
        failure = {
            "tag": "cancelled",
            "message": f"cancelled with its sweep {record.run_id}",
            "rule": reported.SWEEP_CANCELLED,
        }
        updated = sweeps.cancel(
            self.ledger, record.run_id, lambda run_id: end_member(run_id, failure), caller=caller
        )
        self.log.bind(run_id=record.run_id).info("sweep cancelled", state=updated.state)
        return updated

    def member_ended(self, record: RunRecord) -> RunRecord | None:
        """A child's slot back to its sweep; the parent when this call ended it."""
        if record.lineage.sweep is None:
            return super().member_ended(record)
        parent = sweeps.child_ended(self.ledger, record)
        if parent is not None:
            self.log.bind(run_id=parent.run_id).info("sweep ended", state=parent.state)
        return parent
