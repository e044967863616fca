"""``rlpipe promote RUN --reason …``: a person overrides the quality gate of a ``gated`` run.

The override (who, when, why) is recorded on the gate and in the lineage, the run leaves ``gated``
and a new execution of the same run is started through intake's exactly-once start. That
execution skips every stage whose done rule already holds (train's checkpoints are kept when a run
is gated), passes the gate by the override, and goes on to export and publish.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any

from rlpipe.control.ledger import Execution, GateOverride, GateRecord, Ledger, RunRecord, now


class NotPromotable(Exception):
    """The run is not ``gated`` (or does not exist): the reason says what it is."""


def promote(ledger: Ledger, run_id: str, *, by: str, reason: str, start: Callable[[str], Any]) -> RunRecord:
    """Record the override and start the run's next execution (``start``: ``Intake.start_claimed``)."""
    if not reason.strip():
        raise NotPromotable("--reason is required: say why this model should ship despite the gate")
    if ledger.get(run_id) is None:
        raise NotPromotable(f"no run {run_id}")
    refused: list[str] = []

    def change(r: RunRecord) -> str | None:
        refused.clear()
        if (
            r.state == "training"
            and not r.execution.name
            and r.gate is not None
            and r.gate.override is not None
        ):
            return None  # promoted already (a lost write response, or a start that never happened): start it
        if r.state != "gated":
            refused.append(f"run {run_id} is {r.state}; only a gated run can be promoted")
            return None
        override = GateOverride(by=by, at=now(), reason=reason.strip())
        r.gate = (r.gate or GateRecord()).model_copy(update={"override": override})
        r.lineage.promoted = override
        r.set_state("training")  # after train: the next execution skips it by its done rule
        r.failure = None
        r.execution = Execution()
        return "promoted"

    record = ledger.update(
        run_id,
        change,
        detail=lambda r: {"override": r.gate.override.model_dump() if r.gate and r.gate.override else None},
    )
    if refused:
        raise NotPromotable(refused[0])
    start(run_id)
    return ledger.get(run_id) or record


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
    from rlpipe.control import services
    from rlpipe.control.logs import Logger

    s = settings()
    intake = services.intake(Logger("rlpipe-cli"))
    try:
        record = promote(
            ledger(s),
            args.run,
            by=args.by or getpass.getuser(),
            reason=args.reason,
            start=intake.start_claimed,
        )
    except NotPromotable as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(
        f"run {record.run_id}: promoted by {record.lineage.promoted.by if record.lineage.promoted else '?'}; "
        f"state {record.state}, execution {record.execution.name or '(starting)'}"
    )
    return 0
