"""``rlpipe watch-list validate FILE`` and ``rlpipe upstream check [--repo R]``.

Kept apart from ``cli.py`` so the upstream commands grow without touching the main parser;
``register`` adds them to it. ``upstream check`` is a dry run against the deployment: it reads
the watch list and the Hub, says what a poll would do and why, and submits and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlpipe.cli.exit_codes import ExitCode


def _policy_for(team: str | None) -> Any:
    """The allowlists intake checks a release of ``team``'s entry against, from the deployment's
    settings in the environment (``RLPIPE_TEAMS`` and the allowlists; else the built-in defaults)."""
    from rlpipe.cli.request_files import policy
    from rlpipe.control.adapters.settings import Settings

    return policy().for_team_named(Settings.from_env().teams(), team)


def cmd_watch_list_validate(args: argparse.Namespace) -> int:
    from rlpipe.upstream.watchlist import WatchListInvalid, validate_watch_list

    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    try:
        watch = validate_watch_list(data, source=args.file, policy_for=_policy_for)
    except WatchListInvalid as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    print(f"{args.file}: valid ({len(watch.entries)} entr{'y' if len(watch.entries) == 1 else 'ies'})")
    for entry in watch.entries:
        state = "enabled" if entry.enabled else "disabled"
        print(
            f"  {entry.hf_repo}@{entry.branch}  template {entry.template_hash}  "
            f"debounce {entry.debounce_minutes} min  {state}"
        )
    return 0


def cmd_upstream_check(args: argparse.Namespace, settings: Callable[[], Any]) -> int:
    from rlpipe.control.adapters.logs import Logger
    from rlpipe.upstream.service import check

    # Log lines go to stderr: stdout carries the report (and must stay parseable with --json).
    report = check(settings(), repo=args.repo, dry_run=True, log=Logger("upstream-check", stream=sys.stderr))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print("dry run: nothing is submitted and no state is written")
        print(report.render())
    # An entry that errored (the Hub did not answer, ...) is checked again by the next poll.
    return ExitCode.TRANSIENT if report.count("error") else ExitCode.OK


def _env_settings() -> Any:
    from rlpipe.control.adapters.settings import Settings

    return Settings.from_env()


def register(subparsers: Any, *, settings: Callable[[], Any] = _env_settings) -> None:
    """Add ``watch-list`` and ``upstream`` to the ``rlpipe`` parser; ``settings`` picks the deployment
    (cli.py passes its ``_settings``, which points at a running local stack)."""
    p = subparsers.add_parser("watch-list", help="the upstream watch list (config/watch.yaml)")
    sub = p.add_subparsers(dest="watch_list_command", required=True)
    v = sub.add_parser("validate", help="check a watch list file; exit 1 listing every problem")
    v.add_argument("file", help="watch.yaml, or - for stdin")
    v.set_defaults(func=cmd_watch_list_validate)

    p = subparsers.add_parser("upstream", help="Hugging Face release detection")
    sub = p.add_subparsers(dest="upstream_command", required=True)
    c = sub.add_parser(
        "check", help="dry run of one poll: what would be released, ignored or waited for, and why"
    )
    c.add_argument("--repo", help="only this Hugging Face repo (owner/name)")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(func=lambda args: cmd_upstream_check(args, settings))
