"""The two charts of ``rlpipe report``, drawn by matplotlib's SVG backend into strings to inline.

Only ``rlpipe.cli.report`` imports this module, and matplotlib is imported inside the functions
that draw, so building the CLI parser never loads it: matplotlib belongs to the CLI extra, never to
the Cloud Functions bundle. No pyplot: each chart is a bare ``Figure`` on a ``FigureCanvasSVG``, so
nothing global (backend, open figures) is touched.

The SVG is made fit to inline in a page that holds two of them: the XML prolog and DOCTYPE (which
names an external DTD) are dropped, text stays text (``svg.fonttype: none``: smaller, searchable,
no embedded glyphs), and every id matplotlib writes is prefixed with the chart's name so the ids
of one chart cannot collide with the other's. An artist's ``gid`` becomes ``<prefix>-<gid>``,
which is how tests and readers find a bar or a series in the markup.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# Outcome and failure-class colours, shared with the page's badges (``report_template.html.j2``).
COLOURS: dict[str, str] = {
    "succeeded": "#2e7d32",
    "running": "#1e88e5",
    "cancelled": "#9e9e9e",
    "preempted": "#fb8c00",
    "capacity": "#8e24aa",
    "resources": "#6d4c41",
    "transient": "#e0b000",
    "permanent": "#c62828",
    "failed": "#e57373",  # failed with no (or an unknown) failure class
}
FAILURE_CLASSES = ("preempted", "capacity", "resources", "transient", "permanent")
REWARD_COLOUR = "#1f77b4"
ACCURACY_COLOUR = "#ff7f0e"
POST_COLOUR = "#c62828"
MARKERS_UP_TO = 120  # points per series drawn with markers; above that, only the line

_ID_REFERENCE = re.compile(r'(\sid="|url\(#|xlink:href="#)')


@dataclass(frozen=True)
class Bar:
    """One attempt on the timeline."""

    label: str  # y tick label, e.g. "train #2"
    gid: str  # [A-Za-z0-9_-]+; the bar's group is ``timeline-<gid>``
    start: datetime
    end: datetime
    key: str  # a COLOURS key
    running: bool


@dataclass(frozen=True)
class Point:
    step: int
    mean_reward: float | None
    accuracy: float | None  # percent, as train_rl prints it


@dataclass(frozen=True)
class Curve:
    intermediate: Sequence[Point]
    pre: Point | None  # at step 0
    post: Point | None  # at the final step


def _style() -> AbstractContextManager[None]:
    import matplotlib

    return matplotlib.rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "rlpipe-report",  # deterministic clip-path and marker ids
            "path.simplify": False,  # keep every evaluation point in the path
            "font.family": "sans-serif",
            "font.sans-serif": ["DejaVu Sans"],  # ships with matplotlib; browsers fall back to sans-serif
            "font.size": 9,
        }
    )


def legend_label(key: str) -> str:
    return f"failed: {key}" if key in FAILURE_CLASSES else key


def timeline_svg(bars: Sequence[Bar], now: datetime) -> str:
    """Every attempt as a horizontal bar from launch to finish (or ``now``), coloured by ``key``."""
    from matplotlib import dates as mdates
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    with _style():
        fig = Figure(figsize=(9.5, max(1.9, 0.9 + 0.24 * len(bars))), layout="constrained")
        ax = fig.add_subplot()
        first = min(b.start for b in bars)
        last = max(b.end for b in bars)
        span = max(last - first, timedelta(minutes=1))
        least = span * 0.004  # an attempt that ended at once still shows as a sliver
        for row, bar in enumerate(bars):
            left = mdates.date2num(bar.start)
            width = mdates.date2num(max(bar.end, bar.start + least)) - left
            ax.barh(
                row,
                width,
                left=left,
                height=0.62,
                color=COLOURS.get(bar.key, COLOURS["failed"]),
                edgecolor="white" if bar.running else COLOURS.get(bar.key, COLOURS["failed"]),
                hatch="//" if bar.running else None,
                linewidth=0.6,
                gid=bar.gid,
            )
        if any(b.running for b in bars):
            ax.axvline(mdates.date2num(now), color="#555555", linestyle=":", linewidth=1, gid="now")
            ax.annotate(
                "now",
                (mdates.date2num(now), 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -10),
                textcoords="offset points",
                color="#555555",
            )
        ax.set_yticks(range(len(bars)), [b.label for b in bars])
        ax.set_ylim(len(bars) - 0.5, -0.5)  # first attempt on top
        locator = mdates.AutoDateLocator(tz=first.tzinfo)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=first.tzinfo))
        ax.set_xlabel("time (UTC)")
        ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
        used = list(dict.fromkeys(b.key for b in bars))
        ax.legend(
            handles=[Patch(color=COLOURS.get(k, COLOURS["failed"]), label=legend_label(k)) for k in used],
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            frameon=False,
        )
        return _svg(fig, "timeline")


def reward_svg(curve: Curve) -> str:
    """mean_reward per evaluation (left axis) and accuracy in % (right axis); pre and post marked."""
    from matplotlib.figure import Figure

    with _style():
        fig = Figure(figsize=(9.5, 4.2), layout="constrained")
        ax = fig.add_subplot()
        acc = ax.twinx()
        ax.set_zorder(acc.get_zorder() + 1)  # rewards over accuracy: the twin is drawn after otherwise
        ax.patch.set_visible(False)
        rewards = [(p.step, p.mean_reward) for p in curve.intermediate if p.mean_reward is not None]
        accuracies = [(p.step, p.accuracy) for p in curve.intermediate if p.accuracy is not None]
        if rewards:
            ax.plot(
                *zip(*rewards, strict=True),
                color=REWARD_COLOUR,
                marker="o" if len(rewards) <= MARKERS_UP_TO else None,
                markersize=3,
                linewidth=1.4,
                label="mean_reward (intermediate)",
                gid="mean-reward",
            )
        if accuracies:
            acc.plot(
                *zip(*accuracies, strict=True),
                color=ACCURACY_COLOUR,
                linestyle="--",
                marker="^" if len(accuracies) <= MARKERS_UP_TO else None,
                markersize=3,
                linewidth=1.1,
                label="accuracy % (intermediate)",
                gid="accuracy",
            )
        for name, point, marker, size, colour in (
            ("pre", curve.pre, "s", 8, "#424242"),
            ("post", curve.post, "*", 15, POST_COLOUR),
        ):
            if point is None:
                continue
            if point.mean_reward is not None:
                ax.plot(
                    [point.step],
                    [point.mean_reward],
                    linestyle="none",
                    marker=marker,
                    markersize=size,
                    color=colour,
                    markeredgecolor="white" if name == "post" else colour,
                    label=f"{name}: mean_reward at step {point.step}",
                    gid=name,
                    zorder=5,
                )
                ax.annotate(
                    f"{name} {fmt_reward(point.mean_reward)}",
                    (point.step, point.mean_reward),
                    xytext=(7, 7) if name == "pre" else (-7, 7),
                    textcoords="offset points",
                    ha="left" if name == "pre" else "right",
                    color=colour,
                    fontweight="bold",
                    gid=f"{name}-label",
                )
            if point.accuracy is not None:
                acc.plot(
                    [point.step],
                    [point.accuracy],
                    linestyle="none",
                    marker=marker,
                    markersize=size * 0.8,
                    markerfacecolor="white",
                    markeredgecolor=ACCURACY_COLOUR,
                    markeredgewidth=1.6,
                    label=f"{name}: accuracy at step {point.step}",
                    gid=f"{name}-accuracy",
                    zorder=5,
                )
        ax.margins(x=0.04, y=0.14)  # room for the pre/post labels
        acc.margins(x=0.04, y=0.14)
        ax.set_xlabel("step")
        ax.set_ylabel("mean_reward", color=REWARD_COLOUR)
        acc.set_ylabel("accuracy (%)", color=ACCURACY_COLOUR)
        ax.grid(color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
        handles = ax.get_legend_handles_labels()
        more = acc.get_legend_handles_labels()
        fig.legend(handles[0] + more[0], handles[1] + more[1], loc="outside lower center", ncols=3)
        return _svg(fig, "reward")


def fmt_reward(value: float) -> str:
    return f"{value:.4f}"


def fmt_accuracy(value: float) -> str:
    return f"{value:.2f}%"


def finite(value: Any) -> float | None:
    """A JSON number as a float, or None for anything else (missing, bool, text, nan, inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _svg(fig: Any, prefix: str) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    out = io.StringIO()
    FigureCanvasSVG(fig).print_svg(
        out, metadata={"Creator": None, "Date": None, "Format": None, "Type": None}
    )
    text = out.getvalue()
    text = text[text.index("<svg") :]  # drop the XML prolog and the DOCTYPE's external DTD
    return _ID_REFERENCE.sub(lambda m: f"{m.group(1)}{prefix}-", text)
