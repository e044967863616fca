"""``rlpipe list [--state S]... [--label K=V]... [--team T]... [--since WHEN] [--limit N [--page-token T]] [--json]``.

Kept apart from ``main.py`` (like ``reconcile`` and ``report``) so ``register`` is the only line the
main parser needs. The filters and the page token are described in docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rlpipe.cli.exit_codes import ExitCode
from rlpipe.core import identity


def _since(value: str) -> Any:
    """``--since``: a duration back from now (``90s``, ``30m``, ``6h``, ``7d``, ``2w``) or an ISO 8601
    timestamp (a date, or a time; without a zone it is UTC)."""
    import re
    from datetime import UTC, datetime, timedelta

    found = re.fullmatch(r"(\d+)([smhdw])", value.strip())
    if found:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[found.group(2)]
        return datetime.now(UTC) - timedelta(**{unit: int(found.group(1))})
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r}: a duration (30m, 6h, 7d, 2w) or an ISO 8601 timestamp (2026-12-01T09:00:00Z)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _label(value: str) -> tuple[str, str]:
    key, sep, wanted = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{value!r}: write a label as key=value")
    return key.strip(), wanted.strip()


def _team(value: str) -> str:
    import re

    from rlpipe.core.teams import TEAM_NAME

    if not re.match(TEAM_NAME, value):
        raise argparse.ArgumentTypeError(
            f"{value!r}: not a team name (lowercase letters, digits and -, starting with a letter)"
        )
    return value


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number, 1 or more")
    return number


def _run_states() -> tuple[str, ...]:
    from typing import get_args

    from rlpipe.core.runs.record import State

    return tuple(get_args(State))


_STATES = _run_states()


def cmd_list(args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> int:
    from rlpipe.cli import runs

    where = runs.RunFilter(
        states=frozenset(args.state or ()),
        labels=tuple(args.label or ()),
        since=args.since,
        teams=frozenset(args.team or ()),
    )
    if args.page_token is not None and not identity.is_run_id(args.page_token):
        print(f"--page-token {args.page_token!r}: not a token `rlpipe list` gave", file=sys.stderr)
        return ExitCode.INVALID_INPUT
    if args.page_token is not None and args.limit is None:
        print("--page-token goes with --limit (the page size)", file=sys.stderr)
        return ExitCode.INVALID_INPUT
    chosen = settings()
    token: str | None = None
    if args.limit is None:
        records = [r for r in runs.list_runs(ledger(chosen)) if where.matches(r)]
    else:
        page = runs.list_page(ledger(chosen), limit=args.limit, after=args.page_token or "", where=where)
        records, token = page.records, page.next_page_token
    if args.json:
        print(json.dumps({"runs": [runs.list_entry(r) for r in records], "next_page_token": token}, indent=2))
        return ExitCode.OK
    if not records:
        print("no runs")
    else:
        from rlpipe.core.runs.results import reward_summary

        wide = max(len("TEAM"), *(len(r.team) for r in records)) + 2
        print(
            f"{'RUN':<14}{'STATE':<11}{'STAGE':<9}{'ATTEMPT':<8}{'TEAM':<{wide}}{'REWARD':<18}{'CREATED':<28}MODEL"
        )
        for r in records:
            post, gain = reward_summary(r.results or {})
            reward = "-" if post is None else f"{post:.4f}" + (f" ({gain:+.4f})" if gain is not None else "")
            print(
                f"{r.run_id:<14}{r.state:<11}{r.stage or '-':<9}{r.attempt:<8}{r.team:<{wide}}{reward:<18}"
                f"{r.created_at:<28}{r.request.get('model')}"
            )
    if token:
        print(f"more: rlpipe list --limit {args.limit} --page-token {token}")
    return ExitCode.OK


def register(subparsers: Any, *, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> None:
    """Add ``list`` to the ``rlpipe`` parser; ``settings`` picks the deployment, ``ledger(settings)``
    opens its ledger (``cli.main._settings`` and ``cli.main._ledger``)."""
    p = subparsers.add_parser("list", help="runs, newest first (filters and pages: docs/cli.md)")
    p.add_argument(
        "--state",
        action="append",
        choices=_STATES,
        metavar="STATE",
        help=f"only runs in this state (repeatable: any of them): {', '.join(_STATES)}",
    )
    p.add_argument(
        "--label",
        action="append",
        type=_label,
        metavar="KEY=VALUE",
        help="only runs whose request has this label (repeatable: all of them)",
    )
    p.add_argument(
        "--team",
        action="append",
        type=_team,
        metavar="NAME",
        help="only runs of this team (repeatable: any of them); default is the team of runs on a "
        "deployment without teams",
    )
    p.add_argument(
        "--since",
        type=_since,
        metavar="DURATION|TIMESTAMP",
        help="only runs created at or after it: 30m, 6h, 7d, 2w back from now, or 2026-12-01T09:00:00Z",
    )
    p.add_argument(
        "--limit", type=_positive, metavar="N", help="at most N runs, and a token for the next page"
    )
    p.add_argument("--page-token", metavar="TOKEN", help="the next page: the token the previous page printed")
    p.add_argument("--json", action="store_true", help="print the runs as JSON (docs/cli.md)")
    p.set_defaults(func=lambda args: cmd_list(args, settings, ledger))
