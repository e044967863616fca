"""Promote: a person overrides the quality gate of a ``gated`` run, through the stage function.

Why through ``stage`` and not a ledger write from a laptop: operators hold only read access to the
state bucket (infra/terraform/iam.tf), and the one door they may open is the stage function (as
``rlpipe cancel`` does, with the operators' service account's ID token). The override (who, when,
why) is recorded on the gate and in the lineage, the run leaves ``gated``, and a new execution of
the same run is started through intake's exactly-once start. That execution skips every stage
whose done rule already holds, passes the gate by the override, and goes on to export and publish.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.runs import end_record
from rlpipe.core.runs.record import GateOverride, RunRecord, now

MAX_REASON_CHARS = 2000
MAX_BY_CHARS = 200


class NotPromotable(Exception):
    """The run is not ``gated`` (or does not exist): the reason says what it is."""


def promote(
    ledger: Ledger,
    run_id: str,
    *,
    by: str,
    reason: str,
    start: Callable[[str], Any],
    caller: str | None = None,
) -> RunRecord:
    """Record the override and start the run's next execution (``start``: ``Intake.start_claimed``)."""
    if not reason.strip():
        raise NotPromotable("--reason is required: say why this model should ship despite the gate")
    if ledger.get(run_id) is None:
        raise NotPromotable(f"no run {run_id}")

    override = GateOverride(by=by, at=now(), reason=reason.strip(), caller=caller)
    record, refused = ledger.update(
        run_id,
        lambda r: end_record.promote(r, override),
        detail=lambda r: {"override": r.gate.override.model_dump() if r.gate and r.gate.override else None},
    )
    if refused is not None:
        raise NotPromotable(refused)
    start(run_id)
    return ledger.get(run_id) or record
