"""The teams' namespaces and queues on the real control plane, as ``rlpipe local up --cluster real
--teams`` makes them (local/controlplane/team_namespaces.py, from ``rlpipe teams render``): the
pipeline's identity may create a team's workload there, and the real Kueue admits it through the
team's LocalQueue ``user-queue`` on the team's own ClusterQueue; the deploy's ClusterQueue
``rlpipe`` stays as deployed and admits no team's workload.

The plane is the worker's shared one; everything made here is deleted afterwards, so the other test
files find the deploy as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.team_namespaces import team_documents
from rlpipe.local.teams_declaration import read_teams_file
from tests.conftest import ROOT, minimal_request
from tests.harness.patience import ceiling, wait_until
from tests.harness.real_cluster import PARAMS

TEAMS = read_teams_file(ROOT / "examples" / "teams" / "teams.yaml").teams
STAGE_USER = PARAMS["STAGE_GSA"]
PLANE_CHIPS = 32  # the local stack's one v6e 4x8 slice (local_cluster.TOPOLOGY)
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def team_plane(real_cluster: ControlPlane) -> Iterator[ControlPlane]:
    """The teams' objects applied until both ClusterQueues are Active, and deleted afterwards (the
    ClusterQueues with the plane waiting, so no later file finds the cohort still holding them)."""
    made = team_documents(TEAMS, PLANE_CHIPS)
    real_cluster.apply(made)
    try:
        real_cluster.kubectl(
            "wait",
            "--for=condition=Active",
            *(f"clusterqueues.kueue.x-k8s.io/rlpipe-{team.name}" for team in TEAMS),
            f"--timeout={ceiling(5):.0f}s",
        )
        yield real_cluster
    finally:
        queues = [d for d in made if d["kind"] == "ClusterQueue"]
        namespaces = [d for d in made if d["kind"] == "Namespace"]
        real_cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=yaml.safe_dump_all(namespaces)
        )
        real_cluster.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(queues))


def _convert_job(namespace: str, run_id: str) -> Obj:
    team = TEAMS.named(namespace.removeprefix("rlpipe-"))
    assert team is not None
    secret = {"name": team.read_secrets[0].split(":")[0], "key": "token"}  # its own, in its namespace
    req = validate_request(minimal_request(hf_token_secret=secret), Policy().for_team(team))
    return render(
        req, "convert", 1, RenderContext(run_id=run_id, bucket="rlpipe-artifacts", namespace=namespace)
    )


def _workload(plane: ControlPlane, namespace: str, job: str) -> Obj:
    """Kueue's Workload for ``job`` (empty until Kueue made it)."""
    workloads = json.loads(plane.kubectl("get", "workloads.kueue.x-k8s.io", "-n", namespace, "-o", "json"))
    for workload in workloads["items"]:
        if any(ref.get("name") == job for ref in workload["metadata"].get("ownerReferences") or []):
            return dict(workload)
    return {}


def _conditions(plane: ControlPlane, namespace: str, job: str) -> dict[str, Obj]:
    status = _workload(plane, namespace, job).get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


@pytest.mark.parametrize("team", ["vision", "speech"])
def test_a_teams_workload_is_created_by_the_pipeline_and_admitted_by_its_own_cluster_queue(
    team_plane: ControlPlane, team: str
) -> None:
    """Through the team's LocalQueue, on its ClusterQueue: speech's own chips, or for vision (which
    owns none) cpu-np borrowed from speech within the cohort."""
    from kubernetes import client

    namespace = f"rlpipe-{team}"
    job = _convert_job(namespace, f"rteamreal{team[:3]}1")
    batch = client.BatchV1Api(team_plane.api_client(STAGE_USER))  # the pipeline's identity, its Role
    batch.create_namespaced_job(namespace, job)
    try:
        name = job["metadata"]["name"]
        admitted = wait_until(
            lambda: (_conditions(team_plane, namespace, name).get("Admitted") or {}).get("status") == "True",
            20,
            what=f"{name} admitted",
        )
        assert admitted
        admission = _workload(team_plane, namespace, name)["status"]["admission"]
        assert admission["clusterQueue"] == f"rlpipe-{team}"
    finally:
        batch.delete_namespaced_job(job["metadata"]["name"], namespace, propagation_policy="Background")


def test_the_deploys_cluster_queue_admits_no_team_namespace(team_plane: ControlPlane) -> None:
    """A LocalQueue in a team's namespace pointing at the deploy's ClusterQueue ``rlpipe`` (what
    the stack made before each team had its own): the deploy's queue is left selecting ``rlpipe``
    only, so Kueue says the namespace does not match (scheduler.go:509) and admits nothing."""
    stray = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "deploy-queue", "namespace": "rlpipe-speech"},
        "spec": {"clusterQueue": "rlpipe"},
    }
    job = _convert_job("rlpipe-speech", "rteamreal002")
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "deploy-queue"
    team_plane.apply([stray, job])
    try:
        name = job["metadata"]["name"]
        pending = wait_until(
            lambda: _conditions(team_plane, "rlpipe-speech", name).get("QuotaReserved"),
            20,
            what="Kueue's verdict",
        )
        assert (pending["status"], pending["message"]) == (
            "False",
            "Workload namespace doesn't match ClusterQueue selector",
        )
        assert "Admitted" not in _conditions(team_plane, "rlpipe-speech", name)
    finally:
        team_plane.kubectl("delete", "job", name, "-n", "rlpipe-speech", "--ignore-not-found")
        team_plane.kubectl("delete", "localqueue.kueue.x-k8s.io", "deploy-queue", "-n", "rlpipe-speech")
