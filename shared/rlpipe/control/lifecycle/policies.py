"""The run policies: the concerns that shape a run's life beside its three stages, composed.

Why a list of policies and not ``if the run is a sweep`` or ``if it has a team`` inside the stage
operations: each concern (a sweep's shared slots and selection, its early-stopping rule, a team's
limits) is written once, in its own package, and the stage operations call every policy at the
same named points (the hooks of ``RunPolicy``), as kopf composes the handlers of one resource or
SkyPilot registers its recovery strategies. A new concern is a new policy in the list
``control.services.run_policies`` builds; the stage operations do not change.

Every hook's default is "not mine": a policy answers only for the runs it concerns (a sweep's
children, a declared team's runs), so a run that none concerns is planned, launched, selected and
ended exactly as a run on its own. ``RunPolicies`` calls them in the list's order and says how
their answers combine, one rule per hook.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rlpipe.core.failures import PermanentFailure
from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.record import EarlyStopRecord, RunRecord

# The run's commits: (model repo sha, datasets at their commits as ``lineage.data`` holds them).
Pins = tuple[str, dict[str, Any]]
# End a run the group ends with it: (run id, the failure to record).
EndMember = Callable[[str, dict[str, Any]], None]
# Cancel one Workflows execution with the operator's credentials: (run id, execution) → its row.
CancelExecution = Callable[[str, str], dict[str, Any]]
# What an operator asks of a run after it ended or was held back.
Operation = Literal["cancel", "retry", "promote"]


@dataclass(frozen=True)
class RetryAsked:
    """An operator's retry, as the stage function verified it (``control.operator_ops``)."""

    by: str
    reason: str
    from_stage: str | None
    key: str  # the caller-made key: a repeated call opens no second round
    caller: str | None
    start: Callable[[str], Any]  # starts a run's execution (``Intake.start_claimed``)


class AdmissionRefused(PermanentFailure):
    """A policy refuses the run at plan for good (a team's monthly budget cannot hold it): the stage
    operations finish it failed with ``rule``, before anything of it holds a TPU."""

    def __init__(self, reason: str, rule: str) -> None:
        super().__init__(reason)
        self.rule = rule


class RunPolicy:
    """The hooks, each answering "not mine" (see the module's docstring)."""

    # ---- plan ---------------------------------------------------------------------------------

    def pins(self, record: RunRecord, resolve: Callable[[], Pins]) -> Pins | None:
        """The commits the run trains on when this policy decides them (a sweep's child trains on
        its siblings'); None: not this policy's run."""
        return None

    def admission(self, record: RunRecord, *, conversion_ready: bool) -> Queued | None:
        """Why the run waits before it may hold a TPU (its workflow plans again later); None: it may
        go on as far as this policy is concerned. Raises ``AdmissionRefused`` when it never may."""
        return None

    def steps(self, record: RunRecord, stages: list[str]) -> list[str]:
        """The plan's steps, with any step this policy adds (a sweep's selection)."""
        return stages

    # ---- launch -------------------------------------------------------------------------------

    def may_launch(self, record: RunRecord, stage: str) -> None:
        """Raise ``PermanentFailure`` when the run must not launch ``stage`` (its team is no longer
        declared); return when it may."""
        return None

    # ---- train and select -----------------------------------------------------------------------

    def evaluated(self, record: RunRecord) -> EarlyStopRecord | None:
        """A status read recorded evaluations of the run's training: why this policy stops it now
        (the caller deletes its workloads and finishes it ``stopped``), or None."""
        return None

    def select(self, record: RunRecord) -> dict[str, Any] | None:
        """The ``select`` step's answer when this policy selects the run; None: not its run."""
        return None

    def arrived_at_selection(self, record: RunRecord) -> None:
        """The run trained, passed its gate and exported, and now waits for its group: what it held
        for its TPU work goes back."""
        return None

    # ---- an operator's operations ------------------------------------------------------------------

    def operator_refusal(self, record: RunRecord, caller: str | None) -> str | None:
        """Why ``caller`` may not operate on the run at all (cancel, retry, promote): not an operator
        of its team. None: this policy lets them."""
        return None

    def refusal(self, record: RunRecord, operation: Operation) -> str | None:
        """Why ``operation`` does not apply to this run as this policy sees it, naming what does
        (a sweep's parent is promoted through a child). None: this policy does not refuse it."""
        return None

    def retry(self, record: RunRecord, asked: RetryAsked) -> dict[str, Any] | None:
        """The retry of a run that stands for a group, done by this policy (a round of it and of
        each member that can still change its outcome); None: not a group of this policy's."""
        return None

    def cancel_members(
        self, record: RunRecord, cancel_execution: CancelExecution
    ) -> list[dict[str, Any]] | None:
        """Before a run that stands for a group is ended: each member's execution cancelled with
        the operator's credentials, a row each. None: not a group of this policy's."""
        return None

    # ---- the end --------------------------------------------------------------------------------

    def end_group(
        self, record: RunRecord, outcome: str, *, caller: str | None, end_member: EndMember
    ) -> RunRecord | None:
        """A person ends a run that stands for a group this policy keeps (a sweep's parent): its
        members not ended yet are ended by ``end_member``; → the run's record after. None: not a
        group of this policy's."""
        return None

    def ended(self, record: RunRecord) -> RunRecord | None:
        """After the run ended (safe to repeat): what it held goes back. → the group's run when
        this call ended that group (exactly one call does), for its status message; else None."""
        return None


