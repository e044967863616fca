"""``rlpipe promote RUN --reason …``: asks the stage function to override a gated run's gate.

The decision is made in the control plane (``rlpipe.control.lifecycle.promotion``), which may write ledgers;
the CLI only calls it, as ``rlpipe cancel`` does, and prints sentences: what happened and how to
follow the run, or the stage function's reason for refusing (not its JSON answer).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any

from rlpipe.control.lifecycle.ledger import Ledger


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
    from rlpipe.cli.exit_codes import ExitCode
    from rlpipe.cli.runs import StageRefused, StageUnreachable, call_stage
    from rlpipe.core.operator_contract import PromoteAnswer

    body = {"op": "promote", "run_id": args.run, "by": args.by or getpass.getuser(), "reason": args.reason}
    try:
        answer = PromoteAnswer.model_validate(call_stage(settings(), body))
    except StageRefused as exc:  # the stage function's own sentence
        print(f"rlpipe promote: {exc.message}", file=sys.stderr)
        return 1
    except StageUnreachable as exc:  # no answer: worth trying again
        print(f"rlpipe promote: {exc}", file=sys.stderr)
        return int(ExitCode.TRANSIENT)
    except RuntimeError as exc:  # no stage URL
        print(f"rlpipe promote: {exc}", file=sys.stderr)
        return 1
    # Not the ledger's state word: a promoted run re-enters at "training" only so that its next
    # execution passes the stages whose done rules hold (train and export, kept since the gate),
    # and "state training" read as training again.
    print(
        f"run {answer.run_id}: promoted by {answer.by}; its next execution "
        f"({answer.execution or 'starting'}) skips train and export, which are done, and publishes it"
    )
    print(f"follow it with: rlpipe watch {answer.run_id}")
    return 0
