"""Every manifest rlpipe renders goes through the real admission path: the API server's own
validation, then the JobSet and Kueue webhooks, as the pipeline's identity with our Role.

The cluster is the real control plane (tests/harness/real_cluster.py). ``--dry-run=server`` runs
the whole admission chain, webhooks included (they declare ``sideEffects: None``), and persists
nothing. A refusal here is a defect in our manifests.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlpipe.control.lifecycle.publishing import publisher_program
from rlpipe.core.manifests import RenderContext, render_all
from rlpipe.core.request import load_request, validate_request
from rlpipe.core.request.policy import Policy
from rlpipe.local.controlplane import ControlPlane
from tests.conftest import EXAMPLES, minimal_request
from tests.harness.real_cluster import PARAMS

NAMESPACE = "rlpipe"
STAGE_USER = PARAMS["STAGE_GSA"]
LONGEST_PREFIX = f"{'p' * 50}.example.com"
LONGEST_LABEL = {f"{LONGEST_PREFIX}/{'k' * 63}": "v" * 63}


def _requests() -> list[tuple[str, Any]]:
    reqs = [
        (p.name, load_request(p.read_bytes(), source=str(p), policy=Policy(allow_user_code=True)))
        for p in EXAMPLES
    ]
    for preset in ("v6e-32", "v6e-64"):
        reqs.append((f"preset-{preset}", validate_request(minimal_request(preset=preset))))
    reqs.append(
        (
            "longest-ids-and-labels",
            # a deployment that lists the prefix (RLPIPE_ALLOWED_LABEL_PREFIXES): the longest key
            validate_request(
                minimal_request(request_id="r" * 40, labels=LONGEST_LABEL),
                Policy(label_prefixes=(LONGEST_PREFIX,)),
            ),
        )
    )
    return reqs


def _rendered(req: Any, attempt: int, run_id: str = "rzzzzzzzzzzz") -> list[dict[str, Any]]:
    ctx = RenderContext(
        run_id=run_id,
        bucket="rlpipe-artifacts",
        model_card="# card",
        publisher_program=publisher_program(),
        namespace=NAMESPACE,
    )
    return render_all(req, ctx, attempt=attempt)


def _dry_run_create(plane: ControlPlane, obj: dict[str, Any]) -> dict[str, Any]:
    """Create with dryRun=All as the pipeline's identity: the whole admission chain, nothing kept."""
    from kubernetes import dynamic

    client = dynamic.DynamicClient(plane.api_client(STAGE_USER))
    resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    return dict(resource.create(body=obj, namespace=NAMESPACE, query_params=[("dryRun", "All")]).to_dict())


def _refusals(plane: ControlPlane, objects: list[dict[str, Any]]) -> list[str]:
    """The objects the admission chain refuses, with the API server's answer."""
    from kubernetes.client.exceptions import ApiException

    problems = []
    for obj in objects:
        try:
            _dry_run_create(plane, obj)
        except ApiException as exc:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {exc.status} {exc.body}")
    return problems


REQUESTS = _requests()


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=[n for n, _ in REQUESTS])
def test_every_stage_is_admitted_at_the_first_and_a_late_attempt(
    real_cluster: ControlPlane, name: str, req: Any
) -> None:
    objects = [*_rendered(req, 1), *_rendered(req, 99_999)]
    assert _refusals(real_cluster, objects) == []


def test_the_train_jobset_is_admitted_at_every_attempt_from_1_to_99(real_cluster: ControlPlane) -> None:
    req = REQUESTS[0][1]
    trains = [o for attempt in range(1, 100) for o in _rendered(req, attempt) if o["kind"] == "JobSet"]
    assert len(trains) == 99
    assert _refusals(real_cluster, trains) == []


