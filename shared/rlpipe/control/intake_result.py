"""What an intake delivery came to: the answer every intake path (single run or sweep) gives."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IntakeResult:
    # started | duplicate | start-in-progress | rejected | ignored | conflict | start-failed
    outcome: str
    run_id: str | None = None
    detail: str = ""
    execution: str | None = None
