"""What the charts of a run's page show, as data: the timeline's bars, skipped stages and round
marks, the reward curve's series and resumes, the colours they share with the page's badges, and
how the page prints a reward or an accuracy.

Why apart from the drawing: the page ships with the control plane, which keeps a copy of it in the
state bucket, and matplotlib must not (it belongs to the CLI extra). The drawing is the caller's
painter (``rlpipe.report.painter.Painter``; the CLI's is ``rlpipe.cli.charts``); the control plane's copy
has none, and its charts are a note naming ``rlpipe report``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Outcome and failure-class colours, shared with the page's badges (``report_template.html.j2``).
COLOURS: dict[str, str] = {
    "succeeded": "#2e7d32",
    "running": "#1e88e5",
    "cancelled": "#9e9e9e",
    "stopped": "#546e7a",  # stopped early by its sweep's rule (core.early_stop): ended, not failed
    "preempted": "#fb8c00",
    "capacity": "#8e24aa",
    "resources": "#6d4c41",
    "transient": "#e0b000",
    "permanent": "#c62828",
    "failed": "#e57373",  # failed with no (or an unknown) failure class
    "cached": "#00838f",  # a stage skipped for a cached result (the conversion cache)
}
FAILURE_CLASSES = ("preempted", "capacity", "resources", "transient", "permanent")
REWARD_COLOUR = "#1f77b4"
ACCURACY_COLOUR = "#ff7f0e"
POST_COLOUR = "#c62828"
PRE_COLOUR = "#424242"
RESUME_COLOUR = "#757575"
ROUND_COLOUR = "#37474f"
IDLE_COLOUR = "#eceff1"
# One colour and marker per attempt's series, in order: told apart by shape as well as by colour,
# so two attempts' evaluations at the same step stay two visible points.
SERIES_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#ff7f0e")
SERIES_MARKERS = ("o", "D", "^", "v", "P", "X", "h", "p")  # never pre's square or post's star
MARKERS_UP_TO = 120  # points per series drawn with markers; above that, only the line


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
class Skip:
    """A stage that ran no attempt because its result was reused (the conversion cache): a row of
    the timeline with a mark where it was skipped, on the same time axis as every bar."""

    label: str  # y tick label, e.g. "convert · cache hit"
    gid: str  # [A-Za-z0-9_-]+; the mark is ``timeline-<gid>``, its text ``timeline-<gid>-label``
    at: datetime
    text: str  # beside the mark, e.g. "skipped: run X's conversion reused"


@dataclass(frozen=True)
class RoundMark:
    """Where a retry started on the timeline; the run had ended from ``idle_from`` until then."""

    gid: str  # [A-Za-z0-9_-]+; the line is ``timeline-<gid>``, the idle span ``timeline-<gid>-idle``
    at: datetime
    label: str
    idle_from: datetime | None


@dataclass(frozen=True)
class Point:
    step: int
    mean_reward: float | None
    accuracy: float | None  # percent, as train_rl prints it
    attempt: int | None = None  # the train attempt that printed it; None: the ledger did not say


@dataclass(frozen=True)
class Series:
    """One attempt's intermediate evaluations."""

    gid: str  # [A-Za-z0-9_-]+; the lines are ``reward-mean-reward-<gid>`` and ``reward-accuracy-<gid>``
    label: str
    points: Sequence[Point]


@dataclass(frozen=True)
class Resume:
    step: int
    attempt: int
    label: str


@dataclass(frozen=True)
class Curve:
    intermediate: Sequence[Point]  # every evaluation, by step then attempt (the data table)
    pre: Point | None  # at step 0
    post: Point | None  # at the final step
    series: Sequence[Series] = ()
    resumes: Sequence[Resume] = ()


def legend_label(key: str) -> str:
    return f"failed: {key}" if key in FAILURE_CLASSES else key


def fmt_reward(value: float) -> str:
    return f"{value:.4f}"


def fmt_accuracy(value: float) -> str:
    return f"{value:.2f}%"


def finite(value: Any) -> float | None:
    """A JSON number as a float, or None for anything else (missing, bool, text, nan, inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
