"""The chart of ``rlpipe compare`` (and of a sweep's page): every run's mean_reward curve over one
step axis, drawn by matplotlib's SVG backend as ``rlpipe.report.charts`` draws the run report's.

Why a module of its own: a comparison has a problem a single run's chart does not. Runs that
scored the same at every step (a sweep over a setting that changed nothing, or the simulator's
deterministic rewards) lie on one another, and drawn alike the last one hides the rest: three of
four runs look absent. So each run gets a line style and a marker as well as a colour, and runs
whose curves coincide (``coinciding``) are drawn as nested bands, the page naming them in a note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlpipe.report.charts import (
    MARKERS_UP_TO,
    REWARD_COLOUR,
    SERIES_COLOURS,
    SERIES_MARKERS,
    Point,
    _style,
    _svg,
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


def compare_svg(lines: Sequence[RunLine]) -> str:
    """Every run's mean_reward curve overlaid on one step axis, each run in a colour, line style
    and marker of its own; the selected run drawn thicker, each run's post value labelled at its
    final step. Runs whose curves coincide (``coinciding``) are drawn widest first, each later one
    narrower, with hollow markers nested smaller: every one of them shows as a band around the next.
    A run a sweep's rule stopped (``RunLine.stopped_at``) gets a cross at that step, labelled."""
    from matplotlib.figure import Figure

    stacked: dict[str, tuple[int, int]] = {}  # gid → (its place in its group, the group's size)
    for group in coinciding(lines):
        for place, line in enumerate(group):
            stacked[line.gid] = (place, len(group))
    with _style():
        fig = Figure(figsize=(9.5, 4.2), layout="constrained")
        ax = fig.add_subplot()
        for i, line in enumerate(lines):
            xy = [(p.step, p.mean_reward) for p in line.points if p.mean_reward is not None]
            if not xy:
                continue
            colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
            width, size, zorder = (2.6, 5.0, 4.0) if line.selected else (1.3, 4.0, 3.0)
            if line.gid in stacked:
                place, size_of_group = stacked[line.gid]
                below = size_of_group - 1 - place  # how many of its group are drawn over it
                width, size, zorder = 1.2 + 1.5 * below, 4.0 + 3.0 * below, 3.0 + place / 100
            ax.plot(
                *zip(*xy, strict=True),
                color=colour,
                linestyle=LINE_STYLES[i % len(LINE_STYLES)],
                marker=SERIES_MARKERS[i % len(SERIES_MARKERS)] if len(xy) <= MARKERS_UP_TO else None,
                markersize=size,
                markerfacecolor="none" if line.gid in stacked else colour,
                markeredgewidth=1.3,
                linewidth=width,
                label=line.label,
                gid=f"mean-reward-{line.gid}",
                zorder=zorder,
            )
            stop = [(x, y) for x, y in xy if x == line.stopped_at]
            if stop:  # where the sweep's rule ended it: a cross over the curve, and the word
                ax.plot(
                    *stop[-1],
                    marker="X",
                    markersize=11,
                    color=colour,
                    markeredgecolor="#212121",
                    linestyle="none",
                    gid=f"mean-reward-{line.gid}-stopped",
                    zorder=zorder + 1,
                )
                ax.annotate(
                    "stopped",
                    stop[-1],
                    xytext=(0, -14),
                    textcoords="offset points",
                    ha="center",
                    color=colour,
                    gid=f"mean-reward-{line.gid}-stopped-label",
                )
            step, value = xy[-1]
            ax.annotate(
                fmt_reward(value),
                (step, value),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                color=colour,
                fontweight="bold" if line.selected else "normal",
                gid=f"mean-reward-{line.gid}-label",
            )
        ax.margins(x=0.08, y=0.15)
        ax.set_xlabel("step")
        ax.set_ylabel("mean_reward", color=REWARD_COLOUR)
        ax.grid(color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
        fig.legend(loc="outside lower center", ncols=min(4, max(1, len(lines))), frameon=False)
        return _svg(fig, "compare")
