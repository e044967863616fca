"""What a status read of a train attempt learns from its head: the log lines since the last read,
and, once the head exited 0, whether that was the end of a training (the train done rule).

Kept apart from ``stage`` because train is the one stage whose status needs more than the cluster's
verdict and the bucket: its head's log, read through a cursor kept in the attempt's record (so
every evaluation is seen once, however fast the log scrolls between two polls:
cluster/log_cursor.py), and a verdict that joins the newest committed step, the last step that log
reported and its end line. A clean end is recorded with the phase (:func:`record_train_end`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from rlpipe.cluster.log_cursor import LogCursor
from rlpipe.control.adapters import blobstore
from rlpipe.core import layout, steps, train_log, train_verdict
from rlpipe.core.request import Request
from rlpipe.core.runs.record import RunRecord

LogReader = Callable[[str, LogCursor | None], tuple[list[str], LogCursor | None]]


class HeadLog(Protocol):
    """What reading the head's log needs of ``rlpipe.cluster.ClusterClient``."""

    def read_log(self, jobset: str, cursor: LogCursor | None) -> tuple[list[str], LogCursor | None, bool]: ...


def read_train_log(
    cluster: HeadLog, cloud_logs: LogReader | None, record: RunRecord, name: str, attempt: int
) -> tuple[dict[str, Any], dict[str, Any], LogCursor | None, bool]:
    """The head's log lines not read before (every evaluation is seen once, however fast the
    log scrolls between two polls: cluster/log_cursor.py), as (progress, evaluations, the
    cursor after them, whether the log was found). ``progress`` carries this attempt's end
    evidence folded over every read so far (``train_log.fold_attempt``)."""
    known = record.attempt_record("train", attempt)
    lines, cursor, found = cluster.read_log(name, LogCursor.from_json(known.log_cursor if known else None))
    if not found and cloud_logs is not None:  # the pod is gone: its lines are still logged
        lines, cursor = cloud_logs(name, cursor)
        found = True
    parsed = train_log.parse("\n".join(lines))
    evidence = train_log.fold_attempt(record.progress.get(train_log.ATTEMPT_LOG), attempt, parsed)
    progress = {**(parsed.progress() or {}), train_log.ATTEMPT_LOG: evidence}
    return progress, parsed.results(), cursor, found


def train_end(
    artifacts: blobstore.BlobStore,
    record: RunRecord,
    req: Request,
    attempt: int,
    progress: dict[str, Any],
    *,
    log_read: bool,
    scope: str = "",
) -> train_verdict.TrainOutcome:
    """The train done rule (``train_verdict.train_outcome``) for a head that exited 0: the newest
    committed step against the last step this attempt's log reported, and its end line."""
    evidence = progress.get(train_log.ATTEMPT_LOG) or {}
    run = layout.RunLayout(artifacts.bucket_name, record.run_id, scope=scope)  # the team's (RunLayout)
    committed = layout.latest_committed_step(artifacts.list(run.checkpoints), run)
    known = record.attempt_record("train", attempt)
    restored = evidence.get("restored_step")
    outcome = train_verdict.train_outcome(
        "succeeded",
        committed,
        steps.training_steps(req),
        reported=train_log.reported_step(evidence),
        end_line=bool(evidence.get("end_line")),
        resumed_from=restored if restored is not None else (known.resume_step if known else None),
    )
    if outcome.verdict == train_verdict.TrainVerdict.NO_END_LINE and not log_read:
        outcome = replace(
            outcome, reason=f"{outcome.reason} (the head's log could not be read: its pod is gone)"
        )
    return outcome
