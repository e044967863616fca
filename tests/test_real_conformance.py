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
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.core.failures import FailureClass
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_slice
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets
from tests.harness.patience import wait_until
from tests.harness.real_cluster import PARAMS, real_cluster  # noqa: F401
from tests.test_simulator import NS, create, kube, render, simulate  # noqa: F401

STAGE_USER = PARAMS["STAGE_GSA"]


@pytest.fixture(scope="module")
def nodes(real_cluster: ControlPlane) -> set[str]:
    return real_cluster.add_nodes([*cpu_pool(), *tpu_slice("4x8")])


@pytest.fixture
def play(real_cluster: ControlPlane, nodes: set[str]) -> Iterator[Callable[[Outcome], PodPlayer]]:
    players: list[PodPlayer] = []

    def start(outcome: Outcome) -> PodPlayer:
        player = PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: outcome)
        players.append(player.__enter__())
        return player

    yield start
    for player in players:
        player.__exit__(None, None, None)


def _real_client(plane: ControlPlane) -> ClusterClient:
    return ClusterClient(plane.api_client(STAGE_USER), NS)


def _settled(read: Callable[[], WorkloadStatus]) -> WorkloadStatus:
    def verdict() -> WorkloadStatus | None:
        status = read()
        return status if status.phase in ("succeeded", "failed") else None

    return wait_until(verdict, 10, what="a verdict")


def _on_double(
    kube: KubeApiServer, simulate: Callable[..., ClusterSimulator], obj: dict[str, Any], fault: str
) -> WorkloadStatus:
    simulate(*([fault] if fault else []))
    create(kube, obj)
    client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    return _settled(lambda: client.status(obj["metadata"]["name"], kind=obj["kind"]))


def _on_real(
    plane: ControlPlane, play: Callable[[Outcome], PodPlayer], obj: dict[str, Any], outcome: Outcome
) -> WorkloadStatus:
    client = _real_client(plane)
    play(outcome)
    client.apply(obj)
    try:
        return _settled(lambda: client.status(obj["metadata"]["name"], kind=obj["kind"]))
    finally:
        with contextlib.suppress(Exception):
            client.delete(obj["kind"], obj["metadata"]["name"])


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
    on_double = _on_double(kube, simulate, render(buckets, "convert", run_id=f"rdbl{scenario[:4]}"), fault)
    on_real = _on_real(real_cluster, play, render(buckets, "convert", run_id=f"rreal{scenario[:4]}"), outcome)
    assert (on_real.phase, on_real.failure_class) == (on_double.phase, on_double.failure_class), (
        f"double: {on_double.reason}\nreal: {on_real.reason}"
    )
    assert (on_real.phase, on_real.failure_class) == verdict, on_real.reason


def _disrupt_worker_0(reason: str) -> Callable[[dict[str, Any]], Outcome]:
    """Worker 0 of the slice is disrupted a moment after it starts; every other container runs."""

    def script(pod: dict[str, Any]) -> Outcome:
        labels = pod["metadata"]["labels"]
        worker_0 = (
            labels.get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
            and labels.get("batch.kubernetes.io/job-completion-index") == "0"
        )
        return Outcome(exit_code=None, seconds=1.0, disruption=reason if worker_0 else None)

    return script


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
    on_double = _on_double(kube, simulate, double_train, f"train:preempt@3:worker:{how}")

    real_train = render(buckets, "train", run_id=f"rrealp{how[:5]}", training={"num_batches": 10})
    client = _real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, _disrupt_worker_0(reason)):
        client.apply(real_train)
        try:
            on_real = _settled(lambda: client.status(real_train["metadata"]["name"], kind="JobSet"))
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
    client = _real_client(real_cluster)
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
