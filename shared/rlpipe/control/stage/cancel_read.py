"""A cancel's last read of a training head: its log to the end, once its pods are gone.

Why: the record of a running attempt holds what the workflow's last poll read. A cancel between two
polls lost what the head printed since then: a cancel two seconds into a run offered a retry "from
step 36", the retry resumed from step 50, and the evaluations at steps 40 and 50 were missing from
status and the report. So once the run is finished (``operator_ops.cancel``), each train attempt
the cancel deleted is read once more after its pods have gone (Cloud Logging keeps the lines of a
pod that is gone), its evaluations and last step recorded as a status read records them (on a
cancelled attempt a read only adds: ``phase_record.apply``), with the newest committed checkpoint,
which is what a retry resumes from and what the retry hint names (``Attempt.committed_step``).

Kept apart from ``service``: it is one job, done after the run has ended, by the cancel alone.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rlpipe.control.adapters.logs import Logger
from rlpipe.core import layout
from rlpipe.core.request import Request
from rlpipe.core.runs import phase_record
from rlpipe.core.runs.record import RunRecord

if TYPE_CHECKING:
    from rlpipe.control.stage.service import HeldWorkload, StageService

# The pods get this long in all after the run is finished. The stage function answers within 60 s
# (infra/terraform/functions.tf), and a run's reads before this take up to about 10 s.
GONE_WITHIN_SECONDS = 20.0
# A sweep's cancel ends each live child first (a delete and up to 10 s of reads each), so its reads
# to the end stop once the cancel has run this long, whatever is left unread: the answer must come
# within the function's 60 s, or the CLI reports an error for a cancel that was done.
CANCEL_SECONDS = 45.0


def read_to_end(
    service: StageService, run_id: str, held: list[HeldWorkload], within: float = GONE_WITHIN_SECONDS
) -> None:
    """Each train attempt of ``held`` (what the cancel deleted) read to its head's end: its pods get
    ``within`` seconds in all to go; an attempt whose pods outlive that is read as far as its log
    goes, and no checkpoint is named for it. Never raises: an attempt whose read fails keeps what
    was recorded before."""
    log = service.log.bind(run_id=run_id)
    deadline = time.monotonic() + within
    for w in held:
        if w.stage != "train":
            continue
        try:
            _read_one(service, run_id, w, max(0.0, deadline - time.monotonic()), log)
        except Exception as exc:  # what was recorded before stands
            log.warning(
                "cancel: the head's log could not be read to its end",
                workload=w.name,
                error=f"{type(exc).__name__}: {exc}",
            )


def read_members_to_end(
    service: StageService, ended: list[tuple[str, list[HeldWorkload]]], started: float
) -> None:
    """A group's members ended by one cancel (``started``: when it began, on ``time.monotonic``),
    each read as ``read_to_end`` reads a run. Their pods were all deleted before the first wait, so
    one ``GONE_WITHIN_SECONDS`` serves them all; no member is read once the cancel has run
    ``CANCEL_SECONDS``, and each one left is said in the log (its record keeps what its last poll
    read, and no checkpoint is named for it)."""
    stop = started + CANCEL_SECONDS
    gone_by = min(time.monotonic() + GONE_WITHIN_SECONDS, stop)
    for run_id, held in ended:
        if time.monotonic() >= stop:
            service.log.bind(run_id=run_id).warning(
                "cancel: not read to its end, the cancel's time is spent", seconds=CANCEL_SECONDS
            )
            continue
        read_to_end(service, run_id, held, within=max(0.0, gone_by - time.monotonic()))


def _read_one(service: StageService, run_id: str, w: HeldWorkload, within: float, log: Logger) -> None:
    from rlpipe.control.stage.service import PodsToEnd

    record = service.ledger.get(run_id)
    if record is None:
        return
    cluster = service.cluster_for(record)
    gone = isinstance(cluster, PodsToEnd) and cluster.pods_gone(
        w.kind, w.name, uid=w.uid, run_id=run_id, stage=w.stage, attempt=w.attempt, within=within
    )
    if not gone:
        log.warning(
            "cancel: the head's pods outlived the wait; its last lines may be unread", workload=w.name
        )
    record = service.ledger.get(run_id) or record  # again: a poll may have moved its log cursor meanwhile
    progress, seen, cursor, _ = service.read_train_log(record, w.name, w.attempt)
    req = Request.model_validate(record.request)
    committed: int | None = None
    if gone:  # nothing can commit any more: 0 when no step was committed (a retry starts afresh)
        scope = service.settings.teams().cache_scope(record.team)
        run = layout.RunLayout(service.artifacts.bucket_name, run_id, scope=scope)
        committed = layout.latest_committed_step(service.artifacts.list(run.checkpoints), run) or 0
    moved = cursor.to_json() if cursor is not None else None
    prices = service.settings.prices_json

    def change(r: RunRecord) -> tuple[str | None, None]:
        a = r.attempt_record(w.stage, w.attempt)
        if a is None:
            return None, None
        reading = phase_record.Reading(a.phase, None, progress, seen, layout.final_step_for(req), {}, moved)
        what, _ = phase_record.apply(r, w.stage, w.attempt, reading, prices)
        if committed is not None and a.committed_step != committed:
            a.committed_step, what = committed, what or "progress"
        return what, None

    service.ledger.update(run_id, change, detail=lambda r: {"stage": w.stage, "attempt": w.attempt})
