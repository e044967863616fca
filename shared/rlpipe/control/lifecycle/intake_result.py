"""What an intake delivery came to: the answer every intake path (single run or sweep) gives, and
the conflict any of them may find."""

from __future__ import annotations

from dataclasses import dataclass

from rlpipe.core.runs.record import RunRecord


@dataclass(frozen=True)
class IntakeResult:
    # started | duplicate | start-in-progress | rejected | ignored | conflict | start-failed
    outcome: str
    run_id: str | None = None
    detail: str = ""
    execution: str | None = None


class RequestConflict(Exception):
    """The run a request names exists with a different request: intake answers ``conflict`` (and
    records the rejection under the delivery's key)."""

    def __init__(self, existing: RunRecord) -> None:
        super().__init__(f"run {existing.run_id} exists with a different request")
        self.existing = existing
