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
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_slice
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets
from tests.harness.patience import wait_until
from tests.harness.real_cluster import PARAMS, real_cluster  # noqa: F401
from tests.test_simulator import NS, create, finish, kube, render, simulate  # noqa: F401

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
    from kubernetes import config

    return ClusterClient(config.new_client_from_config(config_file=str(plane.kubeconfig(STAGE_USER))), NS)


def _settled(read: Callable[[], WorkloadStatus]) -> WorkloadStatus:
    def verdict() -> WorkloadStatus | None:
        status = read()
        return status if status.phase in ("succeeded", "failed") else None

    return wait_until(verdict, 10, what="a verdict")


def _on_double(
    kube: KubeApiServer, simulate: Callable[..., ClusterSimulator], obj: dict[str, Any], fault: str
) -> WorkloadStatus:
    sim = simulate(*([fault] if fault else []))
    create(kube, obj)
    finish(sim, obj)
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


# (scenario, the double's fault for the convert Job, what the real pods' containers do)
CONVERT_SCENARIOS = [
    ("success", "", Outcome(exit_code=0, seconds=0.5)),
    ("exit-1", "convert:exit:1", Outcome(exit_code=1, seconds=0.5)),
    ("oom", "convert:oom", Outcome(exit_code=137, seconds=0.5, reason="OOMKilled")),
]


@pytest.mark.parametrize(
    ("scenario", "fault", "outcome"), CONVERT_SCENARIOS, ids=[s[0] for s in CONVERT_SCENARIOS]
)
def test_the_convert_job_is_judged_alike_on_both_clusters(
    scenario: str,
    fault: str,
    outcome: Outcome,
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
