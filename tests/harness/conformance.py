"""What the conformance tests share: the real plane's nodes, a pod player per test, and reading a
workload's verdict on either cluster (tests/cluster/real_plane/test_real_conformance*.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_slice
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.harness.patience import wait_until
from tests.harness.real_cluster import PARAMS
from tests.local.test_simulator import NS, create, kube, render, simulate  # noqa: F401

STAGE_USER = PARAMS["STAGE_GSA"]
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
TPU = "google.com/tpu"
SPOT_POOL = "tpu-v6e-spot"


@pytest.fixture(scope="module")
def nodes(real_cluster: ControlPlane) -> set[str]:
    return real_cluster.add_nodes([*cpu_pool(), *tpu_slice("4x8"), *tpu_slice("4x8", SPOT_POOL, spot=True)])


@pytest.fixture
def play(real_cluster: ControlPlane, nodes: set[str]) -> Iterator[Callable[[Outcome], PodPlayer]]:
    players: list[PodPlayer] = []

    def start(outcome: Outcome) -> PodPlayer:
        player = PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: outcome).start()
        players.append(player)
        return player

    yield start
    for player in players:
        player.stop()
    # A player that failed (a rejected patch, a wrong key) says so here, not as a timeout elsewhere.
    assert not [e for p in players for e in p.errors if "listing pods" not in e], [
        list(p.errors) for p in players
    ]


def real_client(plane: ControlPlane) -> ClusterClient:
    return ClusterClient(plane.api_client(STAGE_USER), NS)


def settled(read: Callable[[], WorkloadStatus]) -> WorkloadStatus:
    def verdict() -> WorkloadStatus | None:
        status = read()
        return status if status.phase in ("succeeded", "failed") else None

    return wait_until(verdict, 10, what="a verdict")


def verdict_on_double(
    kube: KubeApiServer, simulate: Callable[..., ClusterSimulator], obj: dict[str, Any], fault: str
) -> WorkloadStatus:
    simulate(*([fault] if fault else []))
    create(kube, obj)
    client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    return settled(lambda: client.status(obj["metadata"]["name"], kind=obj["kind"]))


def verdict_on_real(
    plane: ControlPlane, play: Callable[[Outcome], PodPlayer], obj: dict[str, Any], outcome: Outcome
) -> WorkloadStatus:
    client = real_client(plane)
    play(outcome)
    client.apply(obj)
    try:
        return settled(lambda: client.status(obj["metadata"]["name"], kind=obj["kind"]))
    finally:
        with contextlib.suppress(Exception):
            client.delete(obj["kind"], obj["metadata"]["name"])


def disrupt_worker_0(reason: str) -> Callable[[dict[str, Any]], Outcome]:
    """Worker 0 of the slice is disrupted a moment after it starts; every other container runs."""

    def script(pod: dict[str, Any]) -> Outcome:
        labels = pod["metadata"]["labels"]
        worker_0 = (
            labels.get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
            and labels.get("batch.kubernetes.io/job-completion-index") == "0"
        )
        return Outcome(exit_code=None, seconds=1.0, disruption=reason if worker_0 else None)

    return script
