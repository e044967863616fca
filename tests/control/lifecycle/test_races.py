"""Races of the control plane, each played in both orders with the interleave barriers.

A caller is parked at a named point (``rlpipe.control.adapters.interleave``) between two of its side
effects while the competing call runs to the end; then it is released. Everything runs on real
servers: fake-gcs-server behind the strict GCS proxy, the Kubernetes API double with the real
client, the Executions servicer with the real ExecutionsClient.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc
import pytest
import yaml

from rlpipe.control.adapters import interleave
from rlpipe.control.adapters.events import ObjectEvent
from rlpipe.control.lifecycle.intake import MAX_START_ATTEMPTS, Intake
from rlpipe.core.failures import PermanentFailure, TransientFailure
from rlpipe.core.runs.ownership import NotOwner, SupersededAttempt
from tests.conftest import Buckets, minimal_request, real_intake
from tests.control.stage.test_stage import NS, env, hub, kube  # noqa: F401  (fixtures shared with test_stage)


class Parked:
    """Run ``call`` in a thread that stops at ``point`` until ``release``; collects its outcome."""

    def __init__(self, point: str, call: Callable[[], Any]) -> None:
        self.barrier = interleave.Barrier()
        self.point = point
        self.result: Any = None
        self.error: BaseException | None = None
        self._call = call
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Parked:
        self._hook = interleave.hooked(self.point, self.barrier)
        self._hook.__enter__()
        self._thread.start()
        self.barrier.wait_reached()
        return self

    def release(self) -> None:
        self.barrier.release()
        self._thread.join(30)
        self._hook.__exit__(None, None, None)

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self.release()


def _jobs(env: dict[str, Any]) -> list[str]:
    kube = env["kube"]
    return sorted(
        o["metadata"]["name"] for o in kube.list("jobs", namespace=NS) + kube.list("jobsets", namespace=NS)
    )


def _unowned(env: dict[str, Any], run_id: str) -> None:
    env["claim"](run_id)
    env["ledger"].edit(run_id, lambda r: setattr(r.execution, "name", None) or "unrecorded")


# ---- 2. one owner per run -------------------------------------------------------------------------


@pytest.mark.parametrize("first", ["exec-a", "exec-b"])
def test_two_executions_planning_one_run_give_exactly_one_owner(env: dict[str, Any], first: str) -> None:
    svc, run_id = env["service"], f"rplanrace{first[-1]}01"
    _unowned(env, run_id)
    second = "exec-b" if first == "exec-a" else "exec-a"
    # `second` read the unowned record and is parked before its compare-and-swap; `first` plans.
    with Parked("ledger.update:read", lambda: svc.plan(run_id, second)) as parked:
        won = svc.plan(run_id, first)
        parked.release()
    assert parked.error is None
    assert won["skip"] is False
    assert parked.result["skip"] is True and first in parked.result["skip_reason"]
    assert env["ledger"].get(run_id).execution.name.endswith(f"/executions/{first}")


def test_a_lagging_execution_cannot_poll_finish_or_clean_up_the_live_attempt(env: dict[str, Any]) -> None:
    svc, run_id = env["service"], "rlagging0001"
    env["claim"](run_id)  # owned by "rlagging0001-exec"
    owner = f"{run_id}-exec"
    svc.plan(run_id, owner)
    svc.launch(run_id, "convert", 1, execution_id=owner)
    for call in (
        lambda: svc.status(run_id, "convert", 1, "old-exec"),
        lambda: svc.launch(run_id, "convert", 1, execution_id="old-exec"),
        lambda: svc.finish(run_id, "failed", {"tag": "permanent", "message": "not found"}, "old-exec"),
        lambda: svc.cleanup(run_id, "old-exec"),
    ):
        with pytest.raises(NotOwner):
            call()
    assert _jobs(env) == [f"{run_id}-convert-a1"]
    assert env["ledger"].get(run_id).state == "converting"


# ---- 4. cancel during a launch ------------------------------------------------------------------


@pytest.mark.parametrize("order", ["cancel-while-applying", "cancel-after-launch"])
def test_cancel_during_a_launch_leaves_no_workload(env: dict[str, Any], order: str) -> None:
    svc, run_id = env["service"], f"rcancel{order[7]}0001"
    env["claim"](run_id)
    owner = f"{run_id}-exec"
    svc.plan(run_id, owner)

    def cancel() -> None:  # what `rlpipe cancel` asks of `stage`, as an operator
        svc.cleanup(run_id)
        svc.finish(run_id, "cancelled", {"tag": "cancelled", "message": "by the test"})

    if order == "cancel-while-applying":
        with Parked("stage.launch:applied", lambda: svc.launch(run_id, "train", 1, execution_id=owner)) as p:
            assert _jobs(env) == [f"{run_id}-train-a1"]  # applied, not yet recorded
            cancel()
            p.release()
        assert isinstance(p.error, PermanentFailure) and "cancelled" in p.error.reason
    else:
        svc.launch(run_id, "train", 1, execution_id=owner)
        cancel()
    assert _jobs(env) == []
    assert env["ledger"].get(run_id).state == "cancelled"


# ---- 5. a late launch of an older attempt --------------------------------------------------------


@pytest.mark.parametrize("order", ["old-arrives-after", "old-applied-before-new-recorded"])
def test_a_late_launch_of_an_older_attempt_never_comes_back(env: dict[str, Any], order: str) -> None:
    svc, run_id = env["service"], f"rlate{order[4]}000001"
    env["claim"](run_id)
    owner = f"{run_id}-exec"
    svc.plan(run_id, owner)
    if order == "old-arrives-after":
        svc.launch(run_id, "convert", 2, execution_id=owner)
        with pytest.raises(SupersededAttempt):
            svc.launch(run_id, "convert", 1, execution_id=owner)  # refused before apply
    else:
        with Parked(
            "stage.launch:applied", lambda: svc.launch(run_id, "convert", 1, execution_id=owner)
        ) as p:
            svc.launch(run_id, "convert", 2, execution_id=owner)
            p.release()
        assert isinstance(p.error, SupersededAttempt)
    record = env["ledger"].get(run_id)
    assert record.attempt == 2 and [a.attempt for a in record.attempts] == [2]
    assert _jobs(env) == [f"{run_id}-convert-a2"]


@pytest.mark.parametrize("order", ["old-whole-while-new-parked", "old-recorded-after-new"])
def test_a_zombie_launch_of_attempt_1_during_launch_2_leaves_only_attempt_2(
    env: dict[str, Any], order: str
) -> None:
    """Attempt 1 was launched; launch 2 deletes it, applies attempt 2 and records it. A late
    retry of launch 1 that applies in between recreated attempt 1's workload, which then ran
    beside attempt 2 until a reconcile pass."""
    svc, run_id = env["service"], f"rzomb{order[4]}000001"
    env["claim"](run_id)
    owner = f"{run_id}-exec"
    svc.plan(run_id, owner)
    svc.launch(run_id, "convert", 1, execution_id=owner)
    if order == "old-whole-while-new-parked":
        with Parked(
            "stage.launch:applied", lambda: svc.launch(run_id, "convert", 2, execution_id=owner)
        ) as p:
            svc.launch(run_id, "convert", 1, execution_id=owner)  # the zombie: applied and recorded
            assert _jobs(env) == [f"{run_id}-convert-a1", f"{run_id}-convert-a2"]
            p.release()
        assert p.error is None
    else:
        with Parked(
            "stage.launch:applied", lambda: svc.launch(run_id, "convert", 2, execution_id=owner)
        ) as new:
            with Parked(
                "stage.launch:applied", lambda: svc.launch(run_id, "convert", 1, execution_id=owner)
            ) as old:
                new.release()
            old.release()
        assert new.error is None and isinstance(old.error, SupersededAttempt)
    assert _jobs(env) == [f"{run_id}-convert-a2"]
    record = env["ledger"].get(run_id)
    assert record.attempt == 2 and {a.attempt: a.phase for a in record.attempts}[1] == "superseded"


# ---- intake: lost executions, lease takeover, starts that cannot succeed ---------------------------


REQUEST = yaml.safe_dump(minimal_request()).encode()


def _intake(buckets: Buckets, executions: Any, clock: list[float], **kwargs: Any) -> Intake:
    return real_intake(buckets, executions, clock=lambda: clock[0], lease_seconds=30, **kwargs)


def _event(buckets: Buckets, name: str) -> ObjectEvent:
    blob = buckets.client.bucket(buckets.requests).blob(name)
    blob.upload_from_string(REQUEST)
    return ObjectEvent(buckets.requests, name, str(blob.generation), len(REQUEST), "e1")


def test_lease_takeover_while_the_first_holder_is_still_alive_leaves_one_execution(
    buckets: Buckets, executions: Any
) -> None:
    clock = [1000.0]
    event = _event(buckets, "requests/takeover.yaml")
    slow = _intake(buckets, executions, clock)
    with Parked("intake.start:leased", lambda: slow.from_object(event)) as first:
        clock[0] += 31  # the first holder's lease lapses while it is parked, alive
        second = _intake(buckets, executions, clock).from_object(event)
        assert second.outcome == "started"
        first.release()
    assert first.error is None and first.result.outcome == "duplicate"
    assert first.result.execution == second.execution
    names = [c[1].name for c in executions.calls if c[0] == "cancel"]
    assert len(executions.creates()) == 2 and len(names) == 1 and names[0] != second.execution
    assert buckets.ledger().get(second.run_id).execution.name == second.execution


def test_an_execution_started_but_never_recorded_is_adopted_by_its_plan(
    buckets: Buckets, executions: Any, env: dict[str, Any]
) -> None:
    class Crash(Exception):
        pass

    def crash() -> None:
        raise Crash

    clock = [1000.0]
    event = _event(buckets, "requests/lost.yaml")
    with interleave.hooked("intake.start:started", crash), pytest.raises(Crash):
        _intake(buckets, executions, clock).from_object(event)
    assert len(executions.creates()) == 1
    ledger = env["ledger"]
    [run_id] = ledger.list_run_ids()
    assert ledger.get(run_id).execution.name is None  # the crash lost the name
    execution_id = "exec-1"
    plan = env["service"].plan(run_id, execution_id)
    assert plan["skip"] is False
    assert ledger.get(run_id).execution.name.endswith(f"/executions/{execution_id}")
    clock[0] += 31  # a redelivery after the lease: the run has its execution, nothing more starts
    assert _intake(buckets, executions, clock).from_object(event).outcome == "duplicate"
    assert len(executions.creates()) == 1


def test_a_start_that_workflows_refuses_ends_the_run_and_is_acknowledged(
    buckets: Buckets, executions: Any
) -> None:
    notified: list[Any] = []
    executions.fail_next.append(grpc.StatusCode.PERMISSION_DENIED)
    clock = [0.0]
    result = _intake(buckets, executions, clock, notify=notified.append).from_object(
        _event(buckets, "requests/refused.yaml")
    )
    assert result.outcome == "start-failed" and "could not be started" in result.detail
    record = buckets.ledger().get(result.run_id)
    assert record.state == "failed" and record.failure.stage == "start"
    assert [r.run_id for r in notified] == [result.run_id]


def test_transient_start_failures_are_capped(buckets: Buckets, executions: Any) -> None:
    clock = [0.0]
    event = _event(buckets, "requests/flaky.yaml")
    executions.fail_next.extend([grpc.StatusCode.UNAVAILABLE] * (MAX_START_ATTEMPTS + 2))
    for _ in range(MAX_START_ATTEMPTS):
        with pytest.raises(TransientFailure):
            _intake(buckets, executions, clock).from_object(event)
        clock[0] += 31
    result = _intake(buckets, executions, clock).from_object(event)
    assert result.outcome == "start-failed" and f"{MAX_START_ATTEMPTS} tries" in result.detail
    assert buckets.ledger().get(result.run_id).state == "failed"
