"""A cancelled attempt is charged the chip-hours its pods held up to their own ends.

A cancel reads the live attempts' pods, deletes the workloads, then reads the pods once more: on
Kubernetes a deleted pod keeps running its SIGTERM handler until its containers exit (or the
kubelet kills them at its ``deletionTimestamp``), and holds its TPU chips all that time.

On the Kubernetes API double with the real client. The test plays the two controllers the double
has not: the kubelet (a listener that reports a pod's containers exited 20 s after its deletion was
asked) and, in one test, the garbage collector (the client's ``sleep``: it deletes the pods a
moment after the workload, as Background propagation does). The control plane's clock is the
client's ``now``: every event is ordered by the test, none by sleeping. Every figure is by hand:
each pod holds 4 chips.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.cluster import ClusterClient
from rlpipe.control.operator_ops import CancelOrder, cancel
from rlpipe.control.stage.service import StageService
from rlpipe.core import chip_hours, identity
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.kube_api.watch import WatchEvent
from tests.conftest import Buckets
from tests.control.stage.test_stage import NS, _convert_done, env, hub, kube  # noqa: F401  (fixtures)
from tests.control.sweep.test_sweep_control import _claimed

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)  # the pods start
T1 = T0 + timedelta(minutes=30)  # the workflow's last status poll
TC = T0 + timedelta(minutes=60)  # the operator's cancel: the read before the delete, the delete
EXIT_AFTER = timedelta(seconds=20)  # the containers' SIGTERM handler, from deletion to exit
JOB_TRACKING = "batch.kubernetes.io/job-tracking"  # the Job controller's finalizer on its pods


class Clock:
    """The control plane's clock (the cluster client's ``now``); ``sleep`` advances it and runs
    ``on_sleep`` (the garbage collector, where a test plays one)."""

    def __init__(self, at: datetime) -> None:
        self.at = at
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[], None] = lambda: None

    def now(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.at += timedelta(seconds=seconds)
        self.on_sleep()


def _rfc3339(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def _worker(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A TPU worker of 4 chips running since T0, held by the Job controller's finalizer."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "finalizers": [JOB_TRACKING]},
        "spec": {
            "nodeName": f"tpu-{name}",
            "containers": [
                {
                    "name": "workload-container",
                    "image": "i",
                    "resources": {"limits": {chip_hours.TPU_RESOURCE: "4"}},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "startTime": _rfc3339(T0),
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "workload-container", "state": {"running": {"startedAt": _rfc3339(T0)}}}
            ],
        },
    }


@pytest.fixture
def training(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[StageService, Clock, str]]:
    """A run whose training JobSet is launched, with a service whose cluster client reads the
    test's clock; the kubelet played: a pod whose deletion is asked exits EXIT_AFTER later. The
    pods left (their finalizer) are removed afterwards."""
    clock = Clock(T0)
    cluster = ClusterClient.from_settings(env["service"].settings, sleep=clock.sleep, now=clock.now)
    # The pods stay (their finalizer) so that their ends can be read: the head's log read after the
    # delete does not wait for them to go here (tests/e2e/test_retry_e2e.py waits for real ones).
    monkeypatch.setattr(cluster, "pods_gone", lambda *args, **kwargs: True)
    service = replace(env["service"], cluster=cluster)
    kube: KubeApiServer = env["kube"]
    run_id = "rchipcancel1"
    env["claim"](run_id)
    service.plan(run_id)
    service.launch(run_id, "convert", 1)
    _convert_done(env, run_id)
    name = service.launch(run_id, "train", 1)["workload"]

    def kubelet(event: WatchEvent) -> None:
        pod = event.object
        meta, status = pod["metadata"], pod.get("status") or {}
        if pod.get("kind") != "Pod" or not meta.get("deletionTimestamp") or status.get("phase") != "Running":
            return
        exited = {"exitCode": 143, "reason": "Error", "startedAt": _rfc3339(T0)}
        exited["finishedAt"] = _rfc3339(clock.now() + EXIT_AFTER)
        kube.patch_status(
            "pods",
            meta["name"],
            {
                "phase": "Failed",
                "containerStatuses": [{"name": "workload-container", "state": {"terminated": exited}}],
            },
            namespace=NS,
        )

    kube.add_listener(kubelet)
    try:
        yield service, clock, name
    finally:
        kube.remove_listener(kubelet)
        for pod in kube.list("pods", namespace=NS, label_selector=f"{identity.LABEL_RUN}={run_id}"):
            kube.modify(
                "pods", pod["metadata"]["name"], lambda p: p["metadata"].pop("finalizers", None), namespace=NS
            )


def _chip_hours(env: dict[str, Any], run_id: str) -> float:
    attempt = env["ledger"].get(run_id).attempt_record("train", 1)
    assert attempt is not None
    return float(attempt.chip_hours or 0.0)


def test_a_cancel_charges_the_pods_up_to_their_own_end_not_to_the_last_poll(
    env: dict[str, Any], training: tuple[StageService, Clock, str]
) -> None:
    """Two workers run from T0; the workflow's poll at T1 records 2 × 4 chips × 0.5 h = 4.0; the
    operator cancels at TC = T0 + 1 h and the workers exit 20 s after their deletion. Charged:
    2 × 4 chips × (3600 s + 20 s) / 3600 = 8.0444…, not the poll's 4.0 nor the 8.0 up to the
    read before the delete."""
    service, clock, name = training
    kube: KubeApiServer = env["kube"]
    jobset = kube.get("jobsets", name, namespace=NS)
    labels = {
        **{k: v for k, v in jobset["metadata"]["labels"].items() if k.startswith("rlpipe.dev/")},
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": jobset["metadata"]["uid"],
    }
    for worker in ("w0", "w1"):
        kube.create("pods", _worker(f"{name}-{worker}", labels), namespace=NS)

    clock.at = T1
    service.status("rchipcancel1", "train", 1)
    assert _chip_hours(env, "rchipcancel1") == pytest.approx(2 * 4 * 0.5)  # the poll's figure

    clock.at = TC
    answer = cancel(service, CancelOrder("rchipcancel1"), caller="operator@example.com")
    assert answer["state"] == "cancelled" and name in answer["deleted"]
    assert _chip_hours(env, "rchipcancel1") == pytest.approx(2 * 4 * 3620 / 3600)
    attempt = env["ledger"].get("rchipcancel1").attempt_record("train", 1)
    assert len(attempt.pod_chip_hours) == 2  # each worker once, at its own end
    assert clock.sleeps == []  # every pod had settled at the first read after the delete


def test_the_read_after_the_delete_waits_for_the_garbage_collector_to_reach_the_pods(
    env: dict[str, Any], training: tuple[StageService, Clock, str]
) -> None:
    """The delete returns before the garbage collector has deleted the pods (Background
    propagation): the first read after it sees them still running. The client waits a moment
    (the played collector deletes them then, at TC + its sleep) and reads again: each worker
    exits 20 s after that. One worker: 4 chips × (3600 s + slept + 20 s) / 3600."""
    service, clock, name = training
    kube: KubeApiServer = env["kube"]
    jobset = kube.get("jobsets", name, namespace=NS)
    # Only the run labels: the double's own garbage collection (at once, with the delete) does not
    # reach this pod, so the test's collector decides when its deletion is asked.
    labels = {k: v for k, v in jobset["metadata"]["labels"].items() if k.startswith("rlpipe.dev/")}
    pod = f"{name}-late"
    kube.create("pods", _worker(pod, labels), namespace=NS)

    def collect() -> None:
        if not kube.get("pods", pod, namespace=NS)["metadata"].get("deletionTimestamp"):
            kube.delete("pods", pod, namespace=NS)

    clock.on_sleep = collect
    clock.at = TC
    cancel(service, CancelOrder("rchipcancel1"), caller="operator@example.com")
    assert len(clock.sleeps) == 1  # one wait, then the pod had settled
    slept = clock.sleeps[0]
    assert _chip_hours(env, "rchipcancel1") == pytest.approx(4 * (3600 + slept + 20) / 3600)


# ---- the figures themselves (pure): a pod's end as Kubernetes reports it --------------------------


def _pod(*, deleting: datetime | None = None, exited: datetime | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running", "startTime": _rfc3339(T0)}
    if exited is not None:  # the containers have exited; the kubelet has not marked the phase yet
        status["containerStatuses"] = [{"state": {"terminated": {"finishedAt": _rfc3339(exited)}}}]
    meta: dict[str, Any] = {"uid": "u1", "name": "w"}
    if deleting is not None:
        meta["deletionTimestamp"] = _rfc3339(deleting)
    return {
        "metadata": meta,
        "spec": {"containers": [{"resources": {"limits": {chip_hours.TPU_RESOURCE: "4"}}}]},
        "status": status,
    }


def test_a_pod_still_terminating_counts_to_its_deadline_at_the_last_read_and_to_now_before() -> None:
    """Deletion asked at TC with a 30 s grace: the API server stamps TC + 30 s. A read of a live
    workload at TC counts 4 × 1 h (a later read sees more); the last read counts to the deadline,
    4 × 3630 / 3600."""
    pod = _pod(deleting=TC + timedelta(seconds=30))
    assert chip_hours.held_by_pod([pod], TC) == {"u1": pytest.approx(4.0)}
    assert chip_hours.held_by_pod([pod], TC, final=True) == {"u1": pytest.approx(4 * 3630 / 3600)}
    assert chip_hours.settled(pod)


def test_a_pod_whose_containers_exited_counts_to_their_exit_whatever_the_read() -> None:
    """Exited at TC + 5 s, deadline TC + 30 s, read at TC + 2 h: 4 × 3605 / 3600, never up to the
    read nor the deadline."""
    pod = _pod(deleting=TC + timedelta(seconds=30), exited=TC + timedelta(seconds=5))
    later = TC + timedelta(hours=2)
    for final in (False, True):
        assert chip_hours.held_by_pod([pod], later, final=final) == {"u1": pytest.approx(4 * 3605 / 3600)}


def test_a_pod_not_reached_by_the_collector_is_not_settled_and_counts_to_now() -> None:
    pod = _pod()
    assert not chip_hours.settled(pod)
    assert chip_hours.held_by_pod([pod], TC, final=True) == {"u1": pytest.approx(4.0)}


# ---- a sweep's cancel: each child it ends is charged the same way ------------------------------


def test_cancelling_a_sweep_charges_a_live_child_up_to_its_pods_own_end(
    env: dict[str, Any], buckets: Buckets, training: tuple[StageService, Clock, str]
) -> None:
    """The parent's cancel ends each child (``end_member``): a child training since T0 on one
    worker, cancelled at TC, its worker exiting 20 s after its deletion: 4 × 3620 / 3600. And the
    child's head is read to its end as a run's cancel reads it: once its pods are gone, its newest
    committed checkpoint is named (none here: 0), so that its retry hint is exact."""
    service, clock, _ = training
    kube: KubeApiServer = env["kube"]
    ledger, parent, children = _claimed(buckets)
    child = children[0].run_id
    service.plan(child)
    service.launch(child, "convert", 1)
    _convert_done(env, child)
    name = service.launch(child, "train", 1)["workload"]
    jobset = kube.get("jobsets", name, namespace=NS)
    labels = {
        **{k: v for k, v in jobset["metadata"]["labels"].items() if k.startswith("rlpipe.dev/")},
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": jobset["metadata"]["uid"],
    }
    kube.create("pods", _worker(f"{name}-w0", labels), namespace=NS)
    try:
        clock.at = TC
        answer = cancel(service, CancelOrder(parent.run_id), caller="operator@example.com")
        assert answer["state"] == "cancelled"
        ended = ledger.get(child)
        assert ended is not None and ended.state == "cancelled"
        assert _chip_hours(env, child) == pytest.approx(4 * 3620 / 3600)
        train = ended.attempt_record("train", 1)
        assert train is not None and train.committed_step == 0  # None: the head was never read to its end
    finally:
        kube.modify("pods", f"{name}-w0", lambda p: p["metadata"].pop("finalizers", None), namespace=NS)


def test_the_read_to_the_heads_end_waits_for_the_pods_to_go_for_as_long_as_it_is_given(
    env: dict[str, Any], training: tuple[StageService, Clock, str]
) -> None:
    """A cancel reads the head's log once its pods are gone, within the stage function's deadline:
    a pod its finalizer keeps is waited for ``within`` seconds, one read a second, and no sleep
    after the last read; once the kubelet removes it the wait ends at the next read."""
    service, clock, name = training
    kube: KubeApiServer = env["kube"]
    jobset = kube.get("jobsets", name, namespace=NS)
    uid = jobset["metadata"]["uid"]
    labels = {
        **{k: v for k, v in jobset["metadata"]["labels"].items() if k.startswith("rlpipe.dev/")},
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": uid,
    }
    kube.create("pods", _worker(f"{name}-w0", labels), namespace=NS)
    where = {"uid": uid, "run_id": "rchipcancel1", "stage": "train", "attempt": 1}
    cluster = service.cluster
    assert ClusterClient.pods_gone(cluster, "JobSet", name, **where, within=3) is False
    assert clock.sleeps == [1.0, 1.0, 1.0]  # four reads, no sleep after the last

    def removed() -> None:  # the kubelet: the container exited and the pod is gone
        kube.modify("pods", f"{name}-w0", lambda p: p["metadata"].pop("finalizers", None), namespace=NS)
        kube.delete("pods", f"{name}-w0", namespace=NS)

    clock.sleeps.clear()
    clock.on_sleep = removed
    assert ClusterClient.pods_gone(cluster, "JobSet", name, **where, within=10) is True
    assert clock.sleeps == [1.0]  # gone at the read after the first wait


@pytest.mark.parametrize(("ran_for", "named"), [(0.0, 0), (60.0, None)])
def test_a_sweeps_cancel_reads_its_children_only_while_its_answer_can_still_come_in_time(
    env: dict[str, Any], training: tuple[StageService, Clock, str], ran_for: float, named: int | None
) -> None:
    """A sweep's cancel ends each live child first, which can take seconds a child; its reads to the
    end stop once the cancel has run CANCEL_SECONDS (45 s), within the function's 60 s. A cancel that
    began 60 s ago reads no child, and the child names no checkpoint (None, not 0)."""
    import time

    from rlpipe.control.stage.cancel_read import read_members_to_end

    service, _, _ = training
    held = service.record_held("rchipcancel1")
    assert "train" in [w.stage for w in held]
    read_members_to_end(service, [("rchipcancel1", held)], started=time.monotonic() - ran_for)
    attempt = env["ledger"].get("rchipcancel1").attempt_record("train", 1)
    assert attempt.committed_step == named


def test_a_sweeps_cancel_ends_every_child_when_deleting_one_childs_workloads_fails(
    env: dict[str, Any],
    buckets: Buckets,
    training: tuple[StageService, Clock, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cluster refuses to delete the first child's workloads: that child is still finished
    cancelled (reconcile deletes what is left, as for a run's own cancel), and so is every other
    child and the parent; the refusal is logged, and the cancel's answer names that child and why,
    so the operator knows what reconcile has left to delete."""
    service, _clock, _ = training
    ledger, parent, children = _claimed(buckets)
    refused = children[0].run_id
    real_delete = service.cluster.delete_run

    def delete_run(run_id: str) -> list[str]:
        if run_id == refused:
            raise RuntimeError("the API server is unreachable")
        return real_delete(run_id)

    monkeypatch.setattr(service.cluster, "delete_run", delete_run)
    answer = cancel(service, CancelOrder(parent.run_id), caller="operator@example.com")
    assert answer["state"] == "cancelled"
    assert [ledger.get(c.run_id).state for c in children] == ["cancelled"] * 4  # type: ignore[union-attr]
    assert answer["cleanup_error"] == f"child {refused}: RuntimeError: the API server is unreachable"
