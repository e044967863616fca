"""A cancelled run's attempts say they were cancelled: `rlpipe status` showed a cancelled run's
stage as `train running attempts=1`, and the report drew the attempt as running until the retry."""

from __future__ import annotations

from rlpipe.cli.watch import summary
from rlpipe.core.runs import end_record
from rlpipe.core.runs.record import Attempt, RunRecord, Source


def _record(state: str, *phases: tuple[str, str]) -> RunRecord:
    return RunRecord(
        run_id="rcancelled01",
        key="k",
        source=Source(kind="cli"),
        request={},
        state=state,
        attempts=[
            Attempt(
                stage=stage,
                attempt=1,
                workload=f"rcancelled01-{stage}-a1",
                launched_at="2026-12-07T00:00:00.000000Z",
                phase=phase,
            )
            for stage, phase in phases
        ],
    )


def test_cancelling_a_training_run_ends_its_live_attempt_as_cancelled_and_keeps_the_ended_ones() -> None:
    record = _record("training", ("convert", "succeeded"), ("train", "running"))
    _, ended = end_record.end(record, "cancelled", {"tag": "cancelled", "message": "cancelled"}, "user:op")
    assert ended and record.state == "cancelled"
    convert, train = record.attempts
    assert convert.phase == "succeeded", "an attempt that had ended keeps its end"
    assert train.phase == "cancelled" and train.finished_at
    text = summary(record)
    assert "train    cancelled" in text and "train    running" not in text, text


def test_a_run_that_fails_keeps_its_attempts_phases_for_the_status_reads_to_record() -> None:
    record = _record("training", ("train", "running"))
    end_record.end(record, "failed", {"tag": "permanent", "message": "x"}, None)
    assert record.attempts[0].phase == "running"


def test_a_run_that_had_ended_is_not_changed_by_a_cancel() -> None:
    record = _record("succeeded", ("train", "succeeded"))
    assert end_record.end(record, "cancelled", None, "user:op") == (None, False)
    assert record.attempts[0].phase == "succeeded"


def test_a_status_read_after_the_cancel_adds_chip_hours_and_never_ends_the_attempt_again() -> None:
    """A status call in flight when the cancel landed (or an execution whose cancel failed) read
    the deleted Job as failed: the cancelled attempt must stay cancelled."""
    from rlpipe.core.runs import phase_record

    record = _record("training", ("train", "running"))
    end_record.end(record, "cancelled", {"tag": "cancelled", "message": "cancelled"}, "user:op")
    failed = phase_record.Reading(
        "failed", failure={"tag": "permanent", "message": "Job deleted"}, chips={"pod-1": 2.5}
    )
    phase_record.apply(record, "train", 1, failed, "")
    attempt = record.attempts[0]
    assert attempt.phase == "cancelled" and attempt.failure_class is None, attempt
    assert attempt.chip_hours == 2.5, "what its pods held is still counted"
