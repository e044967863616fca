"""A team's namespace on the real control plane, as ``rlpipe local up --cluster real --teams`` makes
it (local/controlplane/team_namespaces.py): the pipeline's identity may create a team's workload
there, and the real Kueue admits it through the team's LocalQueue ``user-queue``; a team namespace
the ClusterQueue does not select is left waiting, which is why the stack widens the selector.

The plane is the worker's shared one; everything made here is deleted afterwards, and the
ClusterQueue is given back its deployed selector, so the other test files find the deploy as it was.
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
from tests.harness.patience import wait_until
from tests.harness.real_cluster import PARAMS, deploy_documents

TEAMS = read_teams_file(ROOT / "examples" / "teams" / "teams.yaml").teams
STAGE_USER = PARAMS["STAGE_GSA"]
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def team_plane(real_cluster: ControlPlane) -> Iterator[ControlPlane]:
    deployed = deploy_documents()
    made = team_documents(TEAMS, deployed)
    real_cluster.apply(made)
    try:
        yield real_cluster
    finally:
        queue = [d for d in deployed if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "rlpipe"]
        real_cluster.apply(queue)
        namespaces = [d for d in made if d["kind"] == "Namespace"]
        real_cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=yaml.safe_dump_all(namespaces)
        )


def _convert_job(namespace: str, run_id: str) -> Obj:
    team = TEAMS.named(namespace.removeprefix("rlpipe-"))
    assert team is not None
    secret = {"name": team.read_secrets[0].split(":")[0], "key": "token"}  # its own, in its namespace
    req = validate_request(minimal_request(hf_token_secret=secret), Policy().for_team(team))
    return render(
        req, "convert", 1, RenderContext(run_id=run_id, bucket="rlpipe-artifacts", namespace=namespace)
    )


def _conditions(plane: ControlPlane, namespace: str, job: str) -> dict[str, Obj]:
    """The conditions of Kueue's Workload for ``job`` (empty until Kueue made it)."""
    workloads = json.loads(plane.kubectl("get", "workloads.kueue.x-k8s.io", "-n", namespace, "-o", "json"))
    for workload in workloads["items"]:
        if any(ref.get("name") == job for ref in workload["metadata"].get("ownerReferences") or []):
            return {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}
    return {}


def test_a_teams_workload_is_created_by_the_pipeline_and_admitted_through_its_local_queue(
    team_plane: ControlPlane,
) -> None:
    from kubernetes import client

    job = _convert_job("rlpipe-vision", "rteamreal001")
    batch = client.BatchV1Api(team_plane.api_client(STAGE_USER))  # the pipeline's identity, its Role
    batch.create_namespaced_job("rlpipe-vision", job)
    try:
        name = job["metadata"]["name"]
        admitted = wait_until(
            lambda: (
                (_conditions(team_plane, "rlpipe-vision", name).get("Admitted") or {}).get("status") == "True"
            ),
            20,
            what=f"{name} admitted",
        )
        assert admitted
    finally:
        batch.delete_namespaced_job(job["metadata"]["name"], "rlpipe-vision", propagation_policy="Background")


def test_a_team_namespace_the_cluster_queue_does_not_select_is_not_admitted(team_plane: ControlPlane) -> None:
    """The same namespace, once the ClusterQueue selects only ``rlpipe`` again (as deployed): the
    LocalQueue is there, and Kueue says the namespace does not match (scheduler.go:509)."""
    queue = [
        d for d in deploy_documents() if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "rlpipe"
    ]
    team_plane.apply(queue)
    job = _convert_job("rlpipe-speech", "rteamreal002")
    team_plane.apply([job])
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
        team_plane.kubectl(
            "delete", "job", job["metadata"]["name"], "-n", "rlpipe-speech", "--ignore-not-found"
        )
        team_plane.apply(team_documents(TEAMS, deploy_documents()))
