"""A finished training attempt is charged what Kueue reserved for it, when its workers are gone.

A Pathways JobSet's workers serve until the JobSet controller deletes them, once the head has
completed; so the read that finds the JobSet finished finds no worker, and the time since the read
before was held by pods nobody sees again. All of it, when no read came while they ran (a review
saw a demo summary without its chip-hours). Kueue keeps the job's Workload, its admission and its
``Admitted`` condition until the job is deleted: the attempt's figure is at least the admitted
chips × (the job's end − Admitted).

On the Kubernetes API double with the real client, the cluster client reading the test's clock
(tests/control/stage/test_cancel_chip_hours.py's harness). The test plays Kueue and the JobSet
controller: the Workload below is written as Kueue v0.17.8 writes it (``status.admission``, the
two conditions). Every figure is by hand: two workers of 4 chips, admitted as one pod set of 8.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from rlpipe.cluster.status import WorkloadStatus, with_reservation
from rlpipe.control.operator_ops import CancelOrder, cancel
from rlpipe.control.stage.service import StageService
from rlpipe.core import chip_hours
from rlpipe.core.failures import PermanentFailure
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
RESERVED_AT = T0 - timedelta(minutes=2)  # Kueue admitted it; the pods started 2 min later


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
    kube: KubeApiServer,
    name: str,
    *,
    read_while_running: bool,
    service: StageService,
    clock: Clock,
    read_after: bool = True,
) -> None:
    """Two workers run from T0 (read at T1 or not); at TC the head completes, the JobSet
    controller marks the JobSet Completed and deletes the workers, and Kueue marks its Workload
    Finished; the workflow's next read is 5 minutes later (``read_after``; else the clock is left
    there for the test's own next step)."""
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
    if read_after:
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


def test_a_cancel_before_the_workflows_next_read_still_charges_the_reservation(
    env: dict[str, Any], training: tuple[StageService, Clock, str]
) -> None:
    """The JobSet completed at TC, its workers gone and no read since: a cancel at TC + 5 min reads
    it once before deleting it (and its Workload with it), and charges Kueue's 8 × 62 / 60."""
    service, clock, name = training
    _play(env["kube"], name, read_while_running=False, service=service, clock=clock, read_after=False)
    cancel(service, CancelOrder(RUN), caller="operator@example.com")
    assert _chip_hours(env, RUN) == pytest.approx(8 * 62 / 60)


def test_a_workloads_reservation_counts_from_its_admission_to_its_end() -> None:
    """By hand: 8 chips admitted at T0 − 2 min; the job ended at TC = T0 + 60 min."""
    jobset = {"metadata": {"name": "j", "uid": "u"}}
    finished = _workload(jobset, finished=True)
    assert chip_hours.reserved_by_kueue([finished], TC) == pytest.approx(8 * 62 / 60)
    # Kueue writes Finished a moment after the job's own end: the job's end is what counts.
    assert chip_hours.reserved_by_kueue([_workload(jobset, finished=False)], TC) == pytest.approx(8 * 62 / 60)
    # A Workload Kueue finished earlier (replaced) counts to its own end, not the job's.
    assert chip_hours.reserved_by_kueue([finished], TC + timedelta(hours=1)) == pytest.approx(8 * 62 / 60)
    # flex-start: quota reserved while the capacity is provisioned, not admitted yet: no chip held.
    provisioning = _workload(jobset, finished=False)
    provisioning["status"]["conditions"][1]["status"] = "False"
    assert chip_hours.reserved_by_kueue([provisioning], TC) is None
    # Requeued after an eviction: the quota given back, the admission cleared.
    requeued = _workload(jobset, finished=False)
    requeued["status"]["conditions"][0]["status"] = requeued["status"]["conditions"][1]["status"] = "False"
    del requeued["status"]["admission"]
    assert chip_hours.reserved_by_kueue([requeued], TC) is None
    odd = _workload(jobset, finished=True)
    odd["status"]["admission"]["podSetAssignments"][1]["resourceUsage"] = {chip_hours.TPU_RESOURCE: "8.5"}
    assert chip_hours.reserved_by_kueue([odd], TC) is None  # not a whole number of chips
    assert chip_hours.reserved_by_kueue([], TC) is None


def test_a_verdict_before_the_jobs_own_end_reads_no_reservation() -> None:
    """A workload failed by a deadline (queued too long, never scheduled) or judged before its
    controller's condition has no end of its own: nothing is charged from Kueue (its pods, if any,
    are still there to be read), whatever its Workload says."""
    jobset = {"metadata": {"name": "j", "uid": "u"}}
    waiting = WorkloadStatus(kind="JobSet", name="j", phase="failed", finished_at=None)
    assert with_reservation(waiting, [_workload(jobset, finished=False)]).reserved_chip_hours is None
    ended = replace(waiting, finished_at=TC)
    assert with_reservation(ended, [_workload(jobset, finished=False)]).reserved_chip_hours == pytest.approx(
        8 * 62 / 60
    )


def test_a_refused_workload_read_leaves_the_reservation_out_and_the_status_read_stands(
    env: dict[str, Any], training: tuple[StageService, Clock, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Role not yet re-applied (no list on Workloads) must not fail the read of a finished
    workload: the figure is a floor, and the pods' own stands."""
    service, clock, name = training

    def refused(selector: str) -> list[dict[str, Any]]:
        raise PermanentFailure("Kubernetes refused list Kueue Workloads (403 Forbidden)")

    monkeypatch.setattr(service.cluster, "_list_kueue_workloads", refused)
    _play(env["kube"], name, read_while_running=True, service=service, clock=clock)
    attempt = env["ledger"].get(RUN).attempt_record("train", 1)
    assert attempt.finished_at is not None and attempt.reserved_chip_hours is None
    assert _chip_hours(env, RUN) == pytest.approx(2 * 4 * 0.5)  # the running read's figure
