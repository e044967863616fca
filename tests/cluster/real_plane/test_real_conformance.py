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
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlpipe.cluster.client import ClusterClient
from rlpipe.core.failures import FailureClass
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator, Timing
from rlpipe.local.simulator.pods import DISRUPTIONS
from tests.conftest import Buckets
from tests.control.stage.test_stage import env, hub  # noqa: F401  (fixtures: the stage function, the Hub double)
from tests.harness.conformance import (
    JOBSET_LABEL,
    disrupt_worker_0,
    nodes,  # noqa: F401  (a fixture)
    play,  # noqa: F401  (a fixture)
    real_client,
    settled,
    verdict_on_double,
    verdict_on_real,
)
from tests.harness.patience import ceiling, wait_until
from tests.local.test_simulator import NS, create, kube, render, simulate  # noqa: F401

# (scenario, the double's fault for the convert Job, what the real pods' containers do, and the
# verdict docs/design.md#failure-classes-and-retry-budgets gives it: both clusters must reach it, not merely agree)
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
    from tests.local.test_simulator import program_args, seed

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
    from tests.local.test_simulator import program_args, seed

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
    finally:  # a taint left behind would keep the next tests' pods off this node: fail here instead
        plane.kubectl("taint", "node", node, "rlpipe.dev/test-repair=true:NoExecute-")


def _first_disruption(plane: ControlPlane, job: str, since: str) -> dict[str, Any]:
    """The first DisruptionTarget condition on the Job's pods, from a watch that starts at the
    listing which found the pod running. Watched, not polled: the pod carries the condition only
    while it terminates (a second here, then the player removes it), and a poll slowed by load
    missed that window."""
    from kubernetes import client as k8s
    from kubernetes import watch

    core = k8s.CoreV1Api(plane.api_client())
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        NS,
        label_selector=f"job-name={job}",
        resource_version=since,
        timeout_seconds=int(ceiling(10)),
    )
    for event in stream:
        for condition in event["raw_object"].get("status", {}).get("conditions", []):
            if condition["type"] == "DisruptionTarget":
                return dict(condition)
    raise AssertionError(f"no DisruptionTarget condition on the pods of {job} within {ceiling(10):.0f}s")


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

            def running_pod() -> tuple[dict[str, Any], str] | None:
                listed = json.loads(
                    real_cluster.kubectl("get", "pods", "-n", NS, "-l", f"job-name={name}", "-o", "json")
                )
                running = [p for p in listed["items"] if p["status"].get("phase") == "Running"]
                return (running[0], listed["metadata"]["resourceVersion"]) if running else None

            pod, seen = wait_until(running_pod, 10, what="the conversion pod running")
            disrupt = (
                _no_execute(real_cluster, pod["spec"]["nodeName"])
                if by == "taint"
                else contextlib.nullcontext(_evict(real_cluster, pod["metadata"]["name"]))
            )
            with disrupt:
                condition = _first_disruption(real_cluster, name, seen)
                on_real = settled(lambda: client.status(name, kind="Job"))
        finally:
            with contextlib.suppress(Exception):
                client.delete("Job", name)
    assert condition["reason"] == reason, condition
    assert condition["message"] == DISRUPTIONS[reason][0]  # the double words it as the real one
    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason


# ---- every evaluation a preempted head printed is recorded --------------------------------------


@dataclasses.dataclass(frozen=True)
class _HeldBeforeStep(Timing):
    """The played pace, except that the ``step``-th training step this timing paces waits for
    ``go`` before it starts (the played train_rl asks for each step's duration as it starts it; a
    head resumed from step N would count from N + 1): a test orders its events around a running
    head instead of racing its end."""

    step: int = 0
    go: threading.Event = dataclasses.field(default_factory=threading.Event)
    started: list[int] = dataclasses.field(default_factory=list)

    def duration(self, name: str) -> float:
        if name == "step":
            self.started.append(len(self.started) + 1)
            if len(self.started) == self.step:
                self.go.wait(ceiling(60))
        return super().duration(name)


