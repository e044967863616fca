"""``rlpipe promote RUN --reason …``: asks the stage function to override a gated run's gate.

The decision is made in the control plane (``rlpipe.control.promotion``), which may write ledgers;
the CLI only calls it, as ``rlpipe cancel`` does, and prints sentences: what happened and how to
follow the run, or the stage function's reason for refusing (not its JSON answer).
"""

from __future__ import annotations

import argparse
import ast
import getpass
import re
import sys
from collections.abc import Callable
from typing import Any

from rlpipe.control.ledger import Ledger


def register(subparsers: Any, *, settings: Callable[[], Any], ledger: Callable[[Any], Ledger]) -> None:
    p = subparsers.add_parser(
        "promote", help="override the quality gate of a gated run: export and publish it"
    )
    p.add_argument("run")
    p.add_argument(
        "--reason", required=True, help="why the model should ship anyway (recorded in the lineage)"
    )
    p.add_argument("--by", default=None, help="who decides (default: your user name)")
    p.set_defaults(func=lambda args: cmd_promote(args, settings, ledger))


def cmd_promote(
    args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Ledger]
) -> int:
    from rlpipe.cli.runs import call_stage

    body = {"op": "promote", "run_id": args.run, "by": args.by or getpass.getuser(), "reason": args.reason}
    try:
        answer = call_stage(settings(), body)
    except RuntimeError as exc:  # the stage function's refusal, with its reason
        print(f"rlpipe promote: {refusal_text(str(exc))}", file=sys.stderr)
        return 1
    print(
        f"run {answer['run_id']}: promoted by {answer['by']}; state {answer['state']}, "
        f"execution {answer['execution'] or '(starting)'}"
    )
    print(f"follow it with: rlpipe watch {answer['run_id']}")
    return 0


# How rlpipe.cli.runs.call_stage words a refusal: "stage promote failed (422): {payload}", the
# payload being the stage function's JSON answer as a Python dict.
_REFUSED = re.compile(r"^stage \w+ failed \((?P<status>\d{3})\): (?P<payload>\{.*\})$", re.DOTALL)


def refusal_text(raised: str) -> str:
    """The stage function's own sentence ("run … is succeeded; only a gated run can be promoted")
    instead of the dict it came in, which a person had to read through to find it. Anything not
    in that shape is shown as it is."""
    found = _REFUSED.match(raised)
    if found is None:
        return raised
    try:
        payload = ast.literal_eval(found["payload"])
    except (ValueError, SyntaxError, RecursionError):
        return raised
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else raised
