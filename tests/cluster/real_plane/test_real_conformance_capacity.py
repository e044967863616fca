"""Conformance: waiting for capacity, Kueue preemption and a Spot reclaim, on the double and the real plane.

The shared shape of every conformance test is in tests/harness/conformance.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import pytest

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.core.failures import FailureClass
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator, Timing
from tests.conftest import Buckets
from tests.harness.conformance import (
    JOBSET_LABEL,
    SPOT_POOL,
    TPU,
    disrupt_worker_0,
    nodes,  # noqa: F401  (a fixture)
    real_client,
    settled,
    verdict_on_double,
)
from tests.harness.patience import wait_until
from tests.harness.real_cluster import PARAMS
from tests.local.test_simulator import NS, create, kube, render, simulate  # noqa: F401

# ---- capacity: unschedulable pods, and a workload Kueue does not admit ------------------------


def _phases(client: ClusterClient, name: str, kind: str, words: str) -> tuple[WorkloadStatus, WorkloadStatus]:
    """The verdict without a queued deadline, once it gives the reason (Kueue's Pending event comes
    a moment after the Workload), then the first verdict other than queued with a deadline of half
    a second."""
    waiting = wait_until(
        lambda: (
            (s := client.status(name, kind=kind)).phase == "queued"
            and "for 0s" not in s.reason
            and words in s.reason
            and s
        ),
        10,
        what=f"{kind} {name} waiting a second, with its reason: {words}",
    )
    # The JobSet controller adds its Suspended condition at its first pass, a moment after creation,
    # and the wait is timed from it once it is there: read until the half-second deadline has passed
    # from that time too, rather than once, which under load can read "queued for 0s".
    late = wait_until(
        lambda: (s := client.status(name, kind=kind, queued_deadline_seconds=0.5)).phase != "queued" and s,
        10,
        what=f"{kind} {name} past a queued deadline of half a second",
        interval=0.25,
    )
    return waiting, late


@contextlib.contextmanager
def _cordoned(plane: ControlPlane, nodes: set[str], pool: str) -> Iterator[None]:
    """The pool's nodes marked unschedulable, as an exhausted or scaled-down pool leaves pods."""
    names = sorted(n for n in nodes if f"-{pool}-" in n)
    for name in names:
        plane.kubectl("cordon", name)
    try:
        yield
    finally:
        for name in names:
            plane.kubectl("uncordon", name)


@contextlib.contextmanager
def _tpu_quota_taken(plane: ControlPlane, priority_class: str | None = None) -> Iterator[None]:
    """Another workload of the queue holds all its TPU quota (PARAMS TPU_CHIPS): a suspended
    Job Kueue admits, whose one pod asks for every chip and never schedules."""
    chips = PARAMS["TPU_CHIPS"]
    labels = {"kueue.x-k8s.io/queue-name": "user-queue"}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    blocker = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "quota-holder",
            "namespace": NS,
            "labels": labels,
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "hold",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {TPU: chips}, "limits": {TPU: chips}},
                        }
                    ],
                }
            },
        },
    }
    plane.apply([blocker])
    try:
        wait_until(
            lambda: (
                "false"
                in plane.kubectl("get", "job", "quota-holder", "-n", NS, "-o", "jsonpath={.spec.suspend}")
            ),
            10,
            what="the quota holder admitted",
        )
        yield
    finally:
        plane.kubectl(  # never masks the test's own failure
            "delete",
            "job",
            "quota-holder",
            "-n",
            NS,
            "--cascade=foreground",
            "--wait=true",
            "--ignore-not-found",
            check=False,
        )


CAPACITY = [
    # (scenario, stage, the double's fault, how the real plane lacks the capacity, the words the
    # waiting verdict must hold on both)
    ("unschedulable", "convert", "convert:unschedulable:100000", "cordon", "waiting for capacity"),
    ("not-admitted", "train", "train:no-quota", "quota", "insufficient unused quota for google.com/tpu"),
]


