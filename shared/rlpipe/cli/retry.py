"""``rlpipe retry RUN [--from STAGE] --reason …``: a failed or cancelled run goes on as a new round.

The ledger is checked first, so a run that cannot be retried (running, succeeded, gated) is
refused at once with the reason. Otherwise the retry control document goes through the same door
as a request (a file in the requests bucket, or a message on the requests topic), where intake
opens the round once per delivery and starts its execution (``control/retry.py``); this command
then polls the ledger until the round appears and prints it. docs/retry.md explains the rest.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rlpipe.control import blobstore, retry
from rlpipe.control.ledger import Ledger, Round, RunRecord
from rlpipe.core import identity, layout


class NotRetried(Exception):
    """The run cannot be retried (or the retry was refused by intake): the message says why."""


@dataclass(frozen=True)
class Retried:
    run_id: str
    via: str
    where: str
    key: str
    round: Round | None  # None: not seen in the ledger within the wait
    record: RunRecord | None


def submit_document(
    settings: Any, doc: dict[str, Any], run_id: str, *, via: str = "gcs", storage_client: Any = None
) -> tuple[str, str]:
    """Hand the control document to intake as ``rlpipe submit`` hands a request; → (where, key)."""
    data = blobstore.dumps(doc)  # the one writer: tokens in a reason or `by` are masked
    if via == "gcs":
        from rlpipe.control.blobstore import make_client

        client = storage_client or make_client(settings.project)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        name = f"{layout.REQUESTS_PREFIX}retry-{run_id}-{stamp}.json"
        blob = client.bucket(settings.requests_bucket).blob(name)
        blob.upload_from_string(data, if_generation_match=0)
        where = f"gs://{settings.requests_bucket}/{name}"
        return where, identity.key_for_object(settings.requests_bucket, name, blob.generation)
    if via == "pubsub":
        from rlpipe.cli.runs import _publish

        topic = settings.topic_path(settings.requests_topic)
        message_id = _publish(settings, topic, data)
        return f"{topic} message {message_id}", identity.key_for_message(topic, message_id)
    raise ValueError(f"unknown --via {via!r}; use gcs or pubsub")


def request_retry(
    settings: Any,
    ledger: Ledger,
    run_id: str,
    *,
    reason: str,
    from_stage: str | None = None,
    by: str | None = None,
    via: str = "gcs",
    wait: float = 30.0,
    storage_client: Any = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Retried:
    """Check, submit, and wait for the round (and its execution) to appear in the ledger."""
    if not reason.strip():
        raise NotRetried("--reason is required: say why the run should go on")
    record = ledger.get(run_id)
    if record is None:
        raise NotRetried(f"no run {run_id}")
    why = retry.refusal(record, from_stage)
    if why is not None:
        raise NotRetried(why)
    doc = retry.document(run_id, reason=reason.strip(), from_stage=from_stage, by=by)
    where, key = submit_document(settings, doc, run_id, via=via, storage_client=storage_client)
    deadline = time.monotonic() + wait
    seen: Round | None = None
    while True:
        record = ledger.get(run_id)
        seen = next((r for r in record.rounds if r.key == key), None) if record else None
        if seen is not None and record is not None and (record.execution.name or record.round != seen.round):
            break
        if seen is None and (refused := _refusal_of(ledger, run_id, key)):
            raise NotRetried(f"intake refused the retry: {refused}")
        if time.monotonic() >= deadline:
            break
        sleep(0.25)
    return Retried(run_id, via, where, key, seen, record)


def _refusal_of(ledger: Ledger, run_id: str, key: str) -> str | None:
    """The reason intake noted for refusing the delivery ``key``, if it did."""
    for name in ledger.store.list(ledger.layout(run_id).events_prefix):
        if name.endswith("-retry-refused.json"):
            event = ledger.store.read(name).json()
            if event.get("key") == key:
                return str(event.get("reason"))
    return None


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
    p.add_argument("--by", default=None, help="who asks (default: your user name)")
    p.add_argument("--via", choices=["gcs", "pubsub"], default="gcs")
    p.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the round to appear")
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
            via=args.via,
            wait=args.wait,
        )
    except NotRetried as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if done.round is None:
        print(
            f"submitted the retry of {done.run_id} via {done.via} ({done.where}), but its round has not "
            f"appeared in the ledger within {args.wait:g} s; follow it with: rlpipe status {done.run_id}",
            file=sys.stderr,
        )
        return 1
    execution = done.record.execution.name if done.record else None
    start = f" from {done.round.from_stage}" if done.round.from_stage else ""
    print(
        f"run {done.run_id}: round {done.round.round}{start} started by {done.round.by}; "
        f"execution {execution or '(starting)'}"
    )
    print(f"follow it with: rlpipe watch {done.run_id}")
    return 0
