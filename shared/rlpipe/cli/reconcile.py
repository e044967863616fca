"""``rlpipe reconcile [--dry-run] [--budget S] [--json]``: one reconcile pass from a terminal.

Kept apart from ``cli.py`` (like ``cli_upstream``) so ``register`` is the only line the main parser
needs. ``--dry-run`` is the way to look before the tick acts: it prints exactly the plan a real pass
would carry out, writes nothing (not even the cursor) and exits 0. A real pass exits 75 (try again
later) when any repair failed, so a script notices; the next pass retries it either way.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rlpipe.cli.argument_types import positive_seconds
from rlpipe.cli.exit_codes import ExitCode


def cmd_reconcile(args: argparse.Namespace, settings: Callable[[], Any]) -> int:
    from rlpipe.control.adapters.logs import Logger
    from rlpipe.reconcile.runner import DEFAULT_BUDGET_SECONDS, build

    budget = DEFAULT_BUDGET_SECONDS if args.budget is None else args.budget
    # Log lines go to stderr: stdout carries the plan (and must stay parseable with --json).
    reconciler = build(settings(), Logger("reconcile", stream=sys.stderr), budget_seconds=budget)
    report = reconciler.run_pass(dry_run=args.dry_run)
    if args.json:
        print(
            json.dumps(
                {
                    **report.summary(),
                    "outcomes": [
                        {
                            "run_id": o.run_id,
                            "status": o.status,
                            "detail": o.detail,
                            "action": o.action.kind if o.action else None,
                            "found": o.action.found if o.action else None,
                            "do": o.action.do if o.action else None,
                        }
                        for o in report.outcomes
                    ],
                    "problems": report.problems,
                },
                indent=2,
            )
        )
    else:
        print(report.render())
    # A failed repair is retried by the next pass: worth running again later (cli/exit_codes.py).
    return ExitCode.OK if args.dry_run or not report.failed else ExitCode.TRANSIENT


def _env_settings() -> Any:
    from rlpipe.control.adapters.settings import Settings

    return Settings.from_env()


def register(subparsers: Any, *, settings: Callable[[], Any] = _env_settings) -> None:
    """Add ``reconcile`` to the ``rlpipe`` parser; ``settings`` picks the deployment."""
    p = subparsers.add_parser(
        "reconcile", help="one reconcile pass: repair runs whose ledger, execution and workloads disagree"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan; change nothing; exit 0")
    p.add_argument(
        "--budget",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop cleanly after this long and resume from the cursor next time "
        "(default: the scheduled pass's budget, reconcile/runner.py DEFAULT_BUDGET_SECONDS)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=lambda args: cmd_reconcile(args, settings))
