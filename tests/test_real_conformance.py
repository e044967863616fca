"""Conformance: the same scenario on the in-process double and on the real control plane.

On the double, the simulator plays the Job controller, Kueue and the pods from a fault string. On
the real plane (tests/harness/real_cluster.py), the real Kueue admits, the real Job controller
makes the pods, the real scheduler binds them to GKE-shaped nodes, and the pod player
(``rlpipe.local.controlplane.kubelet``) writes only what a kubelet would: the containers' states.
The pipeline's classifier (``ClusterClient.status``) reads both, as the pipeline's identity on the
real one. Where the two disagree, the double is wrong.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlpipe.cluster.client import ClusterClient
from rlpipe.core.failures import FailureClass
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from rlpipe.local.simulator.pods import DISRUPTIONS
from tests.conftest import Buckets
from tests.harness.conformance import (
    disrupt_worker_0,
    nodes,  # noqa: F401  (a fixture)
    play,  # noqa: F401  (a fixture)
    real_client,
    settled,
    verdict_on_double,
    verdict_on_real,
)
from tests.harness.patience import wait_until
from tests.test_simulator import NS, create, kube, render, simulate  # noqa: F401

# (scenario, the double's fault for the convert Job, what the real pods' containers do, and the
# verdict DESIGN §6 gives it: both clusters must reach it, not merely agree)
CONVERT_SCENARIOS = [
    ("success", "", Outcome(exit_code=0, seconds=0.5), ("succeeded", None)),
    ("exit-1", "convert:exit:1", Outcome(exit_code=1, seconds=0.5), ("failed", FailureClass.PERMANENT)),
    (
        "oom",
        "convert:oom",
        Outcome(exit_code=137, seconds=0.5, reason="OOMKilled"),
        ("failed", FailureClass.RESOURCES),
    ),
    ("image-pull", "convert:image-pull", Outcome(image_pull=True), ("failed", FailureClass.PERMANENT)),
]


@pytest.mark.parametrize(
    ("scenario", "fault", "outcome", "verdict"), CONVERT_SCENARIOS, ids=[s[0] for s in CONVERT_SCENARIOS]
)
def test_the_convert_job_is_judged_alike_on_both_clusters(
    scenario: str,
    fault: str,
    outcome: Outcome,
    verdict: tuple[str, FailureClass | None],
    real_cluster: ControlPlane,
    play: Callable[[Outcome], PodPlayer],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    on_double = verdict_on_double(
        kube, simulate, render(buckets, "convert", run_id=f"rdbl{scenario[:4]}"), fault
    )
    on_real = verdict_on_real(
        real_cluster, play, render(buckets, "convert", run_id=f"rreal{scenario[:4]}"), outcome
    )
    assert (on_real.phase, on_real.failure_class) == (on_double.phase, on_double.failure_class), (
        f"double: {on_double.reason}\nreal: {on_real.reason}"
    )
    assert (on_real.phase, on_real.failure_class) == verdict, on_real.reason


@pytest.mark.parametrize("reason", ["PreemptionByScheduler", "TerminationByKubelet"])
def test_a_disrupted_tpu_worker_fails_the_train_jobset_as_preempted_on_both_clusters(
    reason: str,
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    from tests.test_simulator import program_args, seed

    how = {"PreemptionByScheduler": "scheduler", "TerminationByKubelet": "kubelet"}[reason]
    double_train = render(buckets, "train", run_id="rdblpreempt", training={"num_batches": 10})
    seed(buckets, program_args(double_train)["load_parameters_path"])
    on_double = verdict_on_double(kube, simulate, double_train, f"train:preempt@3:worker:{how}")

    real_train = render(buckets, "train", run_id=f"rrealp{how[:5]}", training={"num_batches": 10})
    client = real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, disrupt_worker_0(reason)):
        client.apply(real_train)
        try:
            on_real = settled(lambda: client.status(real_train["metadata"]["name"], kind="JobSet"))
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", real_train["metadata"]["name"])
    assert (on_real.phase, on_real.failure_class) == (on_double.phase, on_double.failure_class), (
        f"double: {on_double.reason}\nreal: {on_real.reason}"
    )
    assert on_real.failure_class == FailureClass.PREEMPTED, on_real.reason


def _left_behind(kubectl: Callable[..., str], run_id: str) -> list[str]:
    """Every object of the run still in the namespace: Jobs (a JobSet's children included),
    JobSets, pods and Kueue Workloads, by the run's label or its workloads' owner."""
    names = kubectl(
        "get", "jobsets,jobs,pods", "-n", NS, "-l", f"rlpipe.dev/run={run_id}", "-o", "name"
    ).split()
    workloads = kubectl("get", "workloads.kueue.x-k8s.io", "-n", NS, "-o", "name").split()
    return names + [w for w in workloads if run_id in w]


def test_a_cancelled_run_leaves_nothing_behind_on_both_clusters(
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """`rlpipe cancel` deletes the run's JobSet (Background propagation); garbage collection
    removes its child Jobs, their pods and Kueue's Workload. On the real plane that is the real
    garbage collector, Job controller and Kueue."""
    from tests.test_simulator import program_args, seed

    double_train = render(buckets, "train", run_id="rdblcancel", training={"num_batches": 400})
    seed(buckets, program_args(double_train)["load_parameters_path"])
    simulate()
    create(kube, double_train)
    double = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    wait_until(
        lambda: double.status(double_train["metadata"]["name"], kind="JobSet").phase == "running",
        5,
        what="running",
    )
    assert double.delete_run("rdblcancel") == [double_train["metadata"]["name"]]
    wait_until(lambda: not double.list_run_objects("rdblcancel"), 5, what="the double's objects gone")

    real_train = render(buckets, "train", run_id="rrealcancel", training={"num_batches": 400})
    client = real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None)):
        client.apply(real_train)
        wait_until(
            lambda: client.status(real_train["metadata"]["name"], kind="JobSet").phase == "running",
            10,
            what="running",
        )
        assert client.delete_run("rrealcancel") == [real_train["metadata"]["name"]]
        assert client.delete_run("rrealcancel") == []  # idempotent, as the cancel path relies on
        wait_until(
            lambda: not _left_behind(real_cluster.kubectl, "rrealcancel"), 10, what="everything collected"
        )
    assert client.list_run_objects("rrealcancel") == double.list_run_objects("rdblcancel") == []


# ---- disruptions the real control plane itself writes -------------------------------------------


def _evict(plane: ControlPlane, pod: str) -> None:
    """The Eviction API (what `kubectl drain` and the cluster autoscaler call): the API server
    writes the DisruptionTarget condition itself, then deletes the pod gracefully."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(plane.api_client())
    core.create_namespaced_pod_eviction(
        pod, NS, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NS}}
    )


