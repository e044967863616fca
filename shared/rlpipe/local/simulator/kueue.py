"""Kueue, as it treats one queued Job or JobSet: its Workload object, admission and eviction.

Sources: Kueue v0.14.8 (commit ``2f2a452481b23fd664e4133ad51de1caa1d49c3a``; the same reasons and
messages in v0.17.8, the release the cluster blueprint installs). Kueue never writes a condition on
the Job or JobSet: Evicted, Preempted, QuotaReserved, Admitted and Requeued are conditions of the
Workload, and what the job sees is ``spec.suspend`` and events.

* The Workload is named ``<kind>-<job name>-<5 hex>`` (jobframework/workload_names.go:31, 44-50;
  the hash input is approximated here), labelled ``kueue.x-k8s.io/job-uid`` (constants.go:39) and
  controller-owned by the job (jobframework/reconciler.go:1245), so it goes with the job.
* Admission: ``QuotaReserved`` ("Quota reserved in ClusterQueue …", workload.go:722-731) and
  ``Admitted`` ("The workload is admitted", admissionchecks.go:44-47) conditions, the Workload events
  ``QuotaReserved`` and ``Admitted`` (scheduler/scheduler.go:815, 829), and ``Started`` "Admitted by
  clusterQueue <cq>" on the job (jobframework/reconciler.go:1104, 1135).
* Eviction: ``Evicted`` (reason and message below; workload.go:820-829), plus ``Preempted`` (reason
  InClusterQueue, workload.go:798-806) for a preemption; the Workload events ``Preempted``
  (preemption/preemption.go:190) and ``EvictedDueTo<reason>`` (workload.go:1367-1371, 1430); then
  the job is stopped (``spec.suspend: true`` and the job event ``Stopped`` with the Evicted message,
  jobframework/reconciler.go:539-565, 1143-1184), and once it is no longer active ``Requeued``
  (True only for Preempted and NodeFailures, reconciler.go:550), ``QuotaReserved`` False "Pending"
  (L552) and ``Admitted`` False "NoReservation" (admissionchecks.go:56-59).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Protocol

from rlpipe.local.simulator import kube_objects as ko
from rlpipe.local.simulator.env import SimEnv

Obj = dict[str, Any]


class Queued(Protocol):
    """What Kueue needs of a simulated workload (the workload module imports this one)."""

    env: SimEnv
    resource: str
    name: str
    namespace: str
    uid: str


API_VERSION = "kueue.x-k8s.io/v1beta2"
# The deploy's ClusterQueue and flavors (infra/cluster/k8s/kueue.yaml), as the real Kueue names them
# in its messages ("Admitted by clusterQueue rlpipe", seen on the real plane: docs/real-cluster.md).
CLUSTER_QUEUE = "rlpipe"
TPU_FLAVOR = "rlpipe-tpu-v6e-slice"
CPU_FLAVOR = "rlpipe-cpu-np"
TPU = "google.com/tpu"
# flex-start's ClusterQueue and admission check (infra/cluster/k8s/flex-start/kueue-flex-start.yaml).
FLEX_CLUSTER_QUEUE = "rlpipe-flex"
FLEX_CHECK = "rlpipe-flex-prov"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
COMPONENT = "kueue-admission"  # the event source is approximated
# evict@<step>:<why> → (Evicted reason, message template, Preempted reason or None, Requeued).
# Messages: preemption.go:163 (with HumanReadablePreemptionReasons L141-147), workload_controller.go
# 703 (PodsReady), 588 (LocalQueue), 629 (ClusterQueue), 313-318 and 724 (deactivated after too
# many requeues: reason DeactivatedDueToRequeuingLimitExceeded, workload.go:1306-1307), scheduler.go
# 583 (node failures).
EVICTIONS: dict[str, tuple[str, str, str | None, bool]] = {
    "preempted": (
        "Preempted",
        "Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to prioritization in "
        "the ClusterQueue",
        "InClusterQueue",
        True,
    ),
    "pods-ready-timeout": (
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout {namespace}/{name}",
        None,
        False,
    ),
    "node-failures": (
        "NodeFailures",
        "Workload was evicted as there was no replacement for unhealthy node(s): {node}",
        None,
        True,
    ),
    "deactivated": (
        "DeactivatedDueToRequeuingLimitExceeded",
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
        None,
        False,
    ),
    # flex-start: the ProvisioningRequest failed past its retries, so the admission check is
    # Rejected and Kueue deactivates the workload; not requeued. Message as Kueue v0.17.1 words it
    # (core/workload_controller.go:463-468 around :737), seen on the real plane
    # (tests/cluster/real_plane/test_real_flex_start.py).
    "provisioning-rejected": (
        "DeactivatedDueToAdmissionCheck",
        "The workload is deactivated due to Admission check(s): {check}, were rejected",
        None,
        False,
    ),
    # A team takes its own chips back from a team of the cohort that borrowed them while they
    # were idle (docs/teams-local.md). Kueue v0.17.1: the target's reason InCohortReclamation
    # (pkg/scheduler/preemption/preemption.go:405; classical/hierarchical_preemption.go:48-58), in
    # words "reclamation within the cohort" (preemption.go:156-162); the Evicted reason stays
    # Preempted (WorkloadEvictedByPreemption, preemption.go:226-230) and the job is requeued as for
    # any preemption. v0.17.1 appends the preemptor's and the preemptee's ClusterQueue paths to the
    # message (preemption.go:171-185); the double plays one ClusterQueue and no preemptor, so it
    # ends the message where the older releases did, as the "preempted" entry above does.
    "cohort-reclamation": (
        "Preempted",
        "Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to reclamation within "
        "the cohort",
        "InCohortReclamation",
        True,
    ),
    "local-queue-stopped": ("LocalQueueStopped", "The LocalQueue is stopped", None, False),
    "cluster-queue-stopped": ("ClusterQueueStopped", "The ClusterQueue is stopped", None, False),
}


class KueueWorkload:
    """The Workload Kueue keeps for one job, and what Kueue writes to it."""

    def __init__(self, workload: Queued) -> None:
        self.sim = workload
        self.env = workload.env
        kind = "JobSet" if workload.resource == "jobsets" else "Job"
        digest = hashlib.sha1(f"{kind}/{workload.name}/{workload.uid}".encode()).hexdigest()[:5]
        self.name = f"{kind.lower()}-{workload.name}-{digest}"
        self.obj: Obj | None = None

    def create(self, job: Obj, pod_sets: list[tuple[str, int]]) -> None:
        meta = job["metadata"]
        body: Obj = {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": self.name,
                "namespace": self.sim.namespace,
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "annotations": {ko.SIMULATED_ANNOTATION: ko.SIMULATED_NOTE},
                "ownerReferences": [ko.owner_reference(job)],
            },
            "spec": {
                "active": True,
                "queueName": (meta.get("labels") or {}).get(ko.QUEUE_LABEL, ""),
                "podSets": [{"name": n, "count": c} for n, c in pod_sets],
            },
            "status": {"conditions": []},
        }
        self.obj = self.env.kube.create("workloads", body, namespace=self.sim.namespace)
        self.sim.env.emit(
            job, "CreatedWorkload", f"Created Workload: {self.sim.namespace}/{self.name}", component=COMPONENT
        )

    def _conditions(self, *conditions: Obj, active: bool | None = None, admission: Obj | None = None) -> None:
        """``admission``: the reservation made ({} gives it back: Kueue leaves the field out)."""
        if self.obj is None:
            return

        def mutate(wl: Obj) -> None:
            status = wl.setdefault("status", {})
            for cond in conditions:
                status["conditions"] = ko.upsert_condition(status.get("conditions"), cond)
            if active is not None:
                wl["spec"]["active"] = active
            if admission:
                status["admission"] = admission
            elif admission is not None:
                status.pop("admission", None)

        self.obj = self.env.kube.modify("workloads", self.name, mutate, namespace=self.sim.namespace)

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
        if self.obj is not None:
            self.env.emit(self.obj, reason, message, warning=warning, component=COMPONENT)

    def finished(self, job: Obj) -> None:
        """``Finished``, Succeeded or Failed, the admission kept (jobframework/reconciler.go:452-463)."""
        for c in (job.get("status") or {}).get("conditions") or []:
            if c.get("status") == "True" and c.get("type") in ("Complete", "Completed", "Failed"):
                reason = "Failed" if c["type"] == "Failed" else "Succeeded"
                self._conditions(
                    ko.meta_condition("Finished", True, self.env.now(), reason, c.get("message", ""))
                )
                return

    def admitted(self, job: Obj) -> None:
        """With the admission: per pod set its flavors, its total ``resourceUsage`` (counts only:
        CPU and chips) and its count (Kueue v0.17.8 apis/kueue/v1beta2 ``PodSetAssignment``)."""
        now = self.env.now()
        assigned = [_assignment(*pod_set) for pod_set in _pod_templates(job)]
        self._conditions(
            ko.meta_condition(
                "QuotaReserved", True, now, "QuotaReserved", f"Quota reserved in ClusterQueue {CLUSTER_QUEUE}"
            ),
            ko.meta_condition("Admitted", True, now, "Admitted", "The workload is admitted"),
            admission={"clusterQueue": CLUSTER_QUEUE, "podSetAssignments": assigned},
        )
        self._event(
            "QuotaReserved", f"Quota reserved in ClusterQueue {CLUSTER_QUEUE}, wait time since queued was 30s"
        )
        self._event(
            "Admitted", f"Admitted by ClusterQueue {CLUSTER_QUEUE}, wait time since reservation was 0s"
        )

    def evict(self, why: str, *, node: str = "") -> tuple[str, str]:
        """Kueue evicts: the Workload's conditions and events; returns (reason, message) for the
        job's ``Stopped`` event. The caller stops the job, then calls :meth:`requeued`."""
        reason, template, preempted_reason, _ = EVICTIONS[why]
        message = template.format(
            uid=self.env.with_rng(_uid),
            job_uid=self.env.with_rng(_uid),
            namespace=self.sim.namespace,
            name=self.name,
            node=node or "?",
            check=FLEX_CHECK,
        )
        now = self.env.now()
        conditions = [ko.meta_condition("Evicted", True, now, reason, message)]
        if preempted_reason:
            conditions.append(ko.meta_condition("Preempted", True, now, preempted_reason, message))
            self._event("Preempted", message)
        self._conditions(*conditions, active=False if reason.startswith("Deactivated") else None)
        self._event(f"EvictedDueTo{reason}", message)
        return reason, message

    def provisioning_rejected(self, failed: str) -> tuple[str, str]:
        """flex-start's ProvisioningRequest ``Failed`` past its retries, as the real Kueue v0.17.1
        plays it (tests/cluster/real_plane/test_real_flex_start.py): quota reserved in the flex ClusterQueue, the
        request created, the check Rejected with the request's ``Failed`` message
        (provisioning/controller.go:323, 555-559, 605-622), the Workload deactivated
        (core/workload_controller.go:729-745, 389-394, 461-503; event
        ``EvictedDueToDeactivatedDueToAdmissionCheck``, workload.go:1769-1773), then its quota
        released without a requeue (jobframework/reconciler.go:586-597). Returns the eviction's
        (reason, message)."""
        now = self.env.now()
        self._conditions(
            ko.meta_condition(
                "QuotaReserved",
                True,
                now,
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {FLEX_CLUSTER_QUEUE}",
            )
        )
        self._event(
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {FLEX_CLUSTER_QUEUE}, wait time since queued was 0s",
        )
        self._event(
            "ProvisioningRequestCreated", f'Created ProvisioningRequest: "{self.name}-{FLEX_CHECK}-1"'
        )
        self._event(
            "AdmissionCheckUpdated",
            f"Admission check {FLEX_CHECK} updated state from Pending to Rejected with message: {failed}",
        )
        self._event(
            "AdmissionCheckRejected",
            f"Deactivating workload because AdmissionCheck for {FLEX_CHECK} was Rejected: {failed}",
            warning=True,
        )
        reason, message = self.evict("provisioning-rejected")
        self._conditions(
            ko.meta_condition("QuotaReserved", False, now, "Pending", message),
            ko.meta_condition("Requeued", False, now, reason, message),
        )
        return reason, message

    def pending(self, message: str) -> None:
        """No flavor has the unused quota: the Workload's ``QuotaReserved`` is False ``Pending``
        with the flavor assigner's message, repeated as the Workload event ``Pending`` (Kueue
        scheduler.go requeueAndUpdate; the same text on the real plane, docs/real-cluster.md)."""
        self._conditions(ko.meta_condition("QuotaReserved", False, self.env.now(), "Pending", message))
        self._event("Pending", message)

    def requeued(self, why: str, message: str) -> None:
        """The job is no longer active: the quota goes back and the Workload waits in its queue."""
        reason, _, _, requeue = EVICTIONS[why]
        now = self.env.now()
        self._conditions(
            ko.meta_condition("Requeued", requeue, now, reason, message),
            ko.meta_condition("QuotaReserved", False, now, "Pending", message),
            ko.meta_condition("Admitted", False, now, "NoReservation", "The workload has no reservation"),
            admission={},
        )


