"""The simulator plays a team's workloads in the team's namespace, and Kueue's cohort reclamation
as Kueue v0.17.1 reports it: a team taking back the chips another team borrowed evicts the
borrower's training as a preemption (Evicted ``Preempted``), the Workload's ``Preempted`` reason
``InCohortReclamation`` and the message in Kueue's words (pkg/scheduler/preemption/
preemption.go:156-162, 405), which the pipeline's client classes ``preempted`` (it resumes)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from rlpipe.cluster import ClusterClient
from rlpipe.core import manifests, request
from rlpipe.core.failures import FailureClass
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets, minimal_request
from tests.harness.staged_data import seed_training_data
from tests.local.test_simulator import _seed_pinned, kube, program_args, seed, simulate  # noqa: F401

TEAM_NS = "rlpipe-vision"


@pytest.mark.parametrize(
    ("why", "preempted_reason", "words"),
    [
        ("cohort-reclamation", "InCohortReclamation", "due to reclamation within the cohort"),
        ("preempted", "InClusterQueue", "due to prioritization in the ClusterQueue"),
    ],
)
def test_a_teams_training_taken_back_by_its_cohort_is_preempted_in_its_namespace(
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
    why: str,
    preempted_reason: str,
    words: str,
) -> None:
    sim = simulate(f"train:evict@3:{why}")
    req = request.validate_request(minimal_request(training={"num_batches": 10}))
    train = manifests.render(
        req, "train", 1, manifests.RenderContext(run_id="rteam1", bucket=buckets.artifacts, namespace=TEAM_NS)
    )
    seed(buckets, program_args(train)["load_parameters_path"])
    _seed_pinned(buckets, train)  # what conversion pinned
    seed_training_data(buckets.client, train)
    api = kube.api_client()
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", TEAM_NS, "jobsets", train
    )
    assert sim.wait_idle(15)  # evicted, suspended in its queue

    [workload] = kube.list("workloads", namespace=TEAM_NS)
    conditions = {c["type"]: c for c in workload["status"]["conditions"]}
    assert conditions["Evicted"]["reason"] == "Preempted"
    assert conditions["Preempted"]["reason"] == preempted_reason
    assert words in conditions["Preempted"]["message"]
    assert kube.list("workloads", namespace="rlpipe") == [], "nothing in the deployment's namespace"

    status = ClusterClient(api, TEAM_NS, sleep=lambda s: None).status(
        train["metadata"]["name"], kind="JobSet", queued_deadline_seconds=600.0
    )
    assert (status.phase, status.failure_class) == ("failed", FailureClass.PREEMPTED), status.reason
    assert words in status.reason