@contextlib.contextmanager
def _no_execute(plane: ControlPlane, node: str) -> Iterator[None]:
    """A NoExecute taint on the pod's node (a node being repaired or drained by GKE): the real
    taint-eviction controller deletes the pods that do not tolerate it."""
    plane.kubectl("taint", "node", node, "rlpipe.dev/test-repair=true:NoExecute")
    try:
        yield
    finally:
        plane.kubectl("taint", "node", node, "rlpipe.dev/test-repair=true:NoExecute-", check=False)


@pytest.mark.parametrize(
    ("by", "reason"), [("eviction-api", "EvictionByEvictionAPI"), ("taint", "DeletionByTaintManager")]
)
def test_a_disruption_the_real_control_plane_writes_is_preempted_as_the_double_plays_it(
    by: str,
    reason: str,
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """Here the pod player writes no condition: the API server's eviction subresource or the
    controller manager's taint-eviction controller does, and deletes the pod; the container's
    SIGTERM exit and the Job's ``podFailurePolicy`` follow. The double plays the same reason from
    its fault; both must say ``preempted``, and the real pod must carry the reason the double
    writes."""
    on_double = verdict_on_double(
        kube, simulate, render(buckets, "convert", run_id=f"rdbl{by[:6]}"), f"convert:preempt:{by}"
    )

    real = render(buckets, "convert", run_id=f"rreal{by[:6]}")
    name = real["metadata"]["name"]
    client = real_client(real_cluster)
    with PodPlayer(
        real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None, terminating_seconds=1.0)
    ):
        client.apply(real)
        try:

            def running_pod() -> dict[str, Any] | None:
                pods = json.loads(
                    real_cluster.kubectl("get", "pods", "-n", NS, "-l", f"job-name={name}", "-o", "json")
                )["items"]
                return next((p for p in pods if p["status"].get("phase") == "Running"), None)

            pod = wait_until(running_pod, 10, what="the conversion pod running")
            disrupt = (
                _no_execute(real_cluster, pod["spec"]["nodeName"])
                if by == "taint"
                else contextlib.nullcontext(_evict(real_cluster, pod["metadata"]["name"]))
            )
            with disrupt:

                def conditioned() -> dict[str, Any] | None:
                    got = json.loads(
                        real_cluster.kubectl("get", "pods", "-n", NS, "-l", f"job-name={name}", "-o", "json")
                    )["items"]
                    return next(
                        (
                            c
                            for p in got
                            for c in p["status"].get("conditions", [])
                            if c["type"] == "DisruptionTarget"
                        ),
                        None,
                    )

                condition = wait_until(conditioned, 10, what="a DisruptionTarget condition")
                on_real = settled(lambda: client.status(name, kind="Job"))
        finally:
            with contextlib.suppress(Exception):
                client.delete("Job", name)
    assert condition["reason"] == reason, condition
    assert condition["message"] == DISRUPTIONS[reason][0]  # the double words it as the real one
    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason
