"""A finished training attempt is charged what Kueue reserved for it, when its workers are gone.

A Pathways JobSet's workers serve until the JobSet controller deletes them, once the head has
completed; so the read that finds the JobSet finished finds no worker, and the time since the read
before was held by pods nobody sees again. All of it, when no read came while they ran (a review
saw a demo summary without its chip-hours). Kueue keeps the job's Workload, its admission and its
``QuotaReserved`` and ``Finished`` conditions until the job is deleted: the attempt's figure is at
least the admitted chips × (Finished − QuotaReserved).

On the Kubernetes API double with the real client, the cluster client reading the test's clock
(tests/control/stage/test_cancel_chip_hours.py's harness). The test plays Kueue and the JobSet
controller: the Workload below is written as Kueue v0.17.8 writes it (``status.admission``, the
two conditions). Every figure is by hand: two workers of 4 chips, admitted as one pod set of 8.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from rlpipe.control.stage.service import StageService
from rlpipe.core import chip_hours
from rlpipe.local.kube_api import KubeApiServer
from tests.control.stage.test_cancel_chip_hours import (
    T0,
    T1,
    TC,
    Clock,
    _chip_hours,
    _rfc3339,
    _worker,
    training,  # noqa: F401  (fixture)
)
from tests.control.stage.test_stage import NS, env, hub, kube  # noqa: F401  (fixtures)

RUN = "rchipcancel1"  # the harness's run
RESERVED_AT = T0 - timedelta(minutes=2)  # Kueue reserved the quota; the pods started 2 min later


def _workload(jobset: dict[str, Any], *, finished: bool) -> dict[str, Any]:
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "lastTransitionTime": _rfc3339(RESERVED_AT),
            "reason": "QuotaReserved",
            "message": "Quota reserved in ClusterQueue rlpipe",
        },
        {
            "type": "Admitted",
            "status": "True",
            "lastTransitionTime": _rfc3339(RESERVED_AT),
            "reason": "Admitted",
            "message": "The workload is admitted",
        },
    ]
    if finished:
        conditions.append(
            {
                "type": "Finished",
                "status": "True",
                "lastTransitionTime": _rfc3339(TC),
                "reason": "Succeeded",
                "message": "jobset completed successfully",
            }
        )
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"jobset-{jobset['metadata']['name']}-{jobset['metadata']['uid'][:5]}",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/job-uid": jobset["metadata"]["uid"]},
        },
        "spec": {
            "queueName": "rlpipe",
            "podSets": [{"name": "pathways-head", "count": 1}, {"name": "worker", "count": 2}],
        },
        "status": {
            "admission": {
                "clusterQueue": "rlpipe",
                "podSetAssignments": [
                    {
                        "name": "pathways-head",
                        "flavors": {"cpu": "rlpipe-cpu-np"},
                        "resourceUsage": {"cpu": "1"},
                        "count": 1,
                    },
                    {
                        "name": "worker",
                        "flavors": {chip_hours.TPU_RESOURCE: "rlpipe-tpu-v6e-slice"},
                        "resourceUsage": {chip_hours.TPU_RESOURCE: "8"},
                        "count": 2,
                    },
                ],
            },
            "conditions": conditions,
        },
    }


def _play(
    kube: KubeApiServer, name: str, *, read_while_running: bool, service: StageService, clock: Clock
) -> None:
    """Two workers run from T0 (read at T1 or not); at TC the head completes, the JobSet
    controller marks the JobSet Completed and deletes the workers, and Kueue marks its Workload
    Finished; the workflow's next read is 5 minutes later."""
    jobset = kube.get("jobsets", name, namespace=NS)
    labels = {
        **{k: v for k, v in jobset["metadata"]["labels"].items() if k.startswith("rlpipe.dev/")},
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": jobset["metadata"]["uid"],
    }
    workers = [f"{name}-w0", f"{name}-w1"]
    for worker in workers:
        kube.create("pods", _worker(worker, labels), namespace=NS)
    kube.create("workloads", _workload(jobset, finished=False), namespace=NS)
    if read_while_running:
        clock.at = T1
        service.status(RUN, "train", 1)
        assert _chip_hours_of(kube, service) == pytest.approx(2 * 4 * 0.5)  # the running read's figure
    clock.at = TC
    kube.patch_status(
        "jobsets",
        name,
        {
            "conditions": [
                {
                    "type": "Completed",
                    "status": "True",
                    "lastTransitionTime": _rfc3339(TC),
                    "reason": "AllJobsCompleted",
                    "message": "jobset completed successfully",
                }
            ]
        },
        namespace=NS,
    )
    for worker in workers:
        kube.modify("pods", worker, lambda p: p["metadata"].pop("finalizers", None), namespace=NS)
        kube.delete("pods", worker, namespace=NS)
    workload = _workload(jobset, finished=True)
    kube.patch_status("workloads", workload["metadata"]["name"], workload["status"], namespace=NS)
    clock.at = TC + timedelta(minutes=5)
    service.status(RUN, "train", 1)


def _chip_hours_of(kube: KubeApiServer, service: StageService) -> float:
    attempt = service.ledger.get(RUN).attempt_record("train", 1)
    assert attempt is not None
    return float(attempt.chip_hours or 0.0)


@pytest.mark.parametrize("read_while_running", [True, False], ids=["read-at-T1", "no-read-while-running"])
def test_a_finished_training_is_charged_from_kueues_reservation_to_its_end(
    env: dict[str, Any], training: tuple[StageService, Clock, str], read_while_running: bool
) -> None:
    """8 chips from the reservation (T0 − 2 min) to Finished (TC = T0 + 60 min): 8 × 62 / 60 =
    8.2667 chip-hours, not the running read's 4.0 (nor nothing, without one)."""
    service, clock, name = training
    _play(env["kube"], name, read_while_running=read_while_running, service=service, clock=clock)
    attempt = env["ledger"].get(RUN).attempt_record("train", 1)
    assert attempt.finished_at is not None, attempt  # the read ended the attempt
    assert _chip_hours(env, RUN) == pytest.approx(8 * 62 / 60)


def test_a_workload_not_finished_or_since_evicted_reserves_nothing_to_count() -> None:
    """Only a finished job with its quota still reserved gives a figure: one requeued after an
    eviction (QuotaReserved False, its admission cleared) gives none, and a resourceUsage that is
    not a whole number of chips counts as none."""
    jobset = {"metadata": {"name": "j", "uid": "u"}}
    finished = _workload(jobset, finished=True)
    assert chip_hours.reserved_by_kueue([finished]) == pytest.approx(8 * 62 / 60)
    assert chip_hours.reserved_by_kueue([_workload(jobset, finished=False)]) is None
    # Kueue writes Finished a moment after the job ends: the job's own end stands in until then.
    assert chip_hours.reserved_by_kueue([_workload(jobset, finished=False)], TC) == pytest.approx(8 * 62 / 60)
    requeued = _workload(jobset, finished=True)
    requeued["status"]["conditions"][0]["status"] = "False"
    del requeued["status"]["admission"]
    assert chip_hours.reserved_by_kueue([requeued]) is None
    odd = _workload(jobset, finished=True)
    odd["status"]["admission"]["podSetAssignments"][1]["resourceUsage"] = {chip_hours.TPU_RESOURCE: "8.5"}
    assert chip_hours.reserved_by_kueue([odd]) is None
    assert chip_hours.reserved_by_kueue([]) is None
