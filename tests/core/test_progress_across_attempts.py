"""A run's live progress belongs to one training attempt: a resumed attempt never shows its
predecessor's step as its own (the preempt demo showed attempt 2 at 68, attempt 1's last step,
then at 67, its own), and the live view says so until the new attempt prints a step."""

from __future__ import annotations

from rlpipe.cli.watch import render_view
from rlpipe.core.runs import phase_record
from rlpipe.core.runs.record import Attempt, RunRecord, Source


def _training(*attempts: Attempt) -> RunRecord:
    return RunRecord(
        run_id="rprogress001",
        key="k",
        source=Source(kind="cli"),
        request={},
        state="training",
        attempts=list(attempts),
    )


def _attempt(number: int, resume_step: int | None = None) -> Attempt:
    return Attempt(
        stage="train",
        attempt=number,
        workload=f"rprogress001-train-a{number}",
        launched_at="2026-12-07T00:00:00.000000Z",
        phase="running",
        resume_step=resume_step,
    )


def _read(record: RunRecord, attempt: int, progress: dict[str, object] | None) -> None:
    phase_record.apply(record, "train", attempt, phase_record.Reading("running", progress=progress), "")


def _view(record: RunRecord) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_view(record))
    return console.export_text()


def test_a_resumed_attempt_starts_its_own_progress_and_the_view_waits_for_its_first_step() -> None:
    record = _training(_attempt(1))
    _read(record, 1, {"step": 68})
    assert record.progress is not None and (record.progress["step"], record.progress["attempt"]) == (68, 1)
    record.attempts.append(_attempt(2, resume_step=60))
    assert "attempt 2: no step of its own yet, resuming from step 60" in _view(record)
    assert "step 68" not in _view(record)
    _read(record, 2, {"eval_mean_reward": 0.61, "eval_step": 60})  # a read with no step of its own
    assert "step" not in record.progress, "attempt 1's step 68 is not carried into attempt 2"
    assert "no training step yet" in _view(record) and "step None" not in _view(record)
    _read(record, 2, {"step": 61})
    assert (record.progress["step"], record.progress["attempt"]) == (61, 2)
    assert "step 61" in _view(record)


def test_a_read_without_a_step_keeps_the_same_attempts_step() -> None:
    record = _training(_attempt(1))
    _read(record, 1, {"step": 30})
    _read(record, 1, {"eval_mean_reward": 0.5, "eval_step": 30})
    assert record.progress is not None and record.progress["step"] == 30


def test_a_retry_hint_after_a_resumed_attempt_with_no_step_yet_names_the_step_it_resumed_from() -> None:
    """Progress starts afresh with each attempt: a resumed attempt that failed before printing a
    step must not make the hint say that no training had started."""
    from rlpipe.cli.watch import next_step, trained_steps
    from rlpipe.core.runs.record import Failure

    record = _training(_attempt(1), _attempt(2, resume_step=60))
    _read(record, 1, {"step": 68})
    _read(record, 2, {"eval_mean_reward": 0.6, "eval_step": 60})  # attempt 2: no step of its own
    assert trained_steps(record) == 60
    record.state = "failed"
    record.failure = Failure(tag="transient", message="preempted", stage="train", attempt=2)
    hint = next_step(record) or ""
    assert "it had reached step 60" in hint and "starts from the beginning" not in hint, hint
