"""What one status read of an attempt changes in its run's record: phase, failure, evaluations,
progress, chip-hours, the log cursor and the published commit.

Kept apart from ``control.stage.service.service`` so that the change is one pure function of the record and the reading:
the ledger's compare-and-swap may apply it again on a newer record, and it must give the same
answer each time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rlpipe.core.runs.pricing import cost_estimate
from rlpipe.core.runs.record import Attempt, RunRecord, now
from rlpipe.core.runs.results import merge_results, newer_progress, with_baseline


@dataclass(frozen=True)
class Reading:
    """What ``stage.status`` learned about an attempt from the cluster, its log and the bucket."""

    phase: str
    failure: dict[str, str] | None = None
    progress: dict[str, Any] | None = None  # from the log lines just read
    seen: dict[str, Any] | None = None  # the evaluations in those lines (train_log results)
    final: int | None = None  # the run's final step (train)
    # Chip-hours each of the attempt's pods still there has held, by pod UID (core.chip_hours)
    chips: Mapping[str, float] = field(default_factory=dict)
    # Where the next log read starts: the cursor's JSON (``cluster.log_cursor.LogCursor.to_json``).
    cursor: dict[str, Any] | None = None
    commit: str | None = None  # the Hub commit of a publish that succeeded
    # A workload ended by its own condition: the chip-hours Kueue held for it, a floor of the
    # attempt's figure (core.chip_hours.reserved_by_kueue)
    reserved: float | None = None


def apply(
    r: RunRecord, stage: str, attempt: int, reading: Reading, prices_json: str
) -> tuple[str | None, Attempt | None]:
    """Change ``r`` by ``reading``; → (the event to record or None for no change, the attempt if
    it just ended)."""
    a = r.attempt_record(stage, attempt)
    if a is None:
        return None, None
    if a.phase == "cancelled":  # ended by a cancel (end_record.end): a later read adds, never ends it again
        reading = replace(reading, phase="cancelled", failure=None)
    results = (
        merge_results(r.results, reading.seen, reading.final, resumed=bool(a.resume_step), attempt=attempt)
        if reading.seen is not None
        else r.results
    )
    pods, held = held_by_pods(a, reading.chips, reading.reserved)
    reserved = reading.reserved if reading.reserved is not None else a.reserved_chip_hours
    live = with_baseline(
        newer_progress(r.progress, reading.progress, attempt if stage == "train" else None), results
    )
    moved = reading.cursor if reading.cursor is not None else a.log_cursor
    if a.phase == reading.phase:
        if (
            (live and live != r.progress)
            or results != r.results
            or held != a.chip_hours
            or pods != a.pod_chip_hours
            or reserved != a.reserved_chip_hours
            or moved != a.log_cursor
        ):
            r.progress = live or r.progress
            r.results, a.chip_hours, a.pod_chip_hours, a.log_cursor = results, held, pods, moved
            a.reserved_chip_hours = reserved
            a.cost_estimate = cost_estimate(r.request, held, prices_json)
            return "progress", None
        return None, None
    r.progress = live or r.progress
    a.reserved_chip_hours = reserved
    r.results, a.chip_hours, a.pod_chip_hours, a.phase, a.log_cursor = (
        results,
        held,
        pods,
        reading.phase,
        moved,
    )
    if reading.commit:
        r.lineage.published_commit = reading.commit
    a.cost_estimate = cost_estimate(r.request, held, prices_json)
    if reading.failure:
        a.failure_class, a.reason = reading.failure["tag"], reading.failure["message"]
        a.budget_exhausted = reading.failure.get("exhausted")
        a.failure_rule = reading.failure.get("rule")
    ended = None
    if reading.phase in ("succeeded", "failed", "stopped"):  # stopped: early, by its sweep's rule
        a.finished_at = now()
        ended = a.model_copy()
    return reading.phase, ended


def held_by_pods(
    a: Attempt, read: Mapping[str, float], reserved: float | None = None
) -> tuple[dict[str, float], float | None]:
    """(each pod's chip-hours, the attempt's total) after one more read of the attempt's pods.

    A pod keeps the most it was ever read holding: pods come and go between reads (a JobSet
    restarting in place deletes its workers; a failing one deletes its active Jobs), so a pod gone
    by this read keeps what the last read that saw it counted, and the attempt's total is the sum
    over every pod it ever had, not what the pods still there hold. A record from before pods were
    kept one by one keeps its total as a floor, and so does what Kueue reserved for a finished
    workload (``reserved``): the time its workers held after the last read that saw them."""
    if not read and reserved is None:
        return a.pod_chip_hours, a.chip_hours
    pods = dict(a.pod_chip_hours)
    for uid, hours in read.items():
        pods[uid] = max(pods.get(uid, 0.0), hours)
    return pods, max(a.chip_hours or 0.0, sum(pods.values()), reserved or 0.0)


def record_chips(
    r: RunRecord,
    stage: str,
    attempt: int,
    chips: Mapping[str, float],
    prices_json: str,
    reserved: float | None = None,
) -> str | None:
    """Change ``r`` by a read of the attempt's pods alone (a cancel's last read; ``reserved``: what
    Kueue held for it, when that read found it ended): its chip-hours and their cost, never its
    phase, which the workflow's own reads decide. → the event to record, or None when nothing
    changed."""
    a = r.attempt_record(stage, attempt)
    if a is None:
        return None
    pods, held = held_by_pods(a, chips, reserved)
    reserved = reserved if reserved is not None else a.reserved_chip_hours
    if pods == a.pod_chip_hours and held == a.chip_hours and reserved == a.reserved_chip_hours:
        return None
    a.pod_chip_hours, a.chip_hours, a.reserved_chip_hours = pods, held, reserved
    a.cost_estimate = cost_estimate(r.request, held, prices_json)
    return "chip-hours"
