"""``rlpipe compare RUN RUN … [-o FILE] [--select RUN --reason TEXT]``: one page comparing runs
(``rlpipe.report.compare``) written where you ask; on the local stack the page says the runs were
simulated, and on which cluster (``control.lifecycle.run_report.local_cluster``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rlpipe.cli.exit_codes import CliError, ExitCode
from rlpipe.cli.output_files import output_path, write_page
from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import RunRecord


def cmd_compare(args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> int:
    runs: list[str] = list(args.runs)
    if len(runs) < 2:
        raise CliError(ExitCode.USAGE, "compare needs at least two runs")
    twice = sorted({r for r in runs if runs.count(r) > 1})
    if twice:
        raise CliError(ExitCode.USAGE, f"run {twice[0]} is named twice")
    if args.select is not None and args.select not in runs:
        raise CliError(ExitCode.USAGE, f"--select {args.select} is not one of the runs compared")
    if args.reason is not None and args.select is None:
        raise CliError(ExitCode.USAGE, "--reason goes with --select RUN")
    chosen = settings()
    opened = ledger(chosen)
    records = []
    for run in runs:
        record = opened.get(run)
        if record is None:
            from rlpipe.cli.lookup import not_found

            raise not_found(run)
        records.append(record)
    if args.json:
        print(
            json.dumps(
                comparison(records, args.select, args.reason, str(getattr(chosen, "prices_json", "") or ""))
            )
        )
        return 0
    path = output_path(args.output, f"compare-{'-'.join(runs)}.html")
    from rlpipe.control.lifecycle.run_report import local_cluster

    try:
        from rlpipe.cli import charts
        from rlpipe.report.compare import render_compare

        html = render_compare(
            records,
            selected=args.select,
            reason=args.reason,
            prices_json=str(getattr(chosen, "prices_json", "") or ""),
            cluster=local_cluster(chosen),  # on the local stack the page says it was simulated
            painter=charts,
        )
    except ModuleNotFoundError as exc:  # the CLI extra is not installed
        print(f"rlpipe compare needs {exc.name}: pip install 'rlpipe[cli]'", file=sys.stderr)
        return 1
    write_page(path, html)
    print(f"wrote {path}")
    return 0


def comparison(
    records: list[RunRecord], selected: str | None, reason: str | None, prices_json: str = ""
) -> dict[str, Any]:
    """The page's numbers as data (docs/cli.md, "compare --json"): each run's state, pre/post
    evaluation, chip-hours and cost, where a sweep's rule stopped it, the request fields that
    differ, and with a stopped run the chip-hours estimated without early stopping."""
    from datetime import UTC, datetime

    from rlpipe.report.compare import METRICS, config_differences, run_rows
    from rlpipe.report.stopping import savings, stop_marks

    now = datetime.now(UTC)
    marks = stop_marks(records)

    def number(record: RunRecord, when: str, field: str) -> float | None:
        evaluation = getattr(recorded.results(record.results), when)
        value = getattr(evaluation, field) if evaluation is not None else None
        return float(value) if value is not None else None

    runs = []
    for record, row in zip(records, run_rows(records, now=now, prices_json=prices_json), strict=True):
        mark = marks.get(record.run_id)
        runs.append(
            {
                "run_id": row["run_id"],
                "state": row["state"],
                "model": row["model"],
                "selected": row["run_id"] == selected,
                "metrics": {
                    field: {"pre": number(record, "pre", field), "post": number(record, "post", field)}
                    for field, *_ in METRICS
                },
                "chip_hours": float(row["chip_hours"]),
                "cost": row["cost"],
                "stopped": {
                    "rule": mark.rule,
                    "step": mark.step,
                    "trained_to": mark.trained_to,
                    "reason": mark.reason,
                }
                if mark
                else None,
            }
        )
    differences = [{"key": d.key, "values": d.values} for d in config_differences(records)]
    saved = savings(records, marks, now)
    early_stop = (
        {
            "chip_hours_used": round(saved.used, 2),
            "chip_hours_without_estimate": round(saved.without, 2) if saved.without is not None else None,
            "not_estimated": list(saved.unknown),
            "how": saved.how,
        }
        if saved
        else None
    )
    return {
        "runs": runs,
        "differences": differences,
        "selected": selected,
        "reason": reason,
        "early_stop": early_stop,
    }


def register(subparsers: Any, *, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> None:
    """Add ``compare`` to the ``rlpipe`` parser; ``settings`` picks the deployment and
    ``ledger(settings)`` opens its ledger (``cli.main._settings`` and ``cli.main._ledger``)."""
    p = subparsers.add_parser(
        "compare",
        help="write one self-contained HTML page comparing runs: reward curves, pre/post, cost, config differences",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="two or more run ids")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (default compare-RUN-RUN….html)")
    p.add_argument("--select", metavar="RUN", help="mark this run (one of those compared) as selected")
    p.add_argument("--reason", metavar="TEXT", help="why the selected run was selected")
    p.add_argument(
        "--json", action="store_true", help="print the comparison as JSON (docs/cli.md) instead of a page"
    )
    p.set_defaults(func=lambda args: cmd_compare(args, settings, ledger))
