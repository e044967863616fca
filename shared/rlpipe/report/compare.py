"""One self-contained HTML page comparing runs (``rlpipe compare RUN RUN …``).

The page overlays the runs' reward curves (each run's intermediate evaluations' mean_reward by
step, pre at step 0 and post at its final step, read by ``facts.reward_curve`` as the run report
reads them), tabulates each run's pre and post mean_reward, accuracy and format accuracy with the
change, its chip-hours (``rows.chip_hours``) and what they cost, lists only the request fields whose
values differ between the runs (each request flattened to dotted keys), and names the data and
reward functions of each (``facts.data_and_rewards``). A run may be marked as selected, with the
reason given (the sweep passes it).

Pure, like ``render_report``: run records (``core.runs.record.RunRecord``) in, HTML out;
``now`` and the price override are parameters. The page is the run report's kind: no script, no
external resource, the chart inlined SVG, everything from the runs autoescaped.

Two things keep the page truthful where runs look alike: curves that lie on one another are each
drawn in a style of their own (``rlpipe.cli.charts.compare_svg``) and a note names them
(``coinciding``), and request fields unset in every run (absent, null, empty) are not listed as
differences. A sweep's page (``sweep``: the parent's record) names the sweep and each child's
point (``sweep_page``). A child a sweep's rule stopped early is marked where it stopped, in the
table and on the chart, and the page estimates the chip-hours the runs would have used without
the rule (``stopping``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import RunRecord
from rlpipe.report.charts import Point, finite, fmt_accuracy, fmt_reward
from rlpipe.report.compare_chart import RunLine, coinciding
from rlpipe.report.facts import data_and_rewards, reward_curve
from rlpipe.report.painter import Painter
from rlpipe.report.rows import _NOT_ID, attempt_rows, chip_hours
from rlpipe.report.stack import local_stack
from rlpipe.report.stopping import savings, stop_marks
from rlpipe.report.sweep_page import sweep_facts

COMPARE_TEMPLATE = "compare_template.html.j2"
UNSET = "(unset)"
# (field, label, format of a value, format of the change)
METRICS = (
    ("mean_reward", "mean_reward", fmt_reward, lambda d: f"{d:+.4f}"),
    ("accuracy", "accuracy", fmt_accuracy, lambda d: f"{d:+.2f} pp"),
    ("format_accuracy", "format accuracy", fmt_accuracy, lambda d: f"{d:+.2f} pp"),
)


@dataclass(frozen=True)
class Difference:
    key: str  # the dotted request field, e.g. ``training.learning_rate``
    values: list[str]  # one per run, in the page's order; UNSET where a run's request lacks it


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A request as dotted keys to leaf values: nested mappings are walked, lists and scalars are
    leaves (an empty mapping is a leaf too; ``config_differences`` reads it as unset)."""
    if isinstance(value, dict) and (value or not prefix):
        flat: dict[str, Any] = {}
        for key in sorted(value, key=str):
            flat.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _unset(value: Any) -> bool:
    """Absent, null, an empty mapping and an empty list say the same: nothing was set. (The
    ledger's requests hold defaults as null and ``labels: {}``; a request from another version
    omits the field. Showing those as differences is noise.)"""
    return value is None or value == {} or value == []


def config_differences(records: Sequence[RunRecord]) -> list[Difference]:
    """The request fields whose values are not the same in every run, sorted by key: a field set
    in one run and unset in another (absent, null, empty) differs; unset in all of them does not."""
    flat = [{k: v for k, v in flatten(r.request).items() if not _unset(v)} for r in records]
    missing = object()
    keys = sorted({k for f in flat for k in f})
    found = []
    for key in keys:
        values = [f.get(key, missing) for f in flat]
        if all(v == values[0] and type(v) is type(values[0]) for v in values):
            continue
        found.append(Difference(key, [UNSET if v is missing else _show(v) for v in values]))
    return found


def run_points(record: RunRecord, now: datetime) -> list[Point]:
    """The run's curve as one line: pre at 0, one point per step (the latest attempt's where a
    resumed attempt evaluated a step again), post at the final step."""
    curve = reward_curve(record, now)
    if curve is None:
        return []
    by_step: dict[int, Point] = {}
    for point in curve.intermediate:  # by step, then attempt: the latest attempt's stays
        by_step[point.step] = point
    pre = [curve.pre] if curve.pre is not None else []
    post = [curve.post] if curve.post is not None else []
    points = [*pre, *sorted(by_step.values(), key=lambda p: p.step), *post]
    return points


def _metrics(record: RunRecord) -> list[dict[str, str]]:
    results = recorded.results(record.results)
    pre, post = results.pre or recorded.Evaluation(), results.post or recorded.Evaluation()
    rows = []
    for field, label, show, change in METRICS:
        before, after = finite(getattr(pre, field)), finite(getattr(post, field))
        rows.append(
            {
                "field": field,
                "label": label,
                "pre": show(before) if before is not None else "-",
                "post": show(after) if after is not None else "-",
                "change": change(after - before) if before is not None and after is not None else "-",
            }
        )
    return rows


