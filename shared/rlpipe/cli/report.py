"""``rlpipe report RUN [-o FILE]``: one self-contained HTML page per run.

The page holds the stage timeline (every attempt, coloured by outcome and failure class), the
reward curve (intermediate evaluations, pre at step 0 and post at the final step), the lineage,
chip-hours per stage and attempt, and the gate's result. It loads nothing from the network: the
charts are matplotlib SVG inlined in the page (``rlpipe.cli.charts``), the styles sit in the page,
and there is no script.

``render_report`` is pure (a ledger record as a dict in, HTML out; ``now`` is a parameter), so it
takes the record before and after the ledger gains ``results``, ``gate`` and per-attempt
``chip_hours``: every field beyond the original ``RunRecord`` is read defensively. Run data is
user-controlled (labels, reasons, messages), so the Jinja2 template autoescapes everything; only
the SVG that matplotlib wrote is marked safe.

Heavy imports (Jinja2, matplotlib, the ledger) happen when a report is rendered, never when the
CLI parser is built; this module is imported only by the CLI.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlpipe.cli.charts import COLOURS, FAILURE_CLASSES, Bar, Curve, Point, finite, fmt_accuracy, fmt_reward

TEMPLATE = "report_template.html.j2"
STAGE_ORDER = ("convert", "train", "export", "publish")
NO_EVALUATION = "no evaluation recorded"
_DONE_PHASES = {"succeeded": "succeeded", "failed": "failed"}
_ENDED_PHASES = frozenset({"cancelled", "superseded", "deleted"})
_TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
_STATE_KEY = {"succeeded": "succeeded", "failed": "permanent", "cancelled": "cancelled", "gated": "gated"}
_NOT_ID = re.compile(r"[^A-Za-z0-9_-]+")
_EVAL_FIELDS = ("corr", "total", "accuracy", "partial_accuracy", "format_accuracy", "mean_reward")


@dataclass(frozen=True)
class AttemptRow:
    stage: str
    attempt: int
    workload: str
    phase: str
    outcome: str  # succeeded | failed | running | cancelled
    key: str  # colour: the failure class of a failed attempt, else the outcome
    failure_class: str | None
    reason: str | None
    resume_step: int | None
    launched_at: str
    finished_at: str
    duration: str
    chip_hours: float | None
    start: datetime | None
    end: datetime | None

    @property
    def gid(self) -> str:
        return _NOT_ID.sub("_", f"attempt-{self.stage}-{self.attempt}")


# ---- reading the record ---------------------------------------------------------------------------


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: Any) -> datetime | None:
    from rlpipe.control.ledger import parse_time

    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _show_time(value: Any) -> str:
    parsed = _time(value)
    if parsed is not None:
        return parsed.strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value) if value else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _outcome(phase: str, finished: bool, failure_class: str | None, run_ended: bool) -> str:
    if phase in _DONE_PHASES:
        return _DONE_PHASES[phase]
    if phase in _ENDED_PHASES:
        return "cancelled"
    if finished:
        return "failed" if failure_class else "cancelled"
    # Launched, queued or running: still going, unless the run has ended around it.
    return "cancelled" if run_ended else "running"


def attempt_rows(record: dict[str, Any], now: datetime) -> list[AttemptRow]:
    """Every attempt, in stage order then attempt number, with its outcome and time span."""
    run_ended = record.get("state") in _TERMINAL_STATES
    run_end = _time(record.get("updated_at")) or now
    rows = []
    for raw in record.get("attempts") or []:
        a = _dict(raw)
        stage, phase = str(a.get("stage") or "?"), str(a.get("phase") or "launched")
        failure_class = a.get("failure_class") or None
        start, end = _time(a.get("launched_at")), _time(a.get("finished_at"))
        outcome = _outcome(phase, end is not None, failure_class, run_ended)
        if end is None and start is not None:
            end = now if outcome == "running" else max(run_end, start)
        if outcome == "failed":
            key = failure_class if failure_class in FAILURE_CLASSES else "failed"
        else:
            key = outcome
        rows.append(
            AttemptRow(
                stage=stage,
                attempt=_int(a.get("attempt")) or 0,
                workload=str(a.get("workload") or ""),
                phase=phase,
                outcome=outcome,
                key=key,
                failure_class=str(failure_class) if failure_class else None,
                reason=str(a["reason"]) if a.get("reason") else None,
                resume_step=_int(a.get("resume_step")),
                launched_at=_show_time(a.get("launched_at")),
                finished_at=_show_time(a.get("finished_at"))
                if a.get("finished_at")
                else ("now (running)" if outcome == "running" else "-"),
                duration=_duration((end - start).total_seconds() if start and end else None),
                chip_hours=finite(a.get("chip_hours")),
                start=start,
                end=end,
            )
        )
    order = {stage: i for i, stage in enumerate(STAGE_ORDER)}
    rows.sort(key=lambda r: (order.get(r.stage, len(order)), r.stage, r.attempt))
    return rows


def _point(raw: Any, step: int | None) -> Point | None:
    data = _dict(raw)
    if step is None or not data:
        return None
    reward, accuracy = finite(data.get("mean_reward")), finite(data.get("accuracy"))
    return None if reward is None and accuracy is None else Point(step, reward, accuracy)


def reward_curve(record: dict[str, Any]) -> Curve | None:
    """Intermediate evaluations, pre at step 0 and post at the final step; None when there are none.

    The final step is ``results.final_step``, never left of the last intermediate evaluation (post
    runs after training); without either, the lineage's final step."""
    results = _dict(record.get("results"))
    intermediate = sorted(
        (p for p in (_point(e, _int(_dict(e).get("step"))) for e in results.get("intermediate") or []) if p),
        key=lambda p: p.step,
    )
    steps = [
        s for s in (_int(results.get("final_step")), intermediate[-1].step if intermediate else None) if s
    ]
    final = max(steps) if steps else _int(_dict(record.get("lineage")).get("final_step"))
    pre = _point(results.get("pre"), 0)
    post = _point(results.get("post"), final if final is not None else 0)
    if not intermediate and pre is None and post is None:
        return None
    return Curve(intermediate=intermediate, pre=pre, post=post)


