"""Conformance: what Kueue keeps for a finished training JobSet, on the double and on the real plane.

A finished attempt is charged at least what Kueue reserved for it (``core.chip_hours.
reserved_by_kueue``), because the JobSet controller deletes a Pathways JobSet's workers once its
head has completed. That reads the job's Workload: its ``status.admission`` (the TPU pod set's
``resourceUsage``) and its ``Admitted`` condition. The simulator writes that Workload on the
double as it plays Kueue; on the real plane the real Kueue writes it. Where the two disagree, the
double is wrong.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.kinds import KUEUE_JOB_UID_LABEL
from rlpipe.core import chip_hours
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets
from tests.harness.conformance import nodes, real_client, settled, verdict_on_double  # noqa: F401  (nodes: a fixture)
from tests.harness.patience import wait_until
from tests.local.test_simulator import NS, kube, render, simulate  # noqa: F401  (fixtures)


def _head_completes(pod: dict[str, Any]) -> Outcome:
    """The head's program ends well a moment after it starts; the workers serve until deleted."""
    head = pod["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "pathways-head"
    return Outcome(exit_code=0, seconds=1.0) if head else Outcome(exit_code=None)


def _shape(workload: dict[str, Any]) -> dict[str, Any]:
    """What the reservation figure reads of a Workload: per pod set its count and its chips, and
    which conditions are True."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {
        "pod_sets": sorted(
            (a["name"], a.get("count"), (a.get("resourceUsage") or {}).get(chip_hours.TPU_RESOURCE))
            for a in admission.get("podSetAssignments") or []
        ),
        "true": sorted(
            c["type"]
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"
        ),
    }


def test_a_finished_training_jobsets_reservation_reads_alike_on_both_clusters(
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    from tests.local.test_simulator import program_args, seed

    double_train = render(buckets, "train", run_id="rdblreserve", training={"num_batches": 4})
    seed(buckets, program_args(double_train)["load_parameters_path"])
    on_double = verdict_on_double(kube, simulate, double_train, "")
    uid = kube.get("jobsets", double_train["metadata"]["name"], namespace=NS)["metadata"]["uid"]

    def double_finished() -> dict[str, Any] | None:
        (workload,) = kube.list("workloads", namespace=NS, label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}")
        return workload if "Finished" in _shape(workload)["true"] else None

    double_workload = wait_until(double_finished, 10, what="the double's Workload Finished")
    # Read again now that the JobSet has its own end (Kueue's Finished follows it): the first
    # verdict may have come from the head's exit, before the JobSet controller's condition.
    double_client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    on_double = double_client.status(double_train["metadata"]["name"], kind="JobSet")

    real_train = render(buckets, "train", run_id="rrealreserve", training={"num_batches": 4})
    name = real_train["metadata"]["name"]
    client = real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, _head_completes):
        created = client.apply(real_train)
        try:
            on_real = settled(lambda: client.status(name, kind="JobSet"))

            def real_finished() -> dict[str, Any] | None:
                (workload,) = json.loads(
                    real_cluster.kubectl(
                        "get",
                        "workloads.kueue.x-k8s.io",
                        "-n",
                        NS,
                        "-l",
                        f"{KUEUE_JOB_UID_LABEL}={created['metadata']['uid']}",
                        "-o",
                        "json",
                    )
                )["items"]
                return workload if "Finished" in _shape(workload)["true"] else None

            real_workload = wait_until(real_finished, 20, what="the real Kueue's Workload Finished")
            on_real = client.status(name, kind="JobSet")
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", name)

    assert on_real.phase == on_double.phase == "succeeded", (on_real.reason, on_double.reason)
    # v6e-32 (4x8): 8 hosts of 4 chips, admitted as one pod set of 32 chips; the head holds none.
    assert _shape(double_workload)["pod_sets"] == _shape(real_workload)["pod_sets"]
    assert _shape(real_workload)["pod_sets"] == [("pathways-head", 1, None), ("worker", 8, "32")]
    assert _shape(double_workload)["true"] == _shape(real_workload)["true"]
    assert {"Admitted", "Finished", "QuotaReserved"} <= set(_shape(real_workload)["true"])
    # A read of the JobSet ended by its own condition gives what Kueue held: its workers are gone.
    # On the real plane the head ran a second after the admission, so the span is a second at
    # least (the conditions' times are whole seconds); the double plays it in simulated time.
    assert on_real.reserved_chip_hours is not None and on_real.reserved_chip_hours >= 32 / 3600, on_real
    assert on_double.reserved_chip_hours is not None, on_double
