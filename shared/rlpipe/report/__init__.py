"""One self-contained HTML page per run, telling its whole story (``rlpipe report RUN``, and the
copy the control plane keeps in the state bucket).

On the local stack the page says first, in its header and title, that the run was simulated and
on which cluster (``rlpipe.report.stack``; the caller passes ``cluster`` from its settings).
The page holds the run's key facts (state, rounds, where it was published and at which commit),
the rounds (each retry with its reason, who asked, how the round before it ended and where
training resumed), the stage timeline (every attempt, coloured by outcome and failure class, with
each retry marked where it started, so a retry is never an unexplained gap, and a convert stage
skipped for a cached conversion a row of its own, all on one time axis), the reward curve
(intermediate evaluations as one series per attempt, pre at step 0 and post at the final step), the
lineage (with where the converted checkpoint came from, round by round), the data and rewards (each
dataset split at its pinned commit with its files and examples, the reward functions by name with
the reward file's sha256, or MaxText's built-in ones; the request's processor and chat template;
where training ended against the config's final step), chip-hours per stage and attempt (a stage on
the CPU pool says "no TPU") and the gate's result. It loads nothing from the
network: the charts are SVG inlined in the page, the styles sit in the page, and there is no script.
The charts are drawn by the caller's painter (``rlpipe.report.painter``): the CLI's draws them with
matplotlib (``rlpipe.cli.charts``); the control plane has none, because matplotlib never ships in the
function bundle, so its copy says where the charts are drawn, and keeps every number in its tables.

``render_report`` is pure (a run's record, ``core.runs.record.RunRecord``, in, HTML out; ``now`` and
the publish receipt are parameters). It takes records of every ledger version: the model loads
them (rounds, per-attempt rounds and chip-hours have defaults), and the record's free-form parts
(the request as recorded, the evaluations, the pinned data) are read through the lenient views of
``core.runs.recorded``, where anything missing or unreadable reads as unset. Run data is user-controlled (labels, reasons,
messages), so the Jinja2 template autoescapes everything; only the SVG the painter wrote is
marked safe.

Heavy imports (Jinja2, the ledger, the storage client) happen when a report is
rendered, never when the CLI parser is built. The CLI (``rlpipe report``, ``cli/report_command.py``)
and the control plane (``control/lifecycle/run_report.py``, the copy in the state bucket the card links,
without charts) render it.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlpipe.core.runs import recorded
from rlpipe.core.runs.admission import admission_text
from rlpipe.core.runs.record import RunRecord
from rlpipe.report.charts import (
    COLOURS,
    Bar,
    Skip,
    finite,
    fmt_accuracy,
    fmt_reward,
)
from rlpipe.report.facts import (
    conversion,
    data_and_rewards,
    evaluations,
    gate,
    lineage,
    published,
    reward_curve,
)
from rlpipe.report.painter import NO_CHARTS, Painter
from rlpipe.report.rows import (
    _STATE_KEY,
    NO_EVALUATION,
    TEMPLATE,
    _show_time,
    attempt_rows,
    cache_hit,
    chip_hours,
    round_marks,
    rounds,
)
from rlpipe.report.stack import local_stack

# The report's parts live in .rows and .facts; these are its public names.
__all__ = [
    "COLOURS",
    "NO_EVALUATION",
    "attempt_rows",
    "cache_hit",
    "chip_hours",
    "conversion",
    "data_and_rewards",
    "published",
    "read_receipt",
    "register",
    "render_report",
    "reward_curve",
    "rounds",
    "write_report",
]


@functools.cache
def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,  # every value from the run is escaped; only the charts are marked safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_report(
    record: RunRecord,
    *,
    now: datetime | None = None,
    receipt: dict[str, Any] | None = None,
    cluster: str | None = None,
    painter: Painter | None,
) -> str:
    """The report page for one run's record, as HTML text.

    ``receipt`` is the run's publish receipt, when the caller read it: the commit comes from it
    only when the ledger does not record one. ``cluster`` is where the run ran when it ran on the
    local stack (``double`` or ``real``; ``rlpipe.report.stack``): the header then says it was
    simulated. None: a deployment on Google Cloud. ``painter`` draws the charts
    (``rlpipe.report.painter``); None: the page says where they are drawn instead."""
    from markupsafe import Markup

    now = now or datetime.now(UTC)
    rows = attempt_rows(record, now)
    round_rows = rounds(record, rows)
    many = len(round_rows) > 1
    bars = [
        Bar(
            f"{r.name} · round {r.round}" if many else r.name,
            r.gid,
            r.start,
            r.end,
            r.key,
            r.outcome == "running",
        )
        for r in rows
        if r.start is not None and r.end is not None
    ]
    marks = round_marks(round_rows, rows)
    cached = cache_hit(record, rows)
    skips = (
        [Skip("convert · cache hit", "cache-hit-convert", cached.at, f"skipped: {cached.source} reused")]
        if cached is not None and cached.at is not None
        else []
    )
    curve = reward_curve(record, now)
    request, failure = recorded.request(record.request), record.failure
    results = recorded.results(record.results)
    state = record.state
    post = finite(results.post.mean_reward) if results.post else None
    pre = finite(results.pre.mean_reward) if results.pre else None
    return str(
        _environment()
        .get_template(TEMPLATE)
        .render(
            run_id=record.run_id,
            state=state,
            state_key=_STATE_KEY.get(state, "running"),
            stack=local_stack(cluster),
            stage=record.stage,
            attempt=record.attempt,
            model=request.model,
            team=record.team,
            # Why it is not running yet, in the words rlpipe status and list use (core.runs.admission).
            waiting=admission_text(record.admission) if record.admission else None,
            created_at=_show_time(record.created_at),
            updated_at=_show_time(record.updated_at),
            generated_at=now.strftime("%Y-%m-%d %H:%M:%S UTC"),
            failure=failure.model_dump() if failure else None,
            labels=sorted((str(k), str(v)) for k, v in (request.labels or {}).items()),
            colours=COLOURS,
            attempts=rows,
            rounds=round_rows,
            retries=len(round_rows) - 1,
            timeline_svg=Markup(painter.timeline_svg(bars, now, marks, skips)) if bars and painter else None,
            cache_hit=cached,
            reward_svg=Markup(painter.reward_svg(curve)) if curve and painter else None,
            no_charts=None if painter else NO_CHARTS.format(run=record.run_id),
            timeline_drawable=bool(bars),
            curve=curve,
            result={
                "post": fmt_reward(post),
                "change": f"{post - pre:+.4f}" if pre is not None else None,
            }
            if post is not None
            else None,
            evaluations=evaluations(record),
            no_evaluation=NO_EVALUATION,
            fmt_reward=fmt_reward,
            fmt_accuracy=fmt_accuracy,
            chip_hours=chip_hours(rows),
            lineage=lineage(record, rows),
            data=data_and_rewards(record),
            published=published(record, rows, receipt),
            gate=gate(record),
            gate_spec={k: v for k, v in (request.gate or {}).items() if v is not None},
        )
    )


def write_report(
    record: RunRecord,
    path: Path,
    *,
    now: datetime | None = None,
    receipt: dict[str, Any] | None = None,
    cluster: str | None = None,
    painter: Painter | None,
) -> Path:
    """Render the report and write it to ``path`` (UTF-8); returns the path."""
    path = Path(path)
    html = render_report(record, now=now, receipt=receipt, cluster=cluster, painter=painter)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