def evaluations(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The pre and post evaluations as table rows (every field train_rl prints)."""
    results = _dict(record.get("results"))
    rows = []
    for name in ("pre", "post"):
        data = _dict(results.get(name))
        if not data:
            continue
        row: dict[str, Any] = {"name": name}
        for field in _EVAL_FIELDS:
            value = finite(data.get(field))
            if value is None:
                row[field] = "-"
            elif field == "mean_reward":
                row[field] = fmt_reward(value)
            elif field.endswith("accuracy"):
                row[field] = fmt_accuracy(value)
            else:
                row[field] = f"{value:g}"
        rows.append(row)
    pre, post = (finite(_dict(results.get(n)).get("mean_reward")) for n in ("pre", "post"))
    if pre is not None and post is not None:
        rows.append(
            {"name": "change", **dict.fromkeys(_EVAL_FIELDS, ""), "mean_reward": f"{post - pre:+.4f}"}
        )
    return rows


def chip_hours(rows: list[AttemptRow]) -> dict[str, Any]:
    """Chip-hours per stage and in total, and how many attempts recorded none."""
    stages: dict[str, float] = {}
    unknown = 0
    for row in rows:
        stages.setdefault(row.stage, 0.0)
        if row.chip_hours is None:
            unknown += 1
        else:
            stages[row.stage] += row.chip_hours
    return {"stages": stages, "total": sum(stages.values()), "unknown": unknown}


def lineage(record: dict[str, Any]) -> list[tuple[str, str]]:
    lin, request = _dict(record.get("lineage")), _dict(record.get("request"))
    hit = lin.get("conversion_cache_hit")
    rows = [
        ("Hugging Face repo", lin.get("hf_repo") or request.get("hf_repo")),
        ("revision", lin.get("hf_revision") or request.get("hf_revision")),
        ("pinned sha", lin.get("hf_sha")),
        ("image", lin.get("image") or request.get("image")),
        ("conversion key", lin.get("conversion_key")),
        ("conversion cache hit", None if hit is None else ("yes" if hit else "no")),
        ("converted checkpoint", lin.get("converted_uri")),
        ("checkpoint uri", lin.get("checkpoint_uri")),
        ("export uri", lin.get("export_uri")),
        ("final step", lin.get("final_step")),
    ]
    return [(label, "-" if value is None or value == "" else str(value)) for label, value in rows]


def gate(record: dict[str, Any]) -> dict[str, Any] | None:
    """The gate's result, reasons and override, or None when no gate was evaluated."""
    raw = record.get("gate")
    if not isinstance(raw, dict):
        return None
    passed = raw.get("passed")
    override = _dict(raw.get("override"))
    return {
        "status": "passed" if passed is True else "failed" if passed is False else "pending",
        "reasons": [str(r) for r in raw.get("reasons") or []],
        "evaluated_at": _show_time(raw.get("evaluated_at")),
        "override": {
            "by": str(override.get("by") or "-"),
            "at": _show_time(override.get("at")),
            "reason": str(override.get("reason") or "-"),
        }
        if override
        else None,
    }


# ---- rendering ------------------------------------------------------------------------------------


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


def render_report(record: dict[str, Any], *, now: datetime | None = None) -> str:
    """The report page for one ledger record (``RunRecord.model_dump()``), as HTML text."""
    from markupsafe import Markup

    from rlpipe.cli import charts

    now = now or datetime.now(UTC)
    rows = attempt_rows(record, now)
    bars = [
        Bar(f"{r.stage} #{r.attempt}", r.gid, r.start, r.end, r.key, r.outcome == "running")
        for r in rows
        if r.start is not None and r.end is not None
    ]
    curve = reward_curve(record)
    request, failure = _dict(record.get("request")), _dict(record.get("failure"))
    labels = _dict(request.get("labels"))
    state = str(record.get("state") or "?")
    return str(
        _environment()
        .get_template(TEMPLATE)
        .render(
            run_id=str(record.get("run_id") or "?"),
            state=state,
            state_key=_STATE_KEY.get(state, "running"),
            stage=record.get("stage"),
            attempt=record.get("attempt"),
            model=request.get("model"),
            created_at=_show_time(record.get("created_at")),
            updated_at=_show_time(record.get("updated_at")),
            generated_at=now.strftime("%Y-%m-%d %H:%M:%S UTC"),
            failure={k: failure.get(k) for k in ("tag", "message", "stage", "attempt")} if failure else None,
            labels=sorted((str(k), str(v)) for k, v in labels.items()),
            colours=COLOURS,
            attempts=rows,
            timeline_svg=Markup(charts.timeline_svg(bars, now)) if bars else None,
            reward_svg=Markup(charts.reward_svg(curve)) if curve else None,
            curve=curve,
            evaluations=evaluations(record),
            no_evaluation=NO_EVALUATION,
            fmt_reward=fmt_reward,
            fmt_accuracy=fmt_accuracy,
            chip_hours=chip_hours(rows),
            lineage=lineage(record),
            gate=gate(record),
            gate_spec={k: v for k, v in _dict(request.get("gate")).items() if v is not None},
        )
    )


def write_report(record: dict[str, Any], path: Path, *, now: datetime | None = None) -> Path:
    """Render the report and write it to ``path`` (UTF-8); returns the path."""
    path = Path(path)
    html = render_report(record, now=now)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path


# ---- the subcommand -------------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> int:
    record = ledger(settings()).get(args.run)
    if record is None:
        print(f"no run {args.run}", file=sys.stderr)
        return 1
    try:
        path = write_report(record.model_dump(mode="json"), Path(args.output or f"{args.run}-report.html"))
    except ModuleNotFoundError as exc:  # the CLI extra is not installed
        print(f"rlpipe report needs {exc.name}: pip install 'rlpipe[cli]'", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def register(subparsers: Any, *, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> None:
    """Add ``report`` to the ``rlpipe`` parser; ``settings`` picks the deployment, ``ledger(settings)``
    opens its ledger (``cli.main._settings`` and ``cli.main._ledger``)."""
    p = subparsers.add_parser(
        "report", help="write one self-contained HTML page for a run: timeline, rewards, lineage, gate"
    )
    p.add_argument("run")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (default RUN-report.html)")
    p.set_defaults(func=lambda args: cmd_report(args, settings, ledger))
