"""rlpipe.cluster against the Kubernetes API double, through the real ``kubernetes`` client: deleting and listing a run's objects.

Shared documents: documents.py; fixtures and the RBAC check of every call: conftest.py.
"""

from __future__ import annotations

import copy
from typing import Any

from rlpipe.cluster import ClusterClient, kinds
from rlpipe.core import identity
from rlpipe.core.manifests import pathways
from rlpipe.local.kube_api import KubeApiServer
from tests.cluster.client.documents import (
    NS,
    OTHER_RUN,
    RUN,
    Harness,
    cond,
    job_pod,
    jobset_pod,
    patch_status_of,
    rendered,
    server_log,
    suspend,
)

# --------------------------------------------------------------------------- delete and list


def _launch_run(server: KubeApiServer, cc: ClusterClient, run_id: str) -> dict[str, dict[str, Any]]:
    """A convert Job and a train JobSet of one run, with their pods and the JobSet's child Job."""
    job = cc.apply(rendered("convert", run_id))
    js = cc.apply(rendered("train", run_id))
    server.create("pods", job_pod(job))
    head = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == pathways.HEAD)
    child = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{js['metadata']['name']}-{pathways.HEAD}-0",
            "namespace": NS,
            "labels": {
                **head["template"]["metadata"]["labels"],
                kinds.JOBSET_NAME_LABEL: js["metadata"]["name"],
                kinds.REPLICATED_JOB_LABEL: pathways.HEAD,
            },
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": js["metadata"]["name"],
                    "uid": js["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": copy.deepcopy(head["template"]["spec"]),
    }
    server.create("jobs", child)
    server.create("pods", jobset_pod(js, pathways.HEAD))
    server.create("pods", jobset_pod(js, "worker", 0, 0))
    return {"job": job, "jobset": js}


def _pods_of_run(server: KubeApiServer, run_id: str) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in server.list("pods", namespace=NS, label_selector=identity.run_selector(run_id))
    }


def test_delete_run_deletes_only_that_run_and_its_pods(server: KubeApiServer, h: Harness) -> None:
    mine = _launch_run(server, h.client, RUN)
    _launch_run(server, h.client, OTHER_RUN)
    other_pods = _pods_of_run(server, OTHER_RUN)
    assert len(_pods_of_run(server, RUN)) == 3 and len(other_pods) == 3

    deleted = h.client.delete_run(RUN)

    assert sorted(deleted) == sorted([mine["job"]["metadata"]["name"], mine["jobset"]["metadata"]["name"]])
    assert _pods_of_run(server, RUN) == set()
    assert _pods_of_run(server, OTHER_RUN) == other_pods
    left = {(o.kind, o.run_id) for o in h.client.list_run_objects()}
    assert left == {("Job", OTHER_RUN), ("JobSet", OTHER_RUN)}
    assert server.list("jobs", namespace=NS, label_selector=identity.run_selector(RUN)) == []  # child Job too
    deletes = server_log(server, 2, "DELETE")
    assert len(deletes) == 2 and all(r.query.get("propagationPolicy") == "Background" for r in deletes)

    assert h.client.delete_run(RUN) == []  # idempotent


def test_delete_run_does_not_repeat_a_deletion_held_by_finalizers(server: KubeApiServer, h: Harness) -> None:
    js = rendered("train")
    js["metadata"]["finalizers"] = ["example.com/hold"]
    h.client.apply(js)

    assert h.client.delete_run(RUN) == [js["metadata"]["name"]]
    assert h.client.delete_run(RUN) == []
    [held] = h.client.list_run_objects(RUN)
    assert held.deleting and held.name == js["metadata"]["name"]
    server.modify("jobsets", js["metadata"]["name"], lambda o: o["metadata"].pop("finalizers"), namespace=NS)
    assert h.client.list_run_objects(RUN) == []


def test_delete_run_leaves_a_child_job_whose_jobset_is_gone_to_the_garbage_collector(
    server: KubeApiServer, h: Harness
) -> None:
    """Found on the real control plane (tests/cluster/real_plane/test_real_conformance.py): Background propagation
    removes the JobSet at once and its child Jobs later, so a second `delete_run` can still list
    them. They are the garbage collector's; deleting them again is not ours, and the second call
    must report nothing deleted."""
    child = rendered("convert")
    child["metadata"]["name"] = f"{RUN}-train-a1-worker-0"
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": f"{RUN}-train-a1",
            "uid": "00000000-0000-0000-0000-000000000001",
            "controller": True,
        }
    ]
    server.create("jobs", child, namespace=NS)

    assert h.client.delete_run(RUN) == []
    assert server.find("jobs", child["metadata"]["name"], namespace=NS) is not None


def test_delete_one_ignores_404(server: KubeApiServer, h: Harness) -> None:
    js = h.client.apply(rendered("train"))
    assert h.client.delete("JobSet", js["metadata"]["name"]) is True
    assert h.client.delete("JobSet", js["metadata"]["name"]) is False
    assert h.client.delete("Job", "rnever000000-convert-a1") is False


def test_list_run_objects_reports_runs_stages_attempts(server: KubeApiServer, h: Harness) -> None:
    _launch_run(server, h.client, RUN)
    second = h.client.apply(rendered("convert", RUN, attempt=2))
    h.client.apply(rendered("export", OTHER_RUN, attempt=3))
    suspend(server, "jobs", second["metadata"]["name"])
    patch_status_of(
        server,
        "jobsets",
        rendered("train", RUN),
        {
            "terminalState": "Completed",
            "conditions": [
                cond("Completed", reason="AllJobsCompleted", message="jobset completed successfully")
            ],
        },
    )
    server.create(
        "jobs", {**rendered("convert", "rnotours0000"), "metadata": {"name": "unlabelled", "namespace": NS}}
    )  # no run label: not ours to reconcile

    everything = h.client.list_run_objects()
    summary = {(o.kind, o.run_id, o.stage, o.attempt, o.phase) for o in everything}
    assert summary == {
        ("Job", RUN, "convert", 1, "running"),
        ("Job", RUN, "convert", 2, "queued"),
        ("JobSet", RUN, "train", 1, "succeeded"),
        ("Job", OTHER_RUN, "export", 3, "running"),
    }
    assert all(o.uid and o.created_at and o.created_at.tzinfo for o in everything)
    assert {o.run_id for o in h.client.list_run_objects(OTHER_RUN)} == {OTHER_RUN}