@pytest.mark.parametrize(
    ("scenario", "stage", "fault", "lack", "words"), CAPACITY, ids=[c[0] for c in CAPACITY]
)
def test_a_workload_waiting_for_capacity_is_queued_then_capacity_after_the_deadline_on_both_clusters(
    scenario: str,
    stage: str,
    fault: str,
    lack: str,
    words: str,
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """Pods the scheduler cannot place, and a workload Kueue cannot admit, wait as ``queued``
    until the queued deadline, then fail as ``capacity`` (docs/design.md#failure-classes-and-retry-budgets): on the double from its
    fault, on the real plane from the real scheduler's and Kueue's own conditions and events."""
    kind = "Job" if stage == "convert" else "JobSet"
    dbl = render(buckets, stage, run_id=f"rdbl{scenario[:8]}")
    simulate(fault, timing=Timing(admission_delay=0.0, schedule_delay=0.0))
    create(kube, dbl)
    double = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    on_double = _phases(double, dbl["metadata"]["name"], kind, words)

    real = render(buckets, stage, run_id=f"rreal{scenario[:8]}")
    client = real_client(real_cluster)
    lacking = _cordoned(real_cluster, nodes, "cpu-np") if lack == "cordon" else _tpu_quota_taken(real_cluster)
    with lacking, PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None)):
        client.apply(real)
        try:
            on_real = _phases(client, real["metadata"]["name"], kind, words)
        finally:
            with contextlib.suppress(Exception):
                client.delete(kind, real["metadata"]["name"])
    for waiting, late in (on_double, on_real):
        assert waiting.phase == "queued" and words in waiting.reason, waiting.reason
        assert (late.phase, late.failure_class) == ("failed", FailureClass.CAPACITY), late.reason
    assert on_double[0].admitted is on_real[0].admitted is (scenario == "unschedulable")
    if scenario == "not-admitted":  # the double's Kueue words it as the real one does, up to the
        # flavors it goes on to list
        assert on_double[0].reason.split("Kueue: ")[1] in on_real[0].reason, on_real[0].reason


# ---- Kueue preemption by a higher priority, and a Spot reclaim ---------------------------------

URGENT = "rlpipe-test-urgent"


@contextlib.contextmanager
def _preemption_within_the_queue(plane: ControlPlane) -> Iterator[None]:
    """The deploy's ClusterQueue never preempts (infra/cluster/k8s/kueue.yaml); an operator who
    shares it with urgent work sets ``withinClusterQueue: LowerPriority``. A Kueue
    WorkloadPriorityClass gives that work its priority (our workloads have none: 0)."""
    plane.apply(
        [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": URGENT},
                "value": 1000,
                "description": "a test's urgent work",
            }
        ]
    )
    patch = '{"spec":{"preemption":{"withinClusterQueue":"%s"}}}'
    jsonpath = "jsonpath={.spec.preemption.withinClusterQueue}"
    before = plane.kubectl("get", "clusterqueue", "rlpipe", "-o", jsonpath) or "Never"
    plane.kubectl("patch", "clusterqueue", "rlpipe", "--type=merge", "-p", patch % "LowerPriority")
    try:
        yield
    finally:  # as the deploy left it, for the other tests on this plane
        plane.kubectl("patch", "clusterqueue", "rlpipe", "--type=merge", "-p", patch % before, check=False)
        plane.kubectl("delete", "workloadpriorityclass", URGENT, "--ignore-not-found", check=False)


