"""8. `rlpipe report`: rendering one run's page, with 1,000 evaluation points and 30 attempts.

**What:** the wall time of ``rlpipe.report.render_report`` (pure: the run's record in, the
HTML out; both matplotlib SVG charts and the Jinja2 page) for a synthetic run with
``--points`` (default 1,000) intermediate evaluations, pre and post, ``--attempts`` (default 30)
attempts over convert/train/export/publish with every outcome and failure class, per-attempt
chip-hours and a gate with an override. The requirement is a median under 2 s.

**How:** in this process, one unmeasured render first (imports, matplotlib's font lookup), then
``--reps`` (default 5) timed renders; the median is the figure. Separately, the first render in a
fresh interpreter (``import`` of the report module, matplotlib and Jinja2 included, then one
render), which is what one ``rlpipe report`` invocation pays on top of reading the ledger.

**Baseline, same run:** the same measurement for a minimal run (one finished attempt, no
evaluation: one chart and the page), so the ratio shows what the large run's data costs. The page's
size is printed too. Correctness is checked, not timed: the large page has two charts, every point
and every attempt; if not, the benchmark exits 1.

    .venv/bin/python -m bench.report [--points 1000] [--attempts 30] [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import PYTHON, Section, ratio, secs, table  # noqa: E402

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
LEDGER_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # rlpipe.core.runs.record.LEDGER_TIME
REQUIREMENT_SECONDS = 2.0
# Failed attempts cycle through these; the last attempt of each stage succeeds (publish runs).
FAILURES = ("preempted", "capacity", "resources", "transient", "permanent")


def _ts(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime(LEDGER_TIME)


def synthetic_run(points: int, attempts: int) -> dict[str, Any]:
    """A ledger record (``RunRecord.model_dump()`` plus results, gate and chip_hours) of that size."""
    per_stage = {"convert": max(1, attempts // 10), "export": max(1, attempts // 10), "publish": 1}
    per_stage["train"] = max(1, attempts - sum(per_stage.values()))
    rows, clock, n = [], 0.0, 0
    for stage in ("convert", "train", "export", "publish"):
        for number in range(1, per_stage[stage] + 1):
            last = number == per_stage[stage]
            running = stage == "publish"
            minutes = 240.0 if stage == "train" else 20.0
            failure = None if last else FAILURES[n % len(FAILURES)]
            rows.append(
                {
                    "stage": stage,
                    "attempt": number,
                    "workload": f"rbench000001-{stage}-a{number}",
                    "uid": None,
                    "launched_at": _ts(clock),
                    "finished_at": None if running else _ts(clock + minutes),
                    "phase": "running" if running else ("succeeded" if last else "failed"),
                    "failure_class": failure,
                    "reason": f"{failure}: synthetic" if failure else None,
                    "resume_step": 10 * number if stage == "train" and number > 1 else None,
                    "chip_hours": None if running else (minutes / 60 * (32 if stage == "train" else 0)),
                }
            )
            clock += minutes + 1
            n += 1
    step = 10
    intermediate = [
        {
            "step": step * (i + 1),
            "mean_reward": 0.2 + 0.6 * (1 - math.exp(-i / 200)) + 0.02 * math.sin(i),
            "accuracy": 20 + 50 * (1 - math.exp(-i / 250)) + math.cos(i),
        }
        for i in range(points)
    ]
    evaluation = {"corr": 0, "total": 512, "partial_accuracy": 0.0, "format_accuracy": 99.0}
    return {
        "run_id": "rbench000001",
        "key": "request:bench",
        "source": {"kind": "cli"},
        "request": {"model": "gemma4-26b", "labels": {"team": "rl", "bench": "report"}},
        "state": "gated",
        "stage": "publish",
        "attempt": 1,
        "attempts": rows,
        "lineage": {"hf_repo": "google/gemma-4-26b-a4b-it", "hf_sha": "0" * 40, "final_step": step * points},
        "results": {
            "pre": {**evaluation, "accuracy": 20.0, "mean_reward": 0.2},
            "post": {**evaluation, "accuracy": 70.5, "mean_reward": 0.81},
            "intermediate": intermediate,
            "final_step": step * points,
        },
        "gate": {
            "passed": False,
            "reasons": ["post accuracy 70.5 below 75"],
            "evaluated_at": _ts(clock),
            "override": {"by": "bench@example.com", "at": _ts(clock + 1), "reason": "benchmark"},
        },
        "created_at": _ts(0),
        "updated_at": _ts(clock),
    }


def minimal_run() -> dict[str, Any]:
    """The baseline: one finished attempt, no evaluation, no gate."""
    record = synthetic_run(0, 1)
    record["attempts"] = record["attempts"][:1]
    record.pop("results")
    record.pop("gate")
    return record


def _timed(record: dict[str, Any], reps: int) -> tuple[list[float], str]:
    from rlpipe.cli import charts as cli_charts
    from rlpipe.core.runs.record import RunRecord
    from rlpipe.report import render_report

    now = T0 + timedelta(days=2)
    run = RunRecord.model_validate(record)  # what Ledger.get hands the report
    # unmeasured: imports, font lookup, template compile
    html = render_report(run, now=now, painter=cli_charts)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        html = render_report(run, now=now, painter=cli_charts)
        times.append(time.perf_counter() - t0)
    return times, html


_FIRST_CALL = """
import json, sys, time
t0 = time.perf_counter()
from rlpipe.cli import charts as cli_charts
from rlpipe.core.runs.record import RunRecord
from rlpipe.report import render_report
import matplotlib.figure, jinja2
t1 = time.perf_counter()
record = RunRecord.model_validate(json.load(sys.stdin))
t2 = time.perf_counter()
render_report(record, painter=cli_charts)
t3 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "render": t3 - t2}))
"""


def _first_call(record: dict[str, Any]) -> dict[str, float]:
    out = subprocess.run(
        [PYTHON, "-c", _FIRST_CALL],
        input=json.dumps(record),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'shared'}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
        check=True,
    )
    return {k: float(v) for k, v in json.loads(out.stdout).items()}


def _check(html: str, points: int, attempts: int) -> list[str]:
    found = {
        "charts": (html.count("<svg"), 2),
        "points in the data table": (html.count("data-step=") - 2, points),  # and pre and post
        "attempts in the table": (html.count("data-attempt="), attempts),
    }
    return [f"{n} {what}, expected {want}" for what, (n, want) in found.items() if n != want]


def run(args: argparse.Namespace) -> Section:
    started = time.monotonic()
    large, small = synthetic_run(args.points, args.attempts), minimal_run()
    large_times, large_html = _timed(large, args.reps)
    small_times, small_html = _timed(small, args.reps)
    large_first, small_first = _first_call(large), _first_call(small)
    problems = _check(large_html, args.points, args.attempts)
    median, base = statistics.median(large_times), statistics.median(small_times)
    label = f"{args.points:,} points, {args.attempts} attempts"
    rows = [
        [
            f"render, median of {args.reps} (warm)",
            secs(median),
            secs(base),
            ratio(median, base),
            f"{'met' if median < REQUIREMENT_SECONDS else 'NOT met'} (< {REQUIREMENT_SECONDS:g} s)",
        ],
        [
            "first render in a fresh interpreter",
            secs(large_first["render"]),
            secs(small_first["render"]),
            ratio(large_first["render"], small_first["render"]),
            "",
        ],
        [
            "imports (report, matplotlib, Jinja2)",
            secs(large_first["imports"]),
            secs(small_first["imports"]),
            "",
            "",
        ],
        [
            "page size",
            f"{len(large_html.encode()) / 1024:.0f} KiB",
            f"{len(small_html.encode()) / 1024:.0f} KiB",
            "",
            "",
        ],
    ]
    body = table(["figure", label, "minimal run (baseline)", "ratio", "requirement"], rows)
    body += "\n\nwarm renders: " + ", ".join(secs(t) for t in large_times)
    if problems:
        body += "\n\n**correctness check failed:** " + "; ".join(problems)
    return Section(
        key="report",
        title="8. `rlpipe report` render time",
        body=body,
        headline=[("report render (median)", secs(median), ratio(median, base) + " vs a minimal run")],
        data={
            "points": args.points,
            "attempts": args.attempts,
            "large": {"warm": large_times, "first": large_first, "bytes": len(large_html.encode())},
            "minimal": {"warm": small_times, "first": small_first, "bytes": len(small_html.encode())},
            "problems": problems,
        },
        seconds=time.monotonic() - started,
        ok=not problems,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=1000, help="intermediate evaluations (default 1000)")
    p.add_argument("--attempts", type=int, default=30, help="attempts over the four stages (default 30)")
    p.add_argument("--reps", type=int, default=5, help="timed renders; the median is reported (default 5)")
    p.add_argument("--json", action="store_true", help="print the raw data as JSON instead of the table")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    section = run(args)
    print(json.dumps(section.data, indent=2) if args.json else f"## {section.title}\n\n{section.body}")
    return 0 if section.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
