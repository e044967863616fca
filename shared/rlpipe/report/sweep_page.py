"""What a sweep's page says of the sweep itself: its name, its points, its rule, which child it
selected, and when nothing was published, why.

Why a module of its own: the comparison page (``rlpipe.report.compare``) compares any runs; a
sweep's page compares its children, and a reader of it asks different questions: which point is
which line (the legend names points, not run ids), which child won, and did anything publish. A
cancelled sweep must not show a green "selected" badge as if its winner had published.

Pure, like the rest of the package: the parent's ledger record and its children's (as JSON) in,
facts out. A point is named as ``rlpipe status PARENT`` names it (``core.request.grid.describe``,
the ``overrides`` of ``cli/sweep_view.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlpipe.core.request.grid import describe
from rlpipe.report.rows import _dict, _int, _str


@dataclass(frozen=True)
class SweepFacts:
    run_id: str  # the parent's
    state: str
    size: int  # points in the grid
    points: dict[str, str]  # child run id → its point as a person reads it (``learning_rate=2e-05``)
    indexes: dict[str, int]  # child run id → its point's index
    rule: str | None  # "the highest post_mean_reward", or None: the children are not compared
    selected: str | None  # the child to mark selected (never on a cancelled sweep that published nothing)
    reason: str | None  # the selection's reason, when one is marked
    cancelled: bool
    published: str | None  # the child whose publish succeeded, if one did
    nothing_published: str | None  # why nothing was published, when the sweep ended without it

    def point(self, run_id: str) -> str:
        return self.points.get(run_id) or "point not recorded"


def _published(children: Sequence[dict[str, Any]]) -> str | None:
    for child in children:
        for attempt in child.get("attempts") or []:
            a = _dict(attempt)
            if a.get("stage") == "publish" and a.get("phase") == "succeeded":
                return str(child.get("run_id"))
    return None


def _points(
    sweep: dict[str, Any], children: Sequence[dict[str, Any]]
) -> tuple[dict[str, str], dict[str, int]]:
    """Each child's point: the parent's grid by the child's index, else the child's own record."""
    grid = [_dict(p) for p in sweep.get("points") or []]
    ids = [str(c) for c in sweep.get("children") or []]
    points, indexes = {}, {}
    for child in children:
        run_id = str(child.get("run_id") or "?")
        member = _dict(_dict(child.get("lineage")).get("sweep"))
        index = ids.index(run_id) if run_id in ids else _int(member.get("index"))
        point = grid[index] if index is not None and index < len(grid) else _dict(member.get("point"))
        if index is not None:
            indexes[run_id] = index
        if point:
            points[run_id] = describe(point)
    return points, indexes


def sweep_facts(parent: dict[str, Any], children: Sequence[dict[str, Any]]) -> SweepFacts:
    """The sweep's facts for its page, from the parent's record (``RunRecord.model_dump``) and
    the children's records compared on it."""
    sweep = _dict(parent.get("sweep"))
    if not sweep:
        raise ValueError(f"run {parent.get('run_id')} is not a sweep's parent")
    state = str(parent.get("state") or "?")
    selection = _dict(sweep.get("selection"))
    rule = _dict(_dict(_dict(parent.get("request")).get("sweep")).get("select"))
    cancelled = bool(sweep.get("cancelled")) or state == "cancelled"
    published = _published(children)
    points, indexes = _points(sweep, children)
    chosen = _str(selection.get("run_id"))
    if chosen is not None and chosen not in {str(c.get("run_id")) for c in children}:
        chosen = None  # the winner's record is not on the page
    why: str | None = None
    if cancelled and published is None:
        why = "the sweep was cancelled"
        if _str(sweep.get("cancelled_by")):  # the identity Google verified on rlpipe cancel
            why += f" by {sweep['cancelled_by']}"
        if chosen is not None:
            why += f" after its rule selected {chosen} ({points.get(chosen) or 'point not recorded'})"
    elif selection and selection.get("run_id") is None:
        why = f"no child could be selected: {selection.get('reason') or 'no reason recorded'}"
    marked = chosen if why is None else None
    return SweepFacts(
        run_id=str(parent.get("run_id") or "?"),
        state=state,
        size=len(sweep.get("children") or []),
        points=points,
        indexes=indexes,
        rule=(
            f"the {'lowest' if rule.get('direction') == 'min' else 'highest'} {rule.get('metric')}"
            if rule.get("metric")
            else None
        ),
        selected=marked,
        reason=_str(selection.get("reason")) if marked is not None else None,
        cancelled=cancelled,
        published=published,
        nothing_published=why,
    )
