"""Provisioning modes end to end on the local stack: a Spot reclaim is `preempted` and resumes; a
flex-start request that gets no capacity is `capacity` and the next attempt runs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_e2e import Local, faults, local  # noqa: F401

pytestmark = pytest.mark.slow


def test_a_spot_reclaim_is_preempted_and_resumes_from_the_last_committed_step(
    local: Local, faults: Any
) -> None:
    # Spot's checkpoint period rule: 10% of the 50 steps, so a reclaim at step 33 resumes from 30.
    faults(["train:1:preempt@33:worker:kubelet"], timing="demo")
    run_id = local.submit(local.request(tpu={"provisioning": "spot"}))
    record = local.wait(run_id, expected=30)
    local.assert_consistent(record, "succeeded")
    train = [a for a in record.attempts if a.stage == "train"]
    assert [a.failure_class for a in train] == ["preempted", None]
    # The pod's condition, or the Job's FailJob message naming it, depending on which the classifier
    # read first (the Job controller fails the Job a moment after the pod fails)
    reason = train[0].reason or ""
    assert any(word in reason for word in ("TerminationByKubelet", "node shutdown", "DisruptionTarget")), (
        reason
    )
    assert train[1].resume_step == 30


def test_a_flex_start_request_without_capacity_is_capacity_and_the_next_attempt_runs(
    local: Local, faults: Any
) -> None:
    faults(["train:1:provision-fail"])
    run_id = local.submit(local.request(tpu={"provisioning": "flex-start"}))
    record = local.wait(run_id, expected=30)
    local.assert_consistent(record, "succeeded")
    train = [a for a in record.attempts if a.stage == "train"]
    assert [a.failure_class for a in train] == ["capacity", None]
    assert "DeactivatedDueToAdmissionCheck" in (train[0].reason or "")
    assert record.request["tpu"]["queue"] == "flex-queue"
