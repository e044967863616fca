"""The poller's report: one outcome per watch entry, each with the sentence a person reads.

Outcomes: ``released`` (a run was started, or would be in a dry run), ``ignored`` (baseline,
unchanged, README-only, disabled), ``waiting`` (upload in progress, debounce, rate limit, another
poll starting the run), ``no-access`` (gated: accept the license) and ``error`` (an invalid
entry, a missing repo, the Hub refusing). ``reason`` says which sub-case, for machines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlpipe.core.problems import Problem

Outcome = Literal["released", "ignored", "waiting", "no-access", "error"]


@dataclass(frozen=True)
class EntryOutcome:
    """What one poll did (or, in a dry run, would do) for one watch entry, and why."""

    repo: str | None
    branch: str | None
    outcome: Outcome
    detail: str  # the sentence a person reads: "new release abc1234: 12 weight files changed; run r..."
    sha: str | None = None
    reason: str = ""  # machine-readable sub-case, e.g. baseline, unchanged, debounce, rate-limited, gated
    watch: str | None = None  # the entry's key in the repo's state: "<branch>@<template-hash>"
    run_id: str | None = None
    changed: tuple[str, ...] = ()
    wait_until: str | None = None
    problems: tuple[Problem, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "repo": self.repo,
            "branch": self.branch,
            "outcome": self.outcome,
            "sha": self.sha,
            "detail": self.detail,
            "reason": self.reason,
        }
        optional = {
            "watch": self.watch,
            "run_id": self.run_id,
            "wait_until": self.wait_until,
            "changed": list(self.changed),
            "problems": [{"path": p.path, "message": p.message, "fix": p.fix} for p in self.problems],
        }
        out.update({k: v for k, v in optional.items() if v})
        return out


@dataclass(frozen=True)
class PollReport:
    outcomes: tuple[EntryOutcome, ...]
    dry_run: bool = False
    checked_at: str = ""

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "checked_at": self.checked_at,
            "entries": [o.as_dict() for o in self.outcomes],
        }

    def render(self) -> str:
        if not self.outcomes:
            return "no watch entries"
        lines = []
        for o in self.outcomes:
            where = f"{o.repo}@{o.branch}" if o.repo else "watch list"
            lines.append(f"{where:<48} {o.outcome:<10} {o.detail}")
            lines += [f"{'':<60}- {p}" for p in o.problems]
        return "\n".join(lines)
