"""``rlpipe retry RUN [--from STAGE] --reason …``: a failed or cancelled run goes on as a new round.

The ledger is checked first, so a run that cannot be retried (running, succeeded, gated) is
refused at once with the reason. Then the stage function is called (``op: retry``, with the same
ID token as ``rlpipe cancel``): it checks the caller, opens the round once per key and starts its
execution (``control/lifecycle/retry_rounds.py``). The key is made once here, so a call repeated after a lost
answer opens no second round. docs/retry.md explains the rest.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlpipe.cli.exit_codes import ExitCode
from rlpipe.control.lifecycle import retry_rounds
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import identity

CALL_TRIES = 3  # a lost answer is asked again with the same key: still one round


class NotRetried(Exception):
    """The run cannot be retried (or the stage function refused): the message says why.
    ``code``: the CLI's exit code for it (``cli.exit_codes``)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Retried:
    run_id: str
    outcome: str  # started | duplicate (the key's round existed: an earlier call got through)
    round: int
    by: str | None
    state: str | None
    execution: str | None


def request_retry(
    settings: Any,
    ledger: Ledger,
    run_id: str,
    *,
    reason: str,
    from_stage: str | None = None,
    by: str | None = None,
    key: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Retried:
    """Check the ledger, then ask the stage function for the round (again, with the same key,
    when the answer is lost on the way)."""
    from rlpipe.cli.runs import StageRefused, StageUnreachable, call_stage
    from rlpipe.core.operator_contract import RetryAnswer

    if not reason.strip():
        raise NotRetried("--reason is required: say why the run should go on")
    record = ledger.get(run_id)
    if record is None:
        raise NotRetried(f"no run {run_id}")
    from rlpipe.cli.runs import policies

    why = retry_rounds.refusal(record, from_stage, policies(settings, ledger))
    if why is not None:
        raise NotRetried(why)
    body = retry_rounds.call_body(
        run_id, reason=reason.strip(), key=key or uuid.uuid4().hex, from_stage=from_stage, by=by
    )
    for tries in range(1, CALL_TRIES + 1):
        try:
            answer = RetryAnswer.model_validate(call_stage(settings, body))
            break
        except StageUnreachable:
            if tries == CALL_TRIES:
                raise NotRetried(
                    f"the stage function did not answer {CALL_TRIES} times; the round may exist: "
                    f"rlpipe status {run_id}",
                    code=ExitCode.TRANSIENT,
                ) from None
            sleep(2.0 * tries)
        except StageRefused as exc:  # the stage function's own sentence
            raise NotRetried(exc.message) from None
        except RuntimeError as exc:  # no stage URL
            raise NotRetried(str(exc)) from None
    return Retried(answer.run_id, answer.outcome, answer.round, by, answer.state, answer.execution)


def register(subparsers: Any, *, settings: Callable[[], Any], ledger: Callable[[Any], Ledger]) -> None:
    p = subparsers.add_parser(
        "retry", help="continue a failed or cancelled run as a new round (same run, training resumes)"
    )
    p.add_argument("run")
    p.add_argument(
        "--from",
        dest="from_stage",
        choices=identity.STAGES,
        default=None,
        help="run this stage and every later one again, even if done (default: only what is not done)",
    )
    p.add_argument("--reason", required=True, help="why the run should go on (recorded in its rounds)")
    p.add_argument(
        "--by", default=None, help="who asks (default: your user name; the verified caller is recorded too)"
    )
    p.set_defaults(func=lambda args: cmd_retry(args, settings, ledger))


def cmd_retry(args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Ledger]) -> int:
    s = settings()
    try:
        done = request_retry(
            s,
            ledger(s),
            args.run,
            reason=args.reason,
            from_stage=args.from_stage,
            by=args.by or getpass.getuser(),
        )
    except NotRetried as exc:
        print(str(exc), file=sys.stderr)
        return exc.code
    start = f" from {args.from_stage}" if args.from_stage else ""
    print(
        f"run {done.run_id}: round {done.round}{start} started by {done.by}; "
        f"execution {done.execution or '(starting)'}"
    )
    print(f"follow it with: rlpipe watch {done.run_id}")
    return 0