def test_a_call_the_role_does_not_allow_is_refused(real_cluster: ControlPlane) -> None:
    """The pipeline's identity holds exactly our Role: reading Secrets is not in it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(real_cluster.api_client(STAGE_USER))
    with pytest.raises(ApiException) as refused:
        core.list_namespaced_secret(NAMESPACE)
    assert refused.value.status == 403
    assert (
        real_cluster.kubectl(
            "auth", "can-i", "create", "jobsets.jobset.x-k8s.io", "-n", NAMESPACE, user=STAGE_USER
        ).strip()
        == "yes"
    )


def test_the_webhooks_are_in_the_path(real_cluster: ControlPlane) -> None:
    """Kueue's mutating webhook suspends a queued JobSet; JobSet's validating webhook refuses a
    coordinator that names no replicatedJob. Both answer, so the admissions above went through them."""
    from kubernetes.client.exceptions import ApiException

    (train,) = (o for o in _rendered(REQUESTS[0][1], 1) if o["kind"] == "JobSet")
    train["spec"].pop("suspend", None)
    assert _dry_run_create(real_cluster, train)["spec"]["suspend"] is True
    train["spec"]["coordinator"]["replicatedJob"] = "no-such-job"
    with pytest.raises(ApiException) as refused:
        _dry_run_create(real_cluster, train)
    assert "admission webhook" in str(refused.value.body) and "no-such-job" in str(refused.value.body)


def _child_jobs(plane: ControlPlane, jobset: str) -> list[str]:
    out = plane.kubectl(
        "get", "jobs", "-n", NAMESPACE, "-l", f"jobset.sigs.k8s.io/jobset-name={jobset}", "-o", "name"
    )
    return out.split()


def test_a_jobset_past_attempt_99_gets_its_child_jobs_only_with_the_short_subdomain(
    real_cluster: ControlPlane,
) -> None:
    """JobSet v0.10.1 stamps the coordinator endpoint into a label on every child Job and never
    validates it: named after itself, a train JobSet at attempt 100 is admitted by Kueue (which
    holds the quota) and then every child Job create fails, only logged. Ours gets its Jobs."""
    from tests.harness.patience import wait_until

    req = REQUESTS[0][1]
    (ours,) = (o for o in _rendered(req, 100, run_id="rcoordours01") if o["kind"] == "JobSet")
    (theirs,) = (o for o in _rendered(req, 100, run_id="rcoordtheir1") if o["kind"] == "JobSet")
    del theirs["spec"]["network"]["subdomain"]
    real_cluster.apply([ours, theirs])
    try:
        wait_until(lambda: _child_jobs(real_cluster, ours["metadata"]["name"]), 10, what="ours' child Jobs")
        log = real_cluster.logs / "jobset.log"
        wait_until(
            lambda: "must be no more than 63 characters" in log.read_text(errors="replace"),
            10,
            what="the JobSet controller's failed Job creates",
        )
        assert _child_jobs(real_cluster, theirs["metadata"]["name"]) == []
    finally:
        real_cluster.kubectl("delete", "jobsets", "--all", "-n", NAMESPACE, "--wait=false")


@pytest.mark.parametrize(
    ("user", "allowed"),
    [
        (PARAMS["STAGE_GSA"], True),  # launch, status, cleanup: the stage function
        (PARAMS["RECONCILE_GSA"], True),  # deletes orphaned workloads
        # `rlpipe cancel` reaches the cluster only through the stage function: an operator, and
        # the operators' impersonated account (infra/terraform/iam.tf), hold nothing in it.
        ("rlpipe-operator@rlpipe-test.iam.gserviceaccount.com", False),
        ("alice@example.com", False),
    ],
)
def test_only_the_pipelines_identities_may_delete_a_run(
    real_cluster: ControlPlane, user: str, allowed: bool
) -> None:
    real_cluster.add_user(user)
    answer = real_cluster.kubectl(
        "auth", "can-i", "delete", "jobsets.jobset.x-k8s.io", "-n", NAMESPACE, user=user, check=False
    ).strip()
    assert answer == ("yes" if allowed else "no")
    assert (
        real_cluster.kubectl(
            "auth", "can-i", "get", "secrets", "-n", NAMESPACE, user=user, check=False
        ).strip()
        == "no"
    )


def test_the_deployed_queues_are_active_in_the_real_kueue(real_cluster: ControlPlane) -> None:
    """infra/cluster/k8s's flavors, ClusterQueue and LocalQueues, as a deploy applies them: Kueue
    marks a queue inactive when a flavor or admission check it names is missing or invalid."""
    import json

    from tests.harness.patience import wait_until

    def inactive() -> list[str]:
        queues = json.loads(real_cluster.kubectl("get", "clusterqueues,localqueues", "-A", "-o", "json"))[
            "items"
        ]
        if not queues:
            return ["(none yet)"]
        return [
            f"{q['kind']} {q['metadata']['name']}"
            for q in queues
            if not any(
                c["type"] == "Active" and c["status"] == "True"
                for c in (q.get("status") or {}).get("conditions", [])
            )
        ]

    assert wait_until(lambda: inactive() == [] or None, 5, what=f"active queues (inactive: {inactive()})")