def test_a_preempted_heads_evaluations_are_all_recorded_on_the_real_plane(
    real_cluster: ControlPlane,
    nodes: set[str],
    env: dict[str, Any],
    hub: Any,
    buckets: Buckets,
    tmp_path: Any,
) -> None:
    """The double's reproduction (tests/local/test_preempted_evaluations.py) on the real controllers: the
    stage reads the played train_rl's log through the real API server (the kubelet's log endpoint)
    while it runs, a TPU worker is evicted after the step-20 evaluation, the real Job, JobSet and
    garbage collector delete the head with its Job, and the last status read finds no pod: the
    lines printed since the first read come from the local Cloud Logging, over the played
    containers' log files. Every evaluation the head printed must be in the ledger."""
    from kubernetes import client as k8s

    from rlpipe.control.adapters import cloud_logs
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.core import train_log
    from rlpipe.local.cloud_logging import CloudLogging, Resource
    from rlpipe.local.controlplane.log_endpoint import LogEndpoint, node_endpoint
    from rlpipe.local.controlplane.programs import PodLogs, ProgramScript, SecretReader, Services
    from rlpipe.local.pod_logs import ContainerLogFolder
    from rlpipe.local.simulator.gcs_io import GcsIO
    from tests.control.stage.test_stage import _convert_done
    from tests.harness.staged_data import seed_training_data
    from tests.local.test_simulator import _seed_pinned

    logs_dir = tmp_path / "pods"
    played_logs = PodLogs(logs_dir)  # what the played containers print, as the node keeps it
    assert real_cluster.ca is not None
    certificate = real_cluster.ca.issue("kubelet", "kubelet", server=True, hosts=("127.0.0.1", "localhost"))
    endpoint = LogEndpoint(played_logs, certificate).start()
    core = k8s.CoreV1Api(real_cluster.api_client())
    for name in sorted(nodes):
        core.patch_node_status(name, node_endpoint(endpoint.port))
    api = CloudLogging(ContainerLogFolder(logs_dir), Resource("p")).start()

    run_id = "rrealevals01"
    service = env["service"]
    service.cluster = real_client(real_cluster)  # the pipeline's identity on the real plane
    service.cloud_logs = cloud_logs.head_reader(Settings(project="p", namespace=NS, logging_endpoint=api.url))
    env["claim"](run_id, training={"num_batches": 60})
    service.plan(run_id, f"{run_id}-exec")
    service.launch(run_id, "convert", 1, None, f"{run_id}-exec")
    _convert_done(env, run_id)
    jobset = f"{run_id}-train-a1"
    services = Services(GcsIO(buckets.client), played_logs, hub.url, SecretReader(core))
    # 0.3 s a step, and held before step 22 (after the step-20 evaluation) until the worker is
    # evicted: the head is still training when the eviction lands, however slow the machine.
    timing = _HeldBeforeStep(scale=0.01, step=22)
    script = ProgramScript(services, timing)
    head_log = logs_dir.glob(f"{jobset}-pathways-head-*_{NS}_workload-container.log")

    def printed(marker: str) -> bool:
        return any(
            marker in path.read_text() for path in logs_dir.glob(f"{jobset}-pathways-head-*_{NS}_*.log")
        )

    try:
        service.launch(run_id, "train", 1, None, f"{run_id}-exec")
        obj = json.loads(real_cluster.kubectl("get", "jobset", jobset, "-n", NS, "-o", "json"))
        _seed_pinned(buckets, obj)
        seed_training_data(buckets.client, obj)
        # No container runs before the player starts: the head checks data that is already seeded
        # (with the player started first, a head under load checked before the seeding, and failed).
        # The hold ends before the player stops (exits run last to first), the test failing or not.
        with PodPlayer(real_cluster.kubeconfig(), nodes, script), contextlib.ExitStack() as ending:
            ending.callback(timing.go.set)
            wait_until(lambda: printed("Intermediate Eval (step=10)"), 30, what="the step-10 evaluation")
            assert service.status(run_id, "train", 1, f"{run_id}-exec")["phase"] == "running"
            wait_until(lambda: printed("Intermediate Eval (step=20)"), 30, what="the step-20 evaluation")
            worker = json.loads(
                real_cluster.kubectl(
                    "get",
                    "pods",
                    "-n",
                    NS,
                    "-l",
                    f"{JOBSET_LABEL}={jobset},jobset.sigs.k8s.io/replicatedjob-name=worker,"
                    "batch.kubernetes.io/job-completion-index=0",
                    "-o",
                    "json",
                )
            )["items"][0]
            _evict(real_cluster, worker["metadata"]["name"])

            def head_gone() -> bool:
                heads = real_cluster.kubectl(
                    "get",
                    "pods",
                    "-n",
                    NS,
                    "-l",
                    f"{JOBSET_LABEL}={jobset},jobset.sigs.k8s.io/replicatedjob-name=pathways-head",
                    "-o",
                    "name",
                )
                return not heads.split() and service.cluster.status(jobset, kind="JobSet").phase == "failed"

            wait_until(head_gone, 30, what="the JobSet failed and its head's pod deleted")
            last = service.status(run_id, "train", 1, f"{run_id}-exec")
    finally:
        api.stop()
        endpoint.stop()
        with contextlib.suppress(Exception):
            service.cluster.delete("JobSet", jobset)
    assert last["phase"] == "failed" and last["failure"]["tag"] == "preempted", last
    text = "\n".join(path.read_text() for path in head_log)
    steps = [e.step for e in train_log.parse(text).intermediate]
    assert steps == [10, 20], steps  # held before step 22: nothing after the step-20 evaluation
    record = env["ledger"].get(run_id)
    assert [(e["attempt"], e["step"]) for e in record.results["intermediate"]] == [(1, s) for s in steps]