def cost(record: RunRecord, hours: float, prices_json: str = "") -> str:
    """What the run's chip-hours cost: the ledger's per-attempt estimates when every attempt that
    held chips has one, else the chip-hours at the run's provisioning mode's list price
    (``core.cost``, ``prices_json`` the deployment's override); unset when no price is known."""
    from rlpipe.core import cost as prices

    held = [a for a in record.attempts if finite(a.chip_hours)]
    estimates = [finite(a.cost_estimate) for a in held]
    if estimates and None not in estimates:
        return f"${sum(e or 0.0 for e in estimates):,.2f} (the ledger's estimates)"
    tpu = recorded.request(record.request).tpu
    if tpu is None or not tpu.type:
        return "unset: no TPU type"
    mode = tpu.provisioning or "reservation"
    try:
        override = prices.parse_override(prices_json) if prices_json else None
    except prices.PricesInvalid:
        return f"unset: {prices.SETTING} is invalid"
    price = prices.price(tpu.type, mode, override)
    amount = price.cost(hours)
    if amount is None:
        return f"unset: no {mode} price for {tpu.type}"
    return f"${amount:,.2f} at {mode} list price"


def _run(record: RunRecord, index: int, now: datetime, prices_json: str) -> dict[str, Any]:
    hours = chip_hours(attempt_rows(record, now))
    return {
        "run_id": record.run_id,
        "gid": _NOT_ID.sub("_", f"run{index + 1}"),
        "state": record.state,
        "model": recorded.request(record.request).model or "-",
        "metrics": _metrics(record),
        "chip_hours": f"{hours['total']:.2f}",
        "unknown_hours": hours["unknown"],
        "cost": cost(record, hours["total"], prices_json),
        # The step its export loaded (export.step) and why; "-" before export launched.
        "exported_step": record.lineage.exported_step,
        "exported": (
            f"step {record.lineage.exported_step}: {record.lineage.export_reason}"
            if record.lineage.exported_step is not None
            else "-"
        ),
        "data": data_and_rewards(record),
        "points": run_points(record, now),
    }


def render_compare(
    records: Sequence[RunRecord],
    *,
    selected: str | None = None,
    reason: str | None = None,
    now: datetime | None = None,
    prices_json: str = "",
    cluster: str | None = None,
    sweep: RunRecord | None = None,
    painter: Painter,
) -> str:
    """The comparison page for run records (two or more, in the order given), as HTML text.

    ``selected`` names one of the runs to mark as selected, ``reason`` says why. ``cluster`` is
    where the runs ran when on the local stack (``rlpipe.report.stack``; None: Google Cloud).
    ``sweep`` is the parent's record when the runs are a sweep's children: the page then names the
    sweep and each child's point, its legend names points, and the selection is the sweep's own
    (``selected`` and ``reason`` must not be given too). ``painter`` draws the chart
    (``rlpipe.report.painter``: the CLI's; only the CLI writes this page)."""
    from markupsafe import Markup

    from rlpipe.report import _environment

    if len(records) < 2:
        raise ValueError("a comparison needs at least two runs")
    facts = sweep_facts(sweep, records) if sweep is not None else None
    if facts is not None:
        if selected is not None or reason is not None:
            raise ValueError("a sweep's page takes its selection from the sweep, not from selected/reason")
        selected, reason = facts.selected, facts.reason
    ids = [r.run_id for r in records]
    if selected is not None and selected not in ids:
        raise ValueError(f"selected run {selected} is not one of the runs compared")
    now = now or datetime.now(UTC)
    runs = [_run(r, i, now, prices_json) for i, r in enumerate(records)]
    marks = stop_marks(records, sweep)
    for run in runs:
        run["selected"] = run["run_id"] == selected
        run["point"] = facts.point(run["run_id"]) if facts is not None else None
        run["stop"] = marks.get(run["run_id"])
    lines = [
        RunLine(
            r["gid"],
            (r["point"] or r["run_id"])
            + (" (selected)" if r["selected"] else "")
            + (" (stopped)" if r["stop"] else ""),
            r["points"],
            r["selected"],
            r["stop"].trained_to if r["stop"] else None,
        )
        for r in runs
        if r["points"]
    ]
    names = {r["gid"]: (r["run_id"], r["run_id"] + (f" ({r['point']})" if r["point"] else "")) for r in runs}
    return str(
        _environment()
        .get_template(COMPARE_TEMPLATE)
        .render(
            runs=runs,
            selected=selected,
            reason=reason,
            sweep=facts,
            stack=local_stack(cluster),
            differences=config_differences(records),
            chart_svg=Markup(painter.compare_svg(lines)) if lines else None,
            coinciding=[[names[line.gid] for line in group] for group in coinciding(lines)],
            savings=savings(records, marks, now, sweep),
            generated_at=now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        )
    )


def run_rows(
    records: Sequence[RunRecord], *, now: datetime | None = None, prices_json: str = ""
) -> list[dict[str, Any]]:
    """Each run as the page shows it (state, pre/post metrics, chip-hours, cost): for a table of
    the same numbers outside the page (the sweep demo's summary, ``compare --json``)."""
    when = now or datetime.now(UTC)
    return [_run(record, i, when, prices_json) for i, record in enumerate(records)]
