"""``rlpipe retry`` end to end on the local stack (the real chain of tests/e2e/test_e2e.py): a failed
or cancelled run continues as a new round of the same run, training resumes from its last
committed step, attempt numbers go on, and budgets start afresh."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from rlpipe.cli import runs
from rlpipe.cli.retry_command import NotRetried, Retried, request_retry
from rlpipe.control.lifecycle import retry_rounds
from tests.e2e.test_e2e import FAST_RETRY, Local, faults, local  # noqa: F401
from tests.harness.patience import wait_until

pytestmark = pytest.mark.slow


def _retry(local: Local, run_id: str, **kwargs: Any) -> Retried:
    kwargs.setdefault("reason", "the cause is fixed")
    kwargs.setdefault("by", "alice")
    return request_retry(local.settings, local.ledger, run_id, **kwargs)


def _train(record: Any) -> list[tuple[int, int, str | None, int | None]]:
    return [
        (a.attempt, a.round, a.failure_class, a.resume_step) for a in record.attempts if a.stage == "train"
    ]


def test_a_run_failed_at_train_attempt_3_is_retried_and_resumes_from_its_checkpoint(
    local: Local,
    faults: Any,
) -> None:
    """Round 1: preempted at step 70 three times with a preemption budget of 2, so attempt 3
    fails the run. Round 2: attempt 4 resumes from step 50 and is preempted too (the budget is
    whole again, so it is retried), attempt 5 resumes from step 50 and finishes."""
    faults(
        ["train:1:preempt@70", "train:2:preempt@70", "train:3:preempt@70", "train:4:preempt@90"],
        timing="demo",
    )
    run_id = local.submit(
        local.request(training={"num_batches": 120}, retry={"budgets": {"preempted": 2}, **FAST_RETRY})
    )
    failed = local.wait(run_id, expected=45)
    assert failed.state == "failed", runs.describe(failed)
    assert failed.failure is not None and "preempted budget of 2 exhausted" in failed.failure.message
    assert (failed.failure.stage, failed.failure.attempt) == ("train", 3)
    round_one_execution = failed.execution.name

    done = _retry(local, run_id, reason="spot capacity is back")
    assert (done.outcome, done.round) == ("started", 2)
    record = local.wait(run_id, expected=45)
    local.assert_consistent(record, "succeeded")
    assert _train(record) == [
        (1, 1, "preempted", None),
        (2, 1, "preempted", 50),
        (3, 1, "permanent", 50),
        (4, 2, "preempted", 50),  # attempt numbers go on; resumes from the last committed step
        (5, 2, None, 50),  # retried: round 2's preemption budget was whole
    ]
    assert record.lineage.final_step == 120 and record.progress.get("step") == 120
    assert [(a.stage, a.attempt, a.round) for a in record.attempts if a.stage != "train"] == [
        ("convert", 1, 1),
        ("export", 1, 2),
    ]
    assert record.execution.name != round_one_execution
    assert local.executions_of(run_id) == 2
    info = runs.describe(record)
    assert [r["round"] for r in info["rounds"]] == [1, 2]
    assert (
        info["rounds"][1]["by"] == "alice" and "budget of 2 exhausted" in info["rounds"][1]["previous_ended"]
    )
    assert record.rounds[0].previous_state == "failed"


def test_the_same_retry_sent_twice_after_a_lost_answer_makes_one_round_and_one_execution(
    local: Local,
    faults: Any,
) -> None:
    faults(["train:1:exit:1"])
    run_id = local.submit(local.request())
    assert local.wait(run_id).state == "failed"
    key = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
    first = _retry(local, run_id, key=key)
    # As the CLI does when the first answer was lost: the same call again, straight to stage
    body = retry_rounds.call_body(run_id, reason="the cause is fixed", key=key, by="alice")
    again = runs.call_stage(local.settings, body)
    assert (first.outcome, again["outcome"], first.round, again["round"]) == ("started", "duplicate", 2, 2)
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert record.round == 2 and [r.key for r in record.rounds] == [f"call:{key}"]
    assert [e["event"] for e in local.ledger.history(run_id)].count("retried") == 1
    assert local.executions_of(run_id) == 2, "one execution per round"
    assert _train(record) == [(1, 1, "permanent", None), (2, 2, None, None)]


def test_retry_refuses_a_running_run_continues_a_cancelled_one_and_refuses_a_succeeded_one(
    local: Local,
    faults: Any,
) -> None:
    faults(["train:1:exit:1", "train:2:stall"])
    run_id = local.submit(local.request())
    assert local.wait(run_id).state == "failed"
    assert _retry(local, run_id, from_stage="train").round == 2
    running = local.wait(run_id, until=lambda r: r.state == "training" and r.attempts[-1].phase == "running")
    assert (running.attempts[-1].attempt, running.attempts[-1].round) == (2, 2)
    with pytest.raises(NotRetried, match="still running \\(state training\\); cancel it first"):
        request_retry(local.settings, local.ledger, run_id, reason="again")

    # Cancel stops the current round: its own execution, and its workload.
    result = runs.cancel(local.settings, local.ledger, run_id)
    assert result["execution_cancelled"] is True and f"{run_id}-train-a2" in result["deleted"]
    cancelled = local.wait(run_id)
    local.assert_consistent(cancelled, "cancelled")

    faults([])
    assert _retry(local, run_id, reason="resume after the cancel").round == 3
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert [(a.attempt, a.round) for a in record.attempts if a.stage == "train"] == [(1, 1), (2, 2), (3, 3)]
    assert [(r.from_stage, r.previous_state) for r in record.rounds] == [
        ("train", "failed"),
        (None, "cancelled"),
    ]
    assert local.executions_of(run_id) == 3
    with pytest.raises(NotRetried, match="succeeded; there is nothing to retry"):
        request_retry(local.settings, local.ledger, run_id, reason="more")


def _head_log(local: Local, run_id: str) -> str:
    """The training head's log as its pod wrote it (the stack's pod log files, which the Cloud
    Logging stand-in serves)."""
    files = sorted((local.stack.logs / "pods").glob(f"{run_id}-train-a1-pathways-head-*"))
    return "".join(f.read_text() for f in files)


def _committed_in_bucket(local: Local, run_id: str) -> int | None:
    """The newest checkpoint step with its commit marker, listed from the artifacts bucket."""
    names = [
        b.name for b in local.client.list_blobs(local.settings.artifacts_bucket, prefix=f"runs/{run_id}/")
    ]
    steps = [int(m.group(1)) for n in names if (m := re.search(r"/actor/(\d+)/commit_success\.txt$", n))]
    return max(steps, default=None)


def test_a_cancel_keeps_every_evaluation_the_head_printed_and_the_retry_resumes_where_the_hint_says(
    local: Local, faults: Any
) -> None:
    """A cancel two seconds into a run offered a retry "from step 36", the retry resumed from step
    50, and the evaluations at 40 and 50 that the pod printed before it ended were missing from
    status and the report: the record held what the workflow's last poll had read. Ordered here so
    that nothing polls between what the head prints and the cancel: training is held at step 20
    (once the record has a step of it, its run's execution is cancelled: no poll after that), then
    released to print evaluations up to step 40 or more before `rlpipe cancel` ends it."""
    from rlpipe.cli.watch import next_step
    from rlpipe.control.adapters.orchestrator import Orchestrator
    from rlpipe.core import identity
    from rlpipe.core.runs import recorded

    run_id = identity.run_id_for(identity.key_for_request_id(request_id := f"cancel-{uuid.uuid4().hex[:8]}"))
    faults([{"stage": "train", "attempt": 1, "fault": "hold@20", "run": run_id}], timing="demo")
    assert (
        local.submit(
            local.request(request_id=request_id, training={"num_batches": 200, "checkpoint_period": 15})
        )
        == run_id
    )
    held = local.wait(run_id, expected=30, until=lambda r: ((r.progress or {}).get("step") or 0) >= 10)
    assert held.execution.name
    Orchestrator(local.settings).cancel(held.execution.name)  # no poll reads the head after this
    local.stack.release(run_id)
    evaluated = re.compile(r"Intermediate Eval \(step=(\d+)\)")
    wait_until(
        lambda: max(map(int, evaluated.findall(_head_log(local, run_id))), default=0) >= 40,
        60,
        what="the released head evaluating at step 40",
    )
    assert runs.cancel(local.settings, local.ledger, run_id)["state"] == "cancelled"
    record = local.wait(run_id)

    printed = _head_log(local, run_id)  # final: the cancel returned once its pod was gone
    steps_printed = sorted({int(s) for s in evaluated.findall(printed)})
    last_step = max(int(s) for s in re.findall(r"Train step (\d+) training loss", printed))
    kept = [e.step for e in recorded.results(record.results).intermediate or []]
    assert steps_printed[-1] >= 40 and sorted(kept) == steps_printed, (kept, steps_printed)
    assert record.progress.get("step") == last_step
    train = record.attempt_record("train", 1)
    committed = _committed_in_bucket(local, run_id)
    assert train is not None and committed is not None and committed >= 20
    assert train.committed_step == committed
    hint = next_step(record) or ""
    assert f"resumes from its newest committed checkpoint, step {committed}" in hint, hint

    faults([])
    _retry(local, run_id, reason="resume after the cancel")
    retried = local.wait(run_id, expected=60)
    assert [a.resume_step for a in retried.attempts if a.stage == "train"] == [None, committed]
