"""Which execution drives a run, and the refusals that keep every other caller out.

Why: after a start lease lapses, a second Workflows execution can exist for the same run. Only
the one recorded in the ledger (``execution.name``) may plan, launch, poll, finish or clean up;
a lagging one that polled an old attempt would call it "not found" and fail the run, and its
cleanup would delete the live attempt. Callers that are not executions (the CLI's cancel, the
reconciler) pass no execution id and act as operators.
"""

from __future__ import annotations

from rlpipe.core.failures import PermanentFailure
from rlpipe.core.runs.record import RunRecord


class NotOwner(PermanentFailure):
    """The calling execution does not drive this run; it must stop without touching the run."""

    @property
    def tag(self) -> str:
        return "not_owner"


class SupersededAttempt(PermanentFailure):
    """A newer attempt of the stage exists; an older one is never launched (or kept) again."""

    @property
    def tag(self) -> str:
        return "superseded"


def owns(record: RunRecord, execution_id: str | None) -> bool:
    """True for an operator (no execution id) and for the execution recorded in the ledger."""
    if execution_id is None:
        return True
    name = record.execution.name
    return name is not None and name.rsplit("/", 1)[-1] == execution_id


def require_owner(record: RunRecord, execution_id: str | None) -> None:
    # A recorded owner never changes, so a stale read that shows another owner is already final.
    if not owns(record, execution_id):
        raise NotOwner(
            f"run {record.run_id} is driven by execution {record.execution.name}, not {execution_id}"
        )
