"""Sweeps: which child publishes, and what the parent's state is, from the children's ledgers.

Pure (no I/O): the control plane's selection is a function of the children's recorded results
only, so the decision can be recomputed and explained from the ledgers alone. Expanding a sweep
into its children (and validating them) is the request's business (``core.request.grid``); it
is re-exported here with the request validator filled in, for callers above the request package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlpipe.core import gate
from rlpipe.core.request import Request, validate_request
from rlpipe.core.request.grid import (
    OVERRIDES,
    PROTECTED_TRAINING,
    TRAINING,
    Child,
    child_key,
    describe,
    key_problem,
    parallelism,
    points,
    short_key,
    size,
)
from rlpipe.core.request.grid import children as _children
from rlpipe.core.request.policy import Policy
from rlpipe.core.request.sweep import SelectRule, SweepSpec

__all__ = [
    "OVERRIDES",
    "PROTECTED_TRAINING",
    "TRAINING",
    "Candidate",
    "Child",
    "Selection",
    "SweepSpec",
    "child_key",
    "children",
    "describe",
    "key_problem",
    "parallelism",
    "parent_state",
    "points",
    "select",
    "short_key",
    "size",
]


def children(request: Request, policy: Policy | None = None) -> list[Child]:
    """The child requests, each validated as a request of its own. Raises ``RequestInvalid``."""
    return _children(request, policy or Policy(), validate_request)


# ---- selection --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A child as selection sees it: its state, whether it reached selection, its results."""

    run_id: str
    index: int
    point: Mapping[str, Any]
    state: str
    arrived: bool  # it trained, passed the gate (if any) and waited for the others
    results: Mapping[str, Any] = field(default_factory=dict)
    stopped: bool = False  # the sweep's early-stopping rule stopped it (its state may not say so yet)


@dataclass(frozen=True)
class Selection:
    run_id: str | None
    index: int | None
    value: float | None
    reason: str
    table: list[dict[str, Any]]


def select(rule: SelectRule, candidates: Sequence[Candidate]) -> Selection:
    """The best child by ``rule`` among those that arrived with the metric; a tie goes to the lower
    point index (the order the request wrote), so the answer never depends on timing."""
    table: list[dict[str, Any]] = []
    ranked: list[tuple[float, int, Candidate]] = []
    for c in sorted(candidates, key=lambda c: c.index):
        value = gate.metric(c.results, rule.metric) if c.arrived else None
        if (
            c.state == "stopped" or c.stopped
        ):  # early, by the sweep's rule (core.early_stop): never a candidate
            status = "not a candidate: stopped early"
        elif not c.arrived:
            status = f"not a candidate: it ended {c.state}"
        elif value is None:
            status = f"not a candidate: no {rule.metric} was printed"
        else:
            status = "candidate"
            ranked.append((value if rule.direction == "min" else -value, c.index, c))
        table.append({"index": c.index, "run_id": c.run_id, "value": value, "status": status})
    if not ranked:
        return Selection(
            None, None, None, f"no child can be selected by {rule.metric}: " + _why_none(table), table
        )
    _, _, best = min(ranked)
    value = gate.metric(best.results, rule.metric)
    word = "highest" if rule.direction == "max" else "lowest"
    others = [
        f"child {r['index']} {r['value']:.4f}"
        for r in table
        if r["status"] == "candidate" and r["index"] != best.index
    ]
    reason = (
        f"child {best.index} ({describe(best.point)}) has the {word} {rule.metric}, {value:.4f}, "
        f"of {len(ranked)} candidate{'s' if len(ranked) != 1 else ''}"
        + (f" (others: {', '.join(others)})" if others else "")
    )
    skipped = [f"child {r['index']} is {r['status']}" for r in table if r["status"] != "candidate"]
    if skipped:
        reason += "; " + "; ".join(skipped)
    for row in table:
        row["selected"] = row["index"] == best.index
    return Selection(best.run_id, best.index, value, reason, table)


def _why_none(table: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join(f"child {r['index']} is {r['status']}" for r in table) or "no children"


# ---- the parent's state -------------------------------------------------------------------------

ACTIVE_STATES = frozenset({"converting", "training", "exporting", "publishing"})
# A child stopped early ended as its sweep meant it to: it neither fails nor cancels the sweep.
ENDED_STATES = frozenset({"succeeded", "failed", "cancelled", "gated", "stopped"})


def parent_state(states: Sequence[str], *, selecting: bool, winner_state: str | None, cancelled: bool) -> str:
    """The parent's state, from its children's: the parent does nothing itself, so what it is
    follows from what they are (docs/sweeps.md has the table)."""
    if cancelled:
        return "cancelled"
    if any(s not in ENDED_STATES for s in states):
        if winner_state == "publishing":
            return "publishing"
        return (
            "training"
            if any(s in ACTIVE_STATES or s in ("succeeded", "failed", "gated", "stopped") for s in states)
            else "accepted"
        )
    if selecting:
        if winner_state is not None:
            return "succeeded" if winner_state == "succeeded" else "failed"
        if "failed" in states:
            return "failed"
        if "cancelled" in states:  # children cancelled one by one (or before the parent was)
            return "cancelled"
        return "gated" if "gated" in states else "failed"
    if "failed" in states:
        return "failed"
    if "cancelled" in states:
        return "cancelled"
    return "gated" if all(s == "gated" for s in states) else "succeeded"  # stopped counts as neither
