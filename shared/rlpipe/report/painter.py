"""Who draws a page's charts: a painter the caller hands to ``render_report`` and ``render_compare``.

Why the caller's: drawing needs matplotlib, which belongs to the CLI extra and never ships in the
Cloud Functions bundle, while the pages are built by code that does ship (the control plane keeps a
copy of each run's page in the state bucket). The CLI passes its painter, ``rlpipe.cli.charts`` (a
module satisfies this protocol); the control plane passes none, and each chart is then a note
naming ``rlpipe report``, with every number it would have drawn still in the page's tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from rlpipe.report.charts import Bar, Curve, RoundMark, Skip
from rlpipe.report.compare_chart import RunLine

# What the page says where a chart would be, when it was rendered without a painter.
NO_CHARTS = "charts are drawn by rlpipe report {run}; the numbers are in the tables below"


class Painter(Protocol):
    """Draws each chart as an SVG string to inline (ids prefixed with the chart's name)."""

    def timeline_svg(
        self,
        bars: Sequence[Bar],
        now: datetime,
        rounds: Sequence[RoundMark] = ...,
        skips: Sequence[Skip] = ...,
    ) -> str: ...

    def reward_svg(self, curve: Curve) -> str: ...

    def compare_svg(self, lines: Sequence[RunLine]) -> str: ...
