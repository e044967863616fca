"""What a sweep's page says of the sweep itself: its name, its points, its rule, which child it
selected, and when nothing was published, why.

Why a module of its own: the comparison page (``rlpipe.report.compare``) compares any runs; a
sweep's page compares its children, and a reader of it asks different questions: which point is
which line (the legend names points, not run ids), which child won, and did anything publish. A
cancelled sweep must not show a green "selected" badge as if its winner had published.

Pure, like the rest of the package: the parent's record and its children's in, facts out. A point is named as ``rlpipe status PARENT`` names it (``core.request.grid.describe``,
the ``overrides`` of ``cli/sweep_view.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlpipe.core.request.grid import describe
from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import RunRecord, SweepParent


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


def _published(children: Sequence[RunRecord]) -> str | None:
    for child in children:
        if any(a.stage == "publish" and a.phase == "succeeded" for a in child.attempts):
            return child.run_id
    return None


def _points(sweep: SweepParent, children: Sequence[RunRecord]) -> tuple[dict[str, str], dict[str, int]]:
    """Each child's point: the parent's grid by the child's index, else the child's own record."""
    points, indexes = {}, {}
    for child in children:
        run_id, member = child.run_id, child.lineage.sweep
        index = (
            sweep.children.index(run_id) if run_id in sweep.children else (member.index if member else None)
        )
        if index is not None and index < len(sweep.points):
            point: dict[str, Any] = sweep.points[index]
        else:
            point = member.point if member is not None else {}
        if index is not None:
            indexes[run_id] = index
        if point:
            points[run_id] = describe(point)
    return points, indexes


def sweep_facts(parent: RunRecord, children: Sequence[RunRecord]) -> SweepFacts:
    """The sweep's facts for its page, from the parent's record and the children's records
    compared on it."""
    sweep = parent.sweep
    if sweep is None:
        raise ValueError(f"run {parent.run_id} is not a sweep's parent")
    state = parent.state
    selection = sweep.selection
    named = recorded.request(parent.request).sweep
    rule = (named.select if named else None) or recorded.SelectNamed()
    cancelled = sweep.cancelled or state == "cancelled"
    published = _published(children)
    points, indexes = _points(sweep, children)
    chosen = selection.run_id if selection is not None else None
    if chosen is not None and chosen not in {c.run_id for c in children}:
        chosen = None  # the winner's record is not on the page
    why: str | None = None
    if cancelled and published is None:
        why = "the sweep was cancelled"
        if sweep.cancelled_by:  # the identity Google verified on rlpipe cancel
            why += f" by {sweep.cancelled_by}"
        if chosen is not None:
            why += f" after its rule selected {chosen} ({points.get(chosen) or 'point not recorded'})"
    elif selection is not None and selection.run_id is None:
        why = f"no child could be selected: {selection.reason or 'no reason recorded'}"
    marked = chosen if why is None else None
    return SweepFacts(
        run_id=parent.run_id,
        state=state,
        size=len(sweep.children),
        points=points,
        indexes=indexes,
        rule=(
            f"the {'lowest' if rule.direction == 'min' else 'highest'} {rule.metric}" if rule.metric else None
        ),
        selected=marked,
        reason=(selection.reason or None) if marked is not None and selection is not None else None,
        cancelled=cancelled,
        published=published,
        nothing_published=why,
    )