def test_kueue_preempting_a_running_jobset_for_higher_priority_work_is_preempted_on_both_clusters(
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """Kueue evicts the running JobSet's Workload (``Preempted``), suspends the JobSet again and
    its controller removes the pods; the classifier reads the eviction from the Workload's events
    and says ``preempted`` (docs/design.md#failure-classes-and-retry-budgets). On the real plane the JobSet, once the urgent work is gone,
    is admitted again, and the classifier then says ``running``: the eviction is history."""
    from tests.local.test_simulator import program_args, seed

    dbl = render(buckets, "train", run_id="rdblkueuepre", training={"num_batches": 10})
    seed(buckets, program_args(dbl)["load_parameters_path"])
    on_double = verdict_on_double(kube, simulate, dbl, "train:evict@3:preempted")

    real = render(buckets, "train", run_id="rrealkueuepre", training={"num_batches": 10})
    name = real["metadata"]["name"]
    client = real_client(real_cluster)
    with (
        _preemption_within_the_queue(real_cluster),
        PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None)),
    ):
        client.apply(real)
        try:
            wait_until(lambda: client.status(name, kind="JobSet").phase == "running", 10, what="running")
            with _tpu_quota_taken(real_cluster, URGENT):
                on_real = settled(lambda: client.status(name, kind="JobSet"))
                jobset = json.loads(real_cluster.kubectl("get", "jobset", name, "-n", NS, "-o", "json"))
                wait_until(
                    lambda: (
                        not real_cluster.kubectl(
                            "get", "pods", "-n", NS, "-l", f"{JOBSET_LABEL}={name}", "-o", "name"
                        )
                    ),
                    10,
                    what="the preempted JobSet's pods gone",
                )
            again = wait_until(
                lambda: (s := client.status(name, kind="JobSet")).phase == "running" and s,
                15,
                what="admitted again once the urgent work is gone",
            )
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", name)
    assert jobset["spec"]["suspend"] is True  # suspended again, not failed
    assert not any(
        c["type"] == "Failed" and c["status"] == "True" for c in jobset["status"].get("conditions", [])
    )
    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason
        assert "Preempted to accommodate a workload" in verdict.reason, verdict.reason
    assert again.admitted and not again.failure_class, again.reason


def test_a_spot_reclaim_runs_on_spot_nodes_and_is_preempted_on_both_clusters(
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """A Spot run is admitted to the Spot flavor and its workers land on the Spot pool only; GCE
    reclaims a Spot VM with a shutdown the kubelet turns into ``TerminationByKubelet`` on the
    node's pods (failed, not deleted), the worker's Job fails by its ``podFailurePolicy`` and the
    JobSet with it: ``preempted``."""
    from tests.local.test_simulator import program_args, seed

    spot = {"tpu": {"provisioning": "spot"}, "training": {"num_batches": 10}}
    dbl = render(buckets, "train", run_id="rdblspot", **spot)
    seed(buckets, program_args(dbl)["load_parameters_path"])
    on_double = verdict_on_double(kube, simulate, dbl, "train:preempt@3:worker:kubelet")

    real = render(buckets, "train", run_id="rrealspot", **spot)
    name = real["metadata"]["name"]
    client = real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, disrupt_worker_0("TerminationByKubelet")):
        client.apply(real)
        try:
            on_real = settled(lambda: client.status(name, kind="JobSet"))
            pods = json.loads(
                real_cluster.kubectl("get", "pods", "-n", NS, "-l", f"{JOBSET_LABEL}={name}", "-o", "json")
            )["items"]
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", name)
    workers = [
        p for p in pods if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
    ]
    # Every worker that was scheduled landed on the Spot pool. A worker may still be unscheduled
    # when the JobSet has already failed (the scheduler had not bound it yet, on a loaded
    # machine): it landed nowhere, so it says nothing about where workers land.
    landed = [p["spec"]["nodeName"] for p in workers if p["spec"].get("nodeName")]
    assert landed and all(f"-{SPOT_POOL}-" in node for node in landed), [
        p["spec"].get("nodeName") for p in workers
    ]
    reclaimed = [p for p in workers if p["status"].get("reason") == "Terminated"]
    assert reclaimed and reclaimed[0]["status"]["phase"] == "Failed"  # failed in place, not deleted
    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason
