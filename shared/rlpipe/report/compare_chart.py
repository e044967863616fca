"""What the chart of ``rlpipe compare`` (and of a sweep's page) shows: every run's mean_reward
curve over one step axis, as data (``RunLine``), drawn by the caller's painter (``rlpipe.cli.charts``).

Why a module of its own: a comparison has a problem a single run's chart does not. Runs that
scored the same at every step (a sweep over a setting that changed nothing, or the simulator's
deterministic rewards) lie on one another, and drawn alike the last one hides the rest: three of
four runs look absent. So the page must know which runs' curves coincide (``coinciding``): the
painter draws them as nested bands, and the page names them in a note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlpipe.report.charts import (
    Point,
    fmt_reward,
)


@dataclass(frozen=True)
class RunLine:
    """One run's mean_reward by step on the comparison chart: pre at step 0, its evaluations, post
    at its final step."""

    gid: str  # [A-Za-z0-9_-]+; the line is ``compare-mean-reward-<gid>``
    label: str  # the run id, or on a sweep's page the child's point (and "(selected)" for the selected one)
    points: Sequence[Point]
    selected: bool = False
    stopped_at: int | None = None  # the step a sweep's rule stopped it at (its last evaluation)


def coinciding(lines: Sequence[RunLine]) -> list[list[RunLine]]:
    """The groups (two runs or more) whose curves lie on one another: the same steps with the same
    mean_reward at each, to the four decimals the page prints. Each group in the page's order."""
    groups: dict[tuple[tuple[int, str], ...], list[RunLine]] = {}
    for line in lines:
        key = tuple((p.step, fmt_reward(p.mean_reward)) for p in line.points if p.mean_reward is not None)
        if key:
            groups.setdefault(key, []).append(line)
    return [group for group in groups.values() if len(group) > 1]


# One line style per run, in order, beside its colour and marker: two runs' curves that lie on one
# another stay two visible lines (dashes of one show the other beneath).
LINE_STYLES: tuple[Any, ...] = (
    "solid",
    (0, (6, 2.5)),
    (0, (1.2, 1.8)),
    (0, (7, 2, 1.5, 2)),
    (0, (3, 3)),
    (0, (9, 2, 1.5, 2, 1.5, 2)),
)