@dataclass(frozen=True)
class RunPolicies:
    """Every policy of the deployment, called in order (``control.services.run_policies``)."""

    policies: Sequence[RunPolicy] = ()

    def pins(self, record: RunRecord, resolve: Callable[[], Pins]) -> Pins:
        """The first policy that decides the run's commits; else ``resolve`` pins them for it alone."""
        for policy in self.policies:
            if (pinned := policy.pins(record, resolve)) is not None:
                return pinned
        return resolve()

    def admission(self, record: RunRecord, *, conversion_ready: bool) -> Queued | None:
        """The first wait any policy names, in order (a sweep's slot before a team's place: a child
        without a slot takes no place). ``AdmissionRefused`` passes through."""
        for policy in self.policies:
            if (queued := policy.admission(record, conversion_ready=conversion_ready)) is not None:
                return queued
        return None

    def steps(self, record: RunRecord, stages: list[str]) -> list[str]:
        for policy in self.policies:
            stages = policy.steps(record, stages)
        return stages

    def may_launch(self, record: RunRecord, stage: str) -> None:
        for policy in self.policies:
            policy.may_launch(record, stage)

    def evaluated(self, record: RunRecord) -> EarlyStopRecord | None:
        for policy in self.policies:
            if (stop := policy.evaluated(record)) is not None:
                return stop
        return None

    def select(self, record: RunRecord) -> dict[str, Any]:
        for policy in self.policies:
            if (answer := policy.select(record)) is not None:
                return answer
        raise PermanentFailure(f"run {record.run_id} is not part of a sweep; there is nothing to select")

    def arrived_at_selection(self, record: RunRecord) -> None:
        for policy in self.policies:
            policy.arrived_at_selection(record)

    def operator_refusal(self, record: RunRecord, caller: str | None) -> str | None:
        return next((why for p in self.policies if (why := p.operator_refusal(record, caller))), None)

    def refusal(self, record: RunRecord, operation: Operation) -> str | None:
        return next((why for p in self.policies if (why := p.refusal(record, operation))), None)

    def retry(self, record: RunRecord, asked: RetryAsked) -> dict[str, Any] | None:
        return next((done for p in self.policies if (done := p.retry(record, asked)) is not None), None)

    def cancel_members(
        self, record: RunRecord, cancel_execution: CancelExecution
    ) -> list[dict[str, Any]] | None:
        return next(
            (rows for p in self.policies if (rows := p.cancel_members(record, cancel_execution)) is not None),
            None,
        )

    def end_group(
        self, record: RunRecord, outcome: str, *, caller: str | None, end_member: EndMember
    ) -> RunRecord | None:
        for policy in self.policies:
            if (ended := policy.end_group(record, outcome, caller=caller, end_member=end_member)) is not None:
                return ended
        return None

    def ended(self, record: RunRecord) -> RunRecord | None:
        """Every policy hears of the end (each gives back its own); the group a policy ended with it."""
        group = None
        for policy in self.policies:
            group = policy.ended(record) or group
        return group
