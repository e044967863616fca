"""An attempt's chip-hours add up every pod it ever had, not what the pods still there hold.

A JobSet that restarts in place deletes its workers and makes new ones, and a failing JobSet
deletes its active Jobs: a later status read no longer sees those pods. The worked figures below
are by hand: a v6e host holds 4 chips here, and every pod's times are whole minutes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.core import chip_hours
from rlpipe.core.runs import phase_record
from rlpipe.core.runs.record import Attempt, RunRecord, Source

T = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def _at(minutes: float) -> str:
    return (T + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def worker(uid: str, start: float, end: float | None = None) -> dict[str, Any]:
    """A TPU worker pod of 4 chips that started ``start`` minutes after T (and ended at ``end``)."""
    status: dict[str, Any] = {"phase": "Running", "startTime": _at(start)}
    if end is not None:
        status["phase"] = "Failed"
        status["containerStatuses"] = [{"state": {"terminated": {"finishedAt": _at(end)}}}]
    return {
        "metadata": {"uid": uid, "name": f"w-{uid}"},
        "spec": {"containers": [{"resources": {"limits": {chip_hours.TPU_RESOURCE: "4"}}}]},
        "status": status,
    }


def _record() -> RunRecord:
    return RunRecord(
        run_id="rchipreads01",
        key="k",
        source=Source(kind="cli"),
        request={},
        attempts=[Attempt(stage="train", attempt=1, workload="rchipreads01-train-1", launched_at=_at(0))],
    )


def read(record: RunRecord, pods: list[dict[str, Any]], minutes: float) -> float | None:
    held = chip_hours.held_by_pod(pods, T + timedelta(minutes=minutes))
    phase_record.apply(record, "train", 1, phase_record.Reading("running", chips=held), "")
    attempt = record.attempt_record("train", 1)
    assert attempt is not None
    return attempt.chip_hours


def test_a_jobset_restarted_in_place_keeps_the_first_workers_time() -> None:
    """Two workers run 30 min; the JobSet restarts them (deleted, new UIDs) and the new pair runs
    15 min more. 2 × 4 chips × 0.5 h + 2 × 4 chips × 0.25 h = 6 chip-hours."""
    record = _record()
    first = [worker("a", 0), worker("b", 0)]
    assert read(record, first, 30) == pytest.approx(4.0)
    second = [worker("c", 31), worker("d", 31)]  # a and b are gone
    assert read(record, second, 46) == pytest.approx(4.0 + 2.0)


def test_a_read_seeing_fewer_pods_never_lowers_the_total() -> None:
    """A failing JobSet deletes its active Job: only the failed worker is left to read."""
    record = _record()
    assert read(record, [worker("a", 0), worker("b", 0)], 60) == pytest.approx(8.0)
    assert read(record, [worker("a", 0, end=61)], 62) == pytest.approx(4 * 61 / 60 + 4.0)


def test_a_pod_read_twice_is_counted_once_at_its_latest() -> None:
    record = _record()
    read(record, [worker("a", 0)], 30)
    assert read(record, [worker("a", 0)], 90) == pytest.approx(6.0)


def test_a_record_from_before_pods_were_kept_one_by_one_keeps_its_total_as_a_floor() -> None:
    record = _record()
    attempt = record.attempt_record("train", 1)
    assert attempt is not None
    attempt.chip_hours = 10.0  # written as the most any one read saw, with no pods kept
    assert read(record, [worker("z", 0)], 30) == pytest.approx(10.0)
    assert read(record, [worker("z", 0)], 180) == pytest.approx(12.0)


def test_below_an_earlier_records_floor_each_pod_is_still_kept() -> None:
    """Two restarts while the pods' sum is still under the old total: the pods read are kept, so
    the first pair's time counts once the second pair's brings the sum above the floor."""
    record = _record()
    attempt = record.attempt_record("train", 1)
    assert attempt is not None
    attempt.chip_hours = 10.0
    assert read(record, [], 0) == pytest.approx(10.0)  # read running, before any pod started
    assert read(record, [worker("a", 0), worker("b", 0)], 60) == pytest.approx(10.0)  # 8 < 10
    assert read(record, [worker("c", 61), worker("d", 61)], 121) == pytest.approx(16.0)  # 8 + 8


def test_a_read_of_the_pods_alone_never_changes_the_phase() -> None:
    """A cancel's last read (phase_record.record_chips) applied to a record whose attempt the
    workflow's own read has meanwhile ended: the end stands, and only the figure moves."""
    record = _record()
    read(record, [worker("a", 0)], 30)
    phase_record.apply(record, "train", 1, phase_record.Reading("succeeded"), "")
    held = chip_hours.held_by_pod([worker("a", 0)], T + timedelta(minutes=45))
    assert phase_record.record_chips(record, "train", 1, held, "") == "chip-hours"
    attempt = record.attempt_record("train", 1)
    assert attempt is not None and attempt.phase == "succeeded" and attempt.finished_at is not None
    assert attempt.chip_hours == pytest.approx(3.0)
    assert phase_record.record_chips(record, "train", 1, held, "") is None  # again: no change
