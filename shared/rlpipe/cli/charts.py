"""The charts of the pages the CLI writes (``rlpipe report``, ``rlpipe compare`` and a sweep's page),
drawn by matplotlib's SVG backend into strings to inline.

Why here, in the CLI: matplotlib belongs to the CLI extra, never to the Cloud Functions bundle. The
pages themselves are built by ``rlpipe.report``, which ships, and takes a painter (this module,
``rlpipe.report.painter.Painter``) from its caller: the copy of a run's page the control plane keeps in the
state bucket is rendered without one, its charts replaced by a note naming ``rlpipe report``. What
a chart shows (bars, series, resumes, colours) is data in ``rlpipe.report.charts``; only the
drawing is here. No pyplot: each chart is a bare ``Figure`` on a ``FigureCanvasSVG``, so nothing
global (backend, open figures) is touched, and matplotlib is imported inside the functions that
draw, so building the CLI parser never loads it.

The SVG is made fit to inline in a page that holds two of them: the XML prolog and DOCTYPE (which
names an external DTD) are dropped, text stays text (``svg.fonttype: none``: smaller, searchable,
no embedded glyphs), and every id matplotlib writes is prefixed with the chart's name so the ids
of one chart cannot collide with the other's. An artist's ``gid`` becomes ``<prefix>-<gid>``,
which is how tests and readers find a bar or a series in the markup.

The reward chart draws mean_reward and accuracy in two panels over one step axis, not on twin
axes: on twin axes a pre or post marker of one scale landed on the other's wherever the two scales
happened to coincide, and two different numbers looked like one point. Each attempt's evaluations
are a series of their own (a resumed attempt evaluates again at steps an earlier one reached), and
every resume is a vertical line at its step.

The comparison chart has a problem a single run's chart does not. Runs that scored the same at
every step (a sweep over a setting that changed nothing, or the simulator's deterministic rewards)
lie on one another, and drawn alike the last one hides the rest. So each run gets a line style and
a marker as well as a colour, and runs whose curves coincide (``rlpipe.report.compare_chart.
coinciding``) are drawn as nested bands, the page naming them in a note.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from rlpipe.report.charts import (
    ACCURACY_COLOUR,
    COLOURS,
    IDLE_COLOUR,
    MARKERS_UP_TO,
    POST_COLOUR,
    PRE_COLOUR,
    RESUME_COLOUR,
    REWARD_COLOUR,
    ROUND_COLOUR,
    SERIES_COLOURS,
    SERIES_MARKERS,
    Bar,
    Curve,
    Point,
    Resume,
    RoundMark,
    Series,
    Skip,
    finite,
    fmt_accuracy,
    fmt_reward,
    legend_label,
)
from rlpipe.report.compare_chart import LINE_STYLES, RunLine, coinciding

_ID_REFERENCE = re.compile(r'(\sid="|url\(#|xlink:href="#)')


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


def timeline_svg(
    bars: Sequence[Bar], now: datetime, rounds: Sequence[RoundMark] = (), skips: Sequence[Skip] = ()
) -> str:
    """Every attempt as a horizontal bar from launch to finish (or ``now``), coloured by ``key``;
    each retry a labelled line where its round started, with the time the run stood ended shaded;
    each skipped stage a row above the bars with a mark where it was skipped. One axes, so one
    time axis for every row."""
    from matplotlib import dates as mdates
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = len(skips) + len(bars)
    with _style():
        fig = Figure(figsize=(9.5, max(1.9, 0.9 + 0.24 * rows)), layout="constrained")
        ax = fig.add_subplot()
        times = [*(b.start for b in bars), *(b.end for b in bars), *(m.at for m in rounds)]
        times += [s.at for s in skips]
        first, last = min(times), max(times)
        span = max(last - first, timedelta(minutes=1))
        least = span * 0.004  # an attempt that ended at once still shows as a sliver
        for row, skip in enumerate(skips):
            at = mdates.date2num(skip.at)
            ax.plot(
                [at],
                [row],
                linestyle="none",
                marker="D",
                markersize=8,
                color=COLOURS["cached"],
                markeredgecolor="white",
                gid=skip.gid,
                zorder=5,
            )
            ax.annotate(
                skip.text,
                (at, row),
                xytext=(8, 0),
                textcoords="offset points",
                va="center",
                color=COLOURS["cached"],
                fontsize=8,
                gid=f"{skip.gid}-label",
            )
        for row, bar in enumerate(bars, start=len(skips)):
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
        for mark in rounds:
            at = mdates.date2num(mark.at)
            if mark.idle_from is not None and mark.idle_from < mark.at:
                ax.axvspan(
                    mdates.date2num(mark.idle_from), at, color=IDLE_COLOUR, zorder=0, gid=f"{mark.gid}-idle"
                )
            ax.axvline(at, color=ROUND_COLOUR, linestyle="--", linewidth=1, gid=mark.gid)
            ax.annotate(
                mark.label,
                (at, 0.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, 3),
                textcoords="offset points",
                color=ROUND_COLOUR,
                fontsize=8,
                gid=f"{mark.gid}-label",
            )
        pad = span * 0.015  # a mark at the first or last moment is drawn whole, not cut by the frame
        ax.set_xlim(mdates.date2num(first - pad), mdates.date2num(last + pad))
        ax.set_yticks(range(rows), [*(s.label for s in skips), *(b.label for b in bars)])
        ax.set_ylim(rows - 0.5, -0.5)  # first row on top
        locator = mdates.AutoDateLocator(tz=first.tzinfo)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=first.tzinfo))
        ax.set_xlabel("time (UTC)")
        ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
        used = list(dict.fromkeys(b.key for b in bars))
        handles: list[Any] = [
            Patch(color=COLOURS.get(k, COLOURS["failed"]), label=legend_label(k)) for k in used
        ]
        if skips:
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker="D",
                    markersize=7,
                    color=COLOURS["cached"],
                    label="cache hit: stage skipped",
                )
            )
        if rounds:
            handles.append(
                Line2D([], [], color=ROUND_COLOUR, linestyle="--", linewidth=1, label="retry: a new round")
            )
        if any(m.idle_from is not None and m.idle_from < m.at for m in rounds):
            handles.append(Patch(color=IDLE_COLOUR, label="run ended until the retry"))
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            frameon=False,
        )
        return _svg(fig, "timeline")


def reward_svg(curve: Curve) -> str:
    """mean_reward (top panel) and accuracy in % (bottom panel) over one step axis: a series per
    attempt, pre and post marked and labelled with their values, every resume a vertical line."""
    from matplotlib.figure import Figure

    series = list(curve.series) or [Series("intermediate", "intermediate", curve.intermediate)]
    with _style():
        panels = [
            (name, title, colour)
            for name, title, colour in (
                ("mean_reward", "mean_reward", REWARD_COLOUR),
                ("accuracy", "accuracy (%)", ACCURACY_COLOUR),
            )
            if any(getattr(p, name) is not None for p in _every_point(curve))
        ]
        fig = Figure(figsize=(9.5, 2.0 + 2.1 * len(panels)), layout="constrained")
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, (name, title, colour) in zip(axes, panels, strict=True):
            gid = name.replace("_", "-")
            for i, s in enumerate(series):
                xy = [(p.step, getattr(p, name)) for p in s.points if getattr(p, name) is not None]
                if not xy:
                    continue
                ax.plot(
                    *zip(*xy, strict=True),
                    color=SERIES_COLOURS[i % len(SERIES_COLOURS)],
                    marker=SERIES_MARKERS[i % len(SERIES_MARKERS)] if len(xy) <= MARKERS_UP_TO else None,
                    markersize=4,
                    markerfacecolor="none" if i % 2 else SERIES_COLOURS[i % len(SERIES_COLOURS)],
                    linewidth=1.3,
                    label=s.label,
                    gid=f"{gid}-{s.gid}",
                )
            for mark, point, marker, size, edge in (
                ("pre", curve.pre, "s", 8, PRE_COLOUR),
                ("post", curve.post, "*", 15, POST_COLOUR),
            ):
                value = getattr(point, name) if point is not None else None
                if point is None or value is None:
                    continue
                suffix = "" if name == "mean_reward" else "-accuracy"
                ax.plot(
                    [point.step],
                    [value],
                    linestyle="none",
                    marker=marker,
                    markersize=size,
                    color=edge,
                    markeredgecolor="white" if mark == "post" else edge,
                    label=f"{mark} at step {point.step}",
                    gid=f"{mark}{suffix}",
                    zorder=5,
                )
                ax.annotate(
                    f"{mark} {fmt_reward(value) if name == 'mean_reward' else fmt_accuracy(value)}",
                    (point.step, value),
                    xytext=(7, 7) if mark == "pre" else (-7, 7),
                    textcoords="offset points",
                    ha="left" if mark == "pre" else "right",
                    color=edge,
                    fontweight="bold",
                    gid=f"{mark}{suffix}-label",
                )
            for row, (step, labels) in enumerate(_resumes(curve.resumes).items()):
                ax.axvline(step, color=RESUME_COLOUR, linestyle=":", linewidth=1, zorder=1)
                if ax is axes[0]:  # labelled once, in the top panel; the label's id is unique there
                    ax.annotate(
                        f"{' and '.join(labels)} from step {step}",
                        (step, 1.0),
                        xycoords=("data", "axes fraction"),
                        xytext=(3, -10 - 11 * row),  # one row each: labels of near steps never overlap
                        textcoords="offset points",
                        color=RESUME_COLOUR,
                        fontsize=7.5,
                        bbox={
                            "boxstyle": "square,pad=0.1",
                            "facecolor": "white",
                            "edgecolor": "none",
                            "alpha": 0.8,
                        },
                        zorder=6,
                        gid=f"resume-{step}",
                    )
            ax.margins(x=0.04, y=0.18)  # room for the pre/post labels
            ax.set_ylabel(title, color=colour)
            ax.grid(color="#e0e0e0", linewidth=0.6)
            ax.set_axisbelow(True)
        axes[-1].set_xlabel("step")
        handles: dict[str, Any] = {}
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, handle)  # an attempt's series is in both panels: once
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=4)
        return _svg(fig, "reward")


def _every_point(curve: Curve) -> list[Point]:
    return [*curve.intermediate, *(p for p in (curve.pre, curve.post) if p is not None)]


def _resumes(resumes: Sequence[Resume]) -> dict[int, list[str]]:
    """Resume labels by step: two attempts resumed from one checkpoint share a line."""
    found: dict[int, list[str]] = {}
    for r in sorted(resumes, key=lambda r: (r.step, r.attempt)):
        found.setdefault(r.step, []).append(r.label)
    return found


def _svg(fig: Any, prefix: str) -> str:
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    out = io.StringIO()
    FigureCanvasSVG(fig).print_svg(
        out, metadata={"Creator": None, "Date": None, "Format": None, "Type": None}
    )
    text = out.getvalue()
    text = text[text.index("<svg") :]  # drop the XML prolog and the DOCTYPE's external DTD
    return _ID_REFERENCE.sub(lambda m: f"{m.group(1)}{prefix}-", text)


def compare_svg(lines: Sequence[RunLine]) -> str:
    """The comparison chart as inline SVG (``compare_figure``), written in the charts' style (text
    as text)."""
    with _style():
        return _svg(compare_figure(lines), "compare")


STOP_MARK: dict[str, Any] = {
    "marker": "X",
    "markersize": 11,
    "markeredgecolor": "#212121",
    "linestyle": "none",
}
STOP_LEGEND = "stopped by the sweep's rule (at its last evaluation)"
LABEL_GAP_POINTS = 11.5  # one line of the 9 pt labels, and a little air


def compare_figure(lines: Sequence[RunLine]) -> Any:
    """Every run's mean_reward curve overlaid on one step axis, each run in a colour, line style
    and marker of its own; the selected run drawn thicker. Runs whose curves coincide
    (``coinciding``) are drawn widest first, each later one narrower, with hollow markers nested
    smaller: every one of them shows as a band around the next.

    A run a sweep's rule stopped (``RunLine.stopped_at``) gets a cross at that step, which the
    legend explains once; only runs that reached their end get their value written at their last
    point, moved apart so no two overlap. A sweep's stopped children end close together, at the
    first rungs: their words and values, written at each cross, piled up into an unreadable knot.
    The legend takes as many columns as fit the figure's width (the points' names are long; at four
    columns they ran off both sides of the page)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    stacked: dict[str, tuple[int, int]] = {}  # gid → (its place in its group, the group's size)
    for group in coinciding(lines):
        for place, line in enumerate(group):
            stacked[line.gid] = (place, len(group))
    with _style():
        fig = Figure(figsize=(9.5, 4.2), layout="constrained")
        ax = fig.add_subplot()
        labels = []
        any_stopped = False
        for i, line in enumerate(lines):
            xy = [(p.step, v) for p in line.points if (v := finite(p.mean_reward)) is not None]
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
            if stop:  # where the sweep's rule ended it: a cross over the curve, named in the legend
                any_stopped = True
                ax.plot(
                    *stop[-1],
                    color=colour,
                    gid=f"mean-reward-{line.gid}-stopped",
                    zorder=zorder + 1,
                    **STOP_MARK,
                )
                continue
            step, value = xy[-1]
            labels.append(
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
            )
        ax.margins(x=0.08, y=0.15)
        ax.set_xlabel("step")
        ax.set_ylabel("mean_reward", color=REWARD_COLOUR)
        ax.grid(color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
        handles, names = ax.get_legend_handles_labels()
        if any_stopped:
            handles.append(Line2D([], [], color="#9e9e9e", **STOP_MARK))
            names.append(STOP_LEGEND)
        _fitted_legend(fig, handles, names)
        _spread(fig, ax, labels)
        return fig


def _fitted_legend(fig: Any, handles: list[Any], names: list[str]) -> None:
    """The legend below the axes in as many columns (four at most) as fit the figure's width."""
    renderer = _renderer(fig)
    for columns in range(min(4, max(1, len(names))), 0, -1):
        legend = fig.legend(handles, names, loc="outside lower center", ncols=columns, frameon=False)
        if columns == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width * 0.98:
            return
        legend.remove()


def _spread(fig: Any, ax: Any, labels: list[Any]) -> None:
    """Move the value labels apart vertically, in order of height, so that no two overlap."""
    if len(labels) < 2:
        return
    fig.draw_without_rendering()  # the constrained layout places the axes: data → display holds
    per_point = fig.dpi / 72
    placed = sorted(labels, key=lambda t: ax.transData.transform(t.xy)[1])
    floor = None
    for text in placed:
        y = ax.transData.transform(text.xy)[1]
        wanted = y if floor is None else max(y, floor + LABEL_GAP_POINTS * per_point)
        text.set_position((6, (wanted - y) / per_point))
        floor = wanted


def _renderer(fig: Any) -> Any:
    """A renderer to measure text with (Agg's; the SVG is drawn afterwards by its own canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return FigureCanvasAgg(fig).get_renderer()
