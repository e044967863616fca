"""What one reconcile pass saw and did: printed by ``rlpipe reconcile``, logged by the function.

The same report serves the dry run (every action ``planned``) and the real pass, so what a person
reviews with ``--dry-run`` reads exactly like what the next tick will do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlpipe.reconcile.cursor import Cursor, describe
from rlpipe.reconcile.repairs import Outcome


@dataclass
class PassReport:
    dry_run: bool
    cursor_before: Cursor
    cursor_after: Cursor | None = None
    examined: int = 0  # ledgers (run prefixes) looked at
    workloads: int = 0  # cluster objects looked at
    round_complete: bool = False  # the ledger listing reached its end in this pass
    stopped: str | None = None  # "budget" when the time budget cut the pass short
    seconds: float = 0.0
    cursor_saved: bool | None = None  # None: not written (dry run)
    outcomes: list[Outcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # pass-level errors (e.g. the cluster listing)
    started_at: str = ""  # when the pass began: a stuck suspicion names its pass by it

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "error"]

    @property
    def failed(self) -> bool:
        return bool(self.errors or self.problems)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            key = f"{o.action.kind if o.action else 'inspect'}:{o.status}"
            out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))

    def summary(self) -> dict[str, Any]:
        """What the cursor keeps of this pass, and what the function logs."""
        return {
            "examined": self.examined,
            "workloads": self.workloads,
            "actions": self.counts(),
            "errors": len(self.errors) + len(self.problems),
            "round_complete": self.round_complete,
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
            "dry_run": self.dry_run,
            "started_at": self.started_at,
        }

    def render(self) -> str:
        mode = "reconcile (dry run: nothing is changed)" if self.dry_run else "reconcile"
        where = describe(self.cursor_before)
        end = (
            "end of round"
            if self.round_complete
            else (
                f"stopped by the time budget after {self.cursor_after.after}"
                if self.stopped and self.cursor_after
                else "stopped early"
            )
        )
        lines = [
            f"{mode}: {self.examined} ledgers ({where}; {end}), {self.workloads} workloads, "
            f"{self.seconds:.1f}s"
        ]
        acted = [o for o in self.outcomes if o.status != "noop" or o.detail]
        lines += [f"  {o.line()}" for o in acted] or ["  nothing to do"]
        lines += [f"  ERROR {p}" for p in self.problems]
        if self.cursor_after is not None and not self.dry_run:
            saved = "saved" if self.cursor_saved else "NOT saved (another pass moved it)"
            lines.append(f"next pass: {describe(self.cursor_after)} (cursor {saved})")
        elif self.cursor_after is not None:
            lines.append(
                f"a real pass would continue with {describe(self.cursor_after)} (cursor not written)"
            )
        return "\n".join(lines)
