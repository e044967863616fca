"""A sweep's coordinator: intake's hooks (``control.lifecycle.coordinator``) and a run policy
(``control.lifecycle.policies``) for a sweep's parent and children.

Wired into intake, the stage operations and the reconciler by ``control.services``, so a sweep's
runs coordinate through their parent's record (``coordination``): its children share their pins,
their slots, one conversion and one selection, and its parent ends with them. A run that is not in
a sweep gets every hook's "not mine", exactly as if no sweep existed. The sweep's early-stopping
rule is a policy of its own (``early_stopping.EarlyStopping``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.coordinator import ClaimMember, Delivery, GatherFiles, RunCoordinator
from rlpipe.control.lifecycle.intake_result import IntakeResult
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import (
    CancelExecution,
    EndMember,
    Operation,
    Pins,
    RetryAsked,
    RunPolicy,
)
from rlpipe.control.sweep import coordination as sweeps
from rlpipe.control.sweep import intake as sweep_intake
from rlpipe.control.sweep import operations
from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.request import Request
from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.record import RunRecord

SELECT_STEP = "select"  # in the plan's stage list: the workflow calls the select op there


class SweepCoordinator(RunCoordinator, RunPolicy):
    def __init__(self, ledger: Ledger, log: Logger) -> None:
        self.ledger = ledger
        self.log = log

    def admit(
        self, request: Request, delivery: Delivery, claim: ClaimMember, gather: GatherFiles
    ) -> IntakeResult:
        """One parent record and a child run per point of the grid (``sweep.intake``)."""
        return sweep_intake.submit(self.ledger, request, delivery, claim, gather)

    def pins(self, record: RunRecord, resolve: Callable[[], Pins]) -> Pins | None:
        """A child trains on the commits the first of its siblings to plan pinned."""
        if record.lineage.sweep is None:
            return None
        return sweeps.shared_pins(self.ledger, record, resolve)

    def admission(self, record: RunRecord, *, conversion_ready: bool) -> Queued | None:
        """A child beyond ``max_parallel``, or waiting for the one conversion, is queued."""
        if record.lineage.sweep is None:
            return None
        return sweeps.take_slot(self.ledger, record, conversion_ready=conversion_ready)

    def steps(self, record: RunRecord, stages: list[str]) -> list[str]:
        """A child of a sweep with a select rule waits at ``select`` before publish (or at its end)."""
        if record.lineage.sweep is None:
            return stages
        if sweeps.spec_of(sweeps.parent_of(self.ledger, record)).select is None:
            return stages
        at = stages.index("publish") if "publish" in stages else len(stages)
        return [*stages[:at], SELECT_STEP, *stages[at:]]

    def select(self, record: RunRecord) -> dict[str, Any] | None:
        if record.lineage.sweep is None:
            return None
        if record.terminal:
            return {"wait": False, "selected": False, "reason": f"run {record.run_id} is {record.state}"}
        answer = sweeps.arrive(self.ledger, record)
        self.log.bind(run_id=record.run_id).info("sweep selection", **answer)
        return answer

    def refusal(self, record: RunRecord, operation: Operation) -> str | None:
        """A sweep's parent trains nothing itself: a gated sweep ships through one of its children."""
        if record.sweep is None:
            return None
        run = record.run_id
        if operation == "promote":
            return f"run {run} is a sweep; promote one of its gated children (rlpipe status {run} lists them)"
        if operation == "retry" and record.state == "gated":
            return (
                f"sweep {run} is gated (every child's model was held back); promote one of its children "
                f"with `rlpipe promote CHILD --reason …` (`rlpipe status {run}` lists them)"
            )
        return None

    def retry(self, record: RunRecord, asked: RetryAsked) -> dict[str, Any] | None:
        """A round of the sweep and of each child that can still change its outcome (``operations``)."""
        if record.sweep is None:
            return None
        return operations.retry_parent(self.ledger, record, asked)

    def cancel_members(
        self, record: RunRecord, cancel_execution: CancelExecution
    ) -> list[dict[str, Any]] | None:
        """The execution of each child that has not ended, cancelled first, so none goes on launching."""
        if record.sweep is None:
            return None
        return operations.cancel_children(self.ledger, record, cancel_execution)

    def end_group(
        self, record: RunRecord, outcome: str, *, caller: str | None, end_member: EndMember
    ) -> RunRecord | None:
        """Only a person ends a sweep (``rlpipe cancel``; ``caller`` the identity verified on it,
        recorded on the parent and on each child it ends); its children end it otherwise."""
        if record.sweep is None:
            return None
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

    def ended(self, record: RunRecord) -> RunRecord | None:
        return self.member_ended(record)

    def member_ended(self, record: RunRecord) -> RunRecord | None:
        """A child's slot back to its sweep; the parent when this call ended it."""
        if record.lineage.sweep is None:
            return None
        parent = sweeps.child_ended(self.ledger, record)
        if parent is not None:
            self.log.bind(run_id=parent.run_id).info("sweep ended", state=parent.state)
        return parent