def _uid(rng: Any) -> str:
    hexes = "".join(rng.choice("0123456789abcdef") for _ in range(32))
    return f"{hexes[:8]}-{hexes[8:12]}-{hexes[12:16]}-{hexes[16:20]}-{hexes[20:]}"


def insufficient_quota(job: Obj) -> str:
    """The flavor assigner's message when the queue's quota is all in use: the first pod set that
    asks for TPUs (else the first), short of its whole request. The real message goes on to list
    every flavor it tried (the Spot flavor's untolerated taint, for a reservation workload); this
    names the first, which is the one a reservation or on-demand workload is given."""
    pod_sets = _pod_templates(job)
    tpu_sets = [(name, n, requests) for name, n, requests in pod_sets if TPU in requests]
    name, count, requests = (tpu_sets or pod_sets)[0]
    resource, flavor = (TPU, TPU_FLAVOR) if tpu_sets else ("cpu", CPU_FLAVOR)
    needed = _quantity(requests.get(resource, "0")) * count
    return (
        f"couldn't assign flavors to pod set {name}: insufficient unused quota for {resource} "
        f"in flavor {flavor}, {needed:g} more needed"
    )


def _pod_templates(job: Obj) -> list[tuple[str, int, dict[str, str]]]:
    """(pod set name, pod count, the main container's requests) as Kueue's Workload lists them."""
    spec = job.get("spec") or {}
    if job.get("kind") == "JobSet":
        out = []
        for rjob in spec.get("replicatedJobs") or []:
            jspec = (rjob.get("template") or {}).get("spec") or {}
            count = int(rjob.get("replicas", 1)) * int(jspec.get("parallelism") or 1)
            out.append((rjob["name"], count, _requests(jspec)))
        return out
    return [("main", int(spec.get("parallelism") or 1), _requests(spec))]


def _requests(job_spec: Obj) -> dict[str, str]:
    """The main container's requests; a resource given only as a limit is requested at the limit
    (the API server's defaulting, which is how a TPU container states its chips)."""
    containers = ((job_spec.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    resources = containers[0].get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def _assignment(name: str, count: int, requests: dict[str, str]) -> Obj:
    usage = {r: f"{_quantity(q) * count:g}" for r, q in requests.items() if re.fullmatch(r"[\d.]+m?", str(q))}
    flavor = TPU_FLAVOR if TPU in usage else CPU_FLAVOR
    return {"name": name, "flavors": dict.fromkeys(usage, flavor), "resourceUsage": usage, "count": count}


def _quantity(text: str) -> float:
    """A CPU or device count (``32``, ``500m``); memory is never the resource named here."""
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
