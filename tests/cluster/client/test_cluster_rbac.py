"""rlpipe.cluster against the Kubernetes API double, through the real ``kubernetes`` client: RBAC: the rules the deployment grants are exactly what the client uses.

Shared documents: documents.py; fixtures and the RBAC check of every call: conftest.py.
"""

from __future__ import annotations

from rlpipe import cluster
from rlpipe.cluster import RBAC_RULES, RbacRule
from rlpipe.local.kube_api import KubeApiServer
from tests.cluster.client.documents import (
    CALLS,
    NS,
    RUN,
    cond,
    make_harness,
    patch_status_of,
    rendered,
    suspend,
)
from tests.cluster.client.rbac_requests import rule_for

# --------------------------------------------------------------------------- RBAC


def test_every_api_call_is_covered_by_rbac_rules_and_every_rule_is_used(server: KubeApiServer) -> None:
    h = make_harness(server)
    start = len(CALLS)
    # Drive every public operation through every path that calls the API.
    job = h.client.apply(rendered("convert"))
    h.client.apply(rendered("convert"))  # 409 → read back
    js = h.client.apply(rendered("train"))
    suspend(server, "jobsets", js["metadata"]["name"])
    h.client.status(js["metadata"]["name"], kind="JobSet")  # queued: pods, events
    h.client.status(job["metadata"]["name"], kind="Job")
    done = {"conditions": [cond("Complete", reason="CompletionsReached")], "succeeded": 1}
    patch_status_of(server, "jobs", job, done)
    h.client.status(job["metadata"]["name"], kind="Job")  # finished: what Kueue reserved for it
    head = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{js['metadata']['name']}-pathways-head-0-0-abcde",
            "namespace": NS,
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"],
                "jobset.sigs.k8s.io/replicatedjob-name": "pathways-head",
            },
        },
        "spec": {"containers": [{"name": "workload-container", "image": "i"}]},
        "status": {"phase": "Running"},
    }
    server.create("pods", head)
    server.set_pod_log(
        head["metadata"]["name"], "step 1 mean_reward=0.1\nstep 2 mean_reward=0.2\n", namespace=NS
    )
    lines, _cursor, found = h.client.read_log(js["metadata"]["name"], None)
    assert found
    assert lines[-1] == "step 2 mean_reward=0.2"
    h.client.list_run_objects(RUN)
    h.client.delete("Job", job["metadata"]["name"])
    h.client.delete_run(RUN)
    mine = {rule_for(m, u) for m, u in CALLS[start:]}
    assert mine == RBAC_RULES, "RBAC_RULES must be exactly what the client uses (least privilege)"
    # Every module's own calls are held to RBAC_RULES by conftest.every_call_within_rbac.


def test_role_rules_render_rbac_rules_for_a_role() -> None:
    rules = cluster.role_rules()
    flattened = {
        RbacRule(g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert flattened == RBAC_RULES
    assert {
        "apiGroups": ["jobset.x-k8s.io"],
        "resources": ["jobsets"],
        "verbs": ["create", "delete", "get", "list"],
    } in rules
