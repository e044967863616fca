"""What starting a run's Workflows execution exactly once changes in its record: the lease a
delivery takes before it starts one, the execution it records after, and the end of a run no
execution could be started for.

Kept apart from ``control.lifecycle.intake`` for the reason ``plan_record`` is: the ledger's
compare-and-swap may apply a change again on a newer record, so each is one function of the record
being replaced, and what it decides (who starts the execution, whose execution stands) is decided
on the record that is written.
"""

from __future__ import annotations

from typing import Literal

from rlpipe.core.failure_rules import reported
from rlpipe.core.runs.record import Execution, Failure, RunRecord, now

LeaseDecision = Literal["lease", "duplicate", "start-in-progress", "give-up"]


def take_lease(
    r: RunRecord, holder: str, *, now_epoch: float, lease_seconds: float, max_attempts: int
) -> tuple[str | None, LeaseDecision]:
    """→ (the event, what this delivery does): ``lease`` (it starts the execution), ``duplicate``
    (one started, or the run ended), ``start-in-progress`` (another holder's lease is live), or
    ``give-up`` (``max_attempts`` leases were taken and none started one)."""
    if r.execution.name or r.terminal:
        return None, "duplicate"
    lease_live = r.execution.lease_until is not None and r.execution.lease_until > now_epoch
    if r.execution.lease_holder and r.execution.lease_holder != holder and lease_live:
        return None, "start-in-progress"
    if r.execution.start_attempts >= max_attempts:
        return None, "give-up"
    r.execution.lease_holder = holder
    r.execution.lease_until = now_epoch + lease_seconds
    r.execution.start_attempts += 1
    return "start-lease", "lease"


def record_execution(r: RunRecord, name: str) -> tuple[str | None, str | None]:
    """→ (the event, the execution recorded before ours, if one was: ours is then the second)."""
    if r.execution.name == name:
        return None, None  # the execution's own plan step recorded it first
    if r.execution.name:
        return None, r.execution.name
    r.execution = Execution(name=name, started_at=now())
    return "execution-started", None


def not_started(r: RunRecord, message: str) -> str | None:
    """The run ends failed at ``start``: no execution could be started (none was recorded)."""
    if r.terminal or r.execution.name:
        return None
    r.set_state("failed")
    r.failure = Failure(tag="permanent", message=message, stage="start", rule=reported.EXECUTION_NOT_STARTED)
    return "failed"
