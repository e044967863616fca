"""Flex-start on the real control plane: Kueue's ProvisioningRequest admission check, with the test
playing GKE's cluster autoscaler.

The plane serves the ProvisioningRequest API from before Kueue starts, as GKE does, so the real
Kueue v0.17.1 runs its provisioning controller; this file applies ``infra/cluster/k8s/flex-start``
(a module fixture) and removes it afterwards. A flex-start train JobSet goes to ``flex-queue``;
Kueue reserves quota in ClusterQueue ``rlpipe-flex`` and creates a ProvisioningRequest. Nothing
acts on that request in a process-only cluster: the test writes the conditions GKE's autoscaler
would, and registers the flex-start nodes as GKE's scale-up would. Then the real Kueue, JobSet
controller, Job controller and scheduler do the rest, and the pipeline's classifier
(``ClusterClient.status``, as the pipeline's identity) reads the outcome.

Sources (Kueue at v0.17.1, the autoscaler ``apis`` module at the version Kueue's go.mod requires,
v0.0.0-20240830133931-adfbe7e45277, both read from Go's module cache):

* Condition types: ``Accepted``, ``Provisioned``, ``Failed`` (and ``BookingExpired``,
  ``CapacityRevoked``), ``provisioningrequest/autoscaling.x-k8s.io/v1/types.go:176-195``. Kueue
  reads only their type, status and message (``pkg/controller/admissionchecks/provisioning/
  provisioning.go:35-53``; the message at ``controller.go:547, 558, 592``): the reasons written
  here are the open-source autoscaler's (``cluster-autoscaler/provisioningrequest/conditions/
  conditions.go``: ``Accepted``, ``CapacityIsProvisioned``); GKE's ``queued-provisioning.gke.io``
  class writes its own, which no public page lists.
* The request: named ``<workload>-<check>-<attempt>`` (``provisioning.go:55-58``), for the pod sets
  that use a ``managedResources`` resource only (``controller.go:426-468``), each through a
  PodTemplate ``ppt-<request>-<pod set>`` (``provisioning.go:65-68``); event
  ``ProvisioningRequestCreated`` (``controller.go:323``).
* ``Provisioned=True``: the check turns Ready, with pod set updates that annotate the pods with the
  request (``controller.go:585-593, 629-655``).
* ``Failed=True``: while the attempt is within ``retryStrategy.backoffLimitCount`` the check goes
  to Retry with a backoff (``controller.go:544-554``). The workload controller waits the backoff
  out, quota still reserved (``pkg/controller/core/workload_controller.go:268-278, 396-401``),
  then evicts the Workload with reason ``AdmissionCheck``, "At least one admission check is
  false" (``:611``, ``:745-753``); the eviction resets the check to Pending, counting the retry
  (``pkg/workload/admissionchecks.go:89-110``), and the Workload is requeued at once with a new
  request. Past the limit the
  check is Rejected (``controller.go:555-559``): the Workload gets ``DeactivationTarget``, event
  ``AdmissionCheckRejected`` (``workload_controller.go:729-745``), then ``spec.active: false`` and
  an eviction with reason ``DeactivatedDueToAdmissionCheck`` (``workload_controller.go:389-394,
  461-503``), event ``EvictedDueToDeactivatedDueToAdmissionCheck`` (``pkg/workload/
  workload.go:1769-1773``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.core.failures import FailureClass
from rlpipe.core.timestamps import parse_rfc3339
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_slice
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets
from tests.harness.patience import ceiling, wait_until
from tests.harness.real_cluster import K8S_DIR, PARAMS, deploy_documents
from tests.local.test_simulator import NS, create, kube, render, simulate  # noqa: F401

STAGE_USER = PARAMS["STAGE_GSA"]
CHECK = "rlpipe-flex-prov"  # infra/cluster/k8s/flex-start/kueue-flex-start.yaml
CONFIG = "rlpipe-flex"
FLEX_POOL = "tpu-v6e-flex"
PROVISIONING_REQUESTS = "provisioningrequests.autoscaling.x-k8s.io"
WORKLOADS = "workloads.kueue.x-k8s.io"
# The pod annotation naming the request a pod consumes (autoscaler apis types.go:204-205).
CONSUMES = "autoscaling.x-k8s.io/consume-provisioning-request"
# The opt-in kustomization with its own params.env: one v6e-32 slice of TPU quota, as
# flex-start/params.env.example.
FLEX_START_DIR = K8S_DIR / "flex-start"
FLEX_START_PARAMS = {"FLEX_TPU_CHIPS": "32"}
# The Workload events of a rejected request, in order, as the real Kueue v0.17.1 wrote them (the
# terminal test below) and the double plays them.
REJECTION_EVENTS = [
    "QuotaReserved",
    "ProvisioningRequestCreated",
    "AdmissionCheckUpdated",
    "AdmissionCheckRejected",
    "EvictedDueToDeactivatedDueToAdmissionCheck",
]
FAILED_MESSAGE = "no capacity in the zone now"  # the request's Failed message, which Kueue copies
DEACTIVATED = f"The workload is deactivated due to Admission check(s): {CHECK}, were rejected"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def flex_start(real_cluster: ControlPlane) -> Iterator[ControlPlane]:
    """``kubectl apply -k infra/cluster/k8s/flex-start`` after the base, as docs/provisioning.md
    has an operator do, until Kueue's admission check and ClusterQueue are Active (the check is
    Active only when Kueue runs its provisioning controller); deleted afterwards, because the
    plane is shared with the worker's other test files, which must not find a second ClusterQueue
    in the cohort."""
    documents = deploy_documents(FLEX_START_DIR, FLEX_START_PARAMS)
    real_cluster.apply(documents)
    try:
        real_cluster.kubectl(
            "wait",
            "--for=condition=Active",
            f"admissionchecks.kueue.x-k8s.io/{CHECK}",
            "clusterqueues.kueue.x-k8s.io/rlpipe-flex",
            f"--timeout={ceiling(5):.0f}s",
        )
        yield real_cluster
    finally:
        real_cluster.kubectl(
            "delete",
            "--ignore-not-found",
            f"--timeout={ceiling(10):.0f}s",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(documents, sort_keys=False),
        )


@pytest.fixture(scope="module")
def cpu_nodes(real_cluster: ControlPlane) -> set[str]:
    """The cpu-np pool the Pathways head runs on (shared with the worker's other files, as they
    add the same nodes)."""
    return real_cluster.add_nodes(cpu_pool())


# ---- reading the real objects (as admin: the pipeline's Role reads no Workloads) -----------------


def _list(plane: ControlPlane, resource: str) -> list[Obj]:
    items: list[Obj] = json.loads(plane.kubectl("get", resource, "-n", NS, "-o", "json"))["items"]
    return items


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def _workload_of(plane: ControlPlane, jobset: str) -> Obj | None:
    (js,) = [j for j in _list(plane, "jobsets.jobset.x-k8s.io") if j["metadata"]["name"] == jobset]
    return next((w for w in _list(plane, WORKLOADS) if _owned_by(w, js["metadata"]["uid"])), None)


def _requests_of(plane: ControlPlane, workload: Obj) -> list[Obj]:
    uid = workload["metadata"]["uid"]
    return sorted(
        (r for r in _list(plane, PROVISIONING_REQUESTS) if _owned_by(r, uid)),
        key=lambda r: r["metadata"]["name"],
    )


def _condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _check(workload: Obj) -> Obj:
    """The flex check's state on the Workload; empty while the Workload holds no quota (Kueue
    lists a flavor's checks only for an admission on that flavor)."""
    checks = [c for c in (workload.get("status") or {}).get("admissionChecks") or [] if c["name"] == CHECK]
    return checks[0] if checks else {}


def _events(plane: ControlPlane, workload: Obj) -> list[tuple[str, str]]:
    name = workload["metadata"]["name"]
    return [
        (e["reason"], e.get("message", ""))
        for e in sorted(_list(plane, "events"), key=lambda e: e["metadata"]["creationTimestamp"])
        if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == "Workload"
    ]


def _events_until(
    plane: ControlPlane, workload: Obj, wanted: Callable[[list[tuple[str, str]]], bool], what: str
) -> list[tuple[str, str]]:
    """The Workload's events once ``wanted`` holds: Kueue records them after the change they tell."""

    def found() -> list[tuple[str, str]] | None:
        events = _events(plane, workload)
        return events if wanted(events) else None

    return wait_until(found, 5, what=what)


# ---- playing GKE's cluster autoscaler ------------------------------------------------------------


def _play_autoscaler(plane: ControlPlane, request: Obj, *conditions: tuple[str, str, str]) -> None:
    """Set ``(type, reason, message)`` conditions True on the request, through its status
    subresource, as the autoscaler does (``metav1.Condition``s in ``status.conditions``, a map
    keyed by type: types.go:150-162)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    current = {c["type"]: c for c in (request.get("status") or {}).get("conditions") or []}
    for kind, reason, message in conditions:
        current[kind] = {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": request["metadata"].get("generation", 1),
        }
    plane.kubectl(
        "patch",
        PROVISIONING_REQUESTS,
        request["metadata"]["name"],
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": list(current.values())}}),
    )


@contextlib.contextmanager
def _retry_strategy(plane: ControlPlane, **fields: int) -> Iterator[None]:
    """The deployed ``retryStrategy`` (3 retries, backoff 60 s, 120 s, 240 s) changed for one test,
    so a test need not wait minutes for a backoff or three failures; restored after."""
    resource = f"provisioningrequestconfigs.kueue.x-k8s.io/{CONFIG}"
    deployed = json.loads(plane.kubectl("get", resource, "-o", "json"))["spec"]["retryStrategy"]

    def patch(strategy: dict[str, int]) -> None:
        plane.kubectl(
            "patch", resource, "--type=merge", "-p", json.dumps({"spec": {"retryStrategy": strategy}})
        )

    patch(fields)
    try:
        yield
    finally:
        patch({k: deployed[k] for k in fields})


# ---- a flex-start train JobSet --------------------------------------------------------------------


def _flex_train(buckets: Buckets, run_id: str) -> Obj:
    return render(
        buckets, "train", run_id=run_id, tpu={"provisioning": "flex-start"}, training={"num_batches": 10}
    )


@contextlib.contextmanager
def _launched(plane: ControlPlane, train: Obj) -> Iterator[ClusterClient]:
    """The pipeline's identity creates the JobSet; on the way out it deletes it and waits until
    Kueue's Workload and its ProvisioningRequests are gone with it (garbage collection)."""
    client = ClusterClient(plane.api_client(STAGE_USER), NS)
    client.apply(train)
    name = train["metadata"]["name"]
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.delete("JobSet", name)

        def collected() -> bool:
            left = [
                o["metadata"]["name"] for o in _list(plane, WORKLOADS) + _list(plane, PROVISIONING_REQUESTS)
            ]
            pods = plane.kubectl(
                "get", "pods", "-n", NS, "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "name"
            )
            return not pods.strip() and not [n for n in left if f"-{name}-" in n]

        wait_until(collected, 10, what=f"{name}'s Workload, requests and pods collected")


def _first_request(plane: ControlPlane, name: str) -> tuple[Obj, Obj]:
    """Kueue's Workload for the JobSet once it lists the flex check's state and has created its
    ProvisioningRequest, and the request. Kueue's two controllers write these separately: the
    request can exist before the Workload's status lists the check, so both are waited for (the
    Workload is read again after the requests, never a copy from before them)."""

    def found() -> tuple[Obj, Obj] | None:
        first = _workload_of(plane, name)
        requests = _requests_of(plane, first) if first else []
        workload = _workload_of(plane, name) if requests else None
        return (workload, requests[0]) if workload and requests and _check(workload).get("state") else None

    return wait_until(found, 10, what=f"Kueue's ProvisioningRequest for {name}")


def _workload_until(plane: ControlPlane, name: str, ok: Callable[[Obj], bool], what: str) -> Obj:
    def found() -> Obj | None:
        workload = _workload_of(plane, name)
        return workload if workload and ok(workload) else None

    return wait_until(found, 10, what=what)


# ---- the tests ------------------------------------------------------------------------------------


def test_a_provisioned_request_admits_the_flex_start_slice_onto_the_queued_nodes(
    flex_start: ControlPlane, cpu_nodes: set[str], buckets: Buckets
) -> None:
    """Our flex-start manifests on the real Kueue: quota reserved, a ProvisioningRequest for the TPU
    workers only, and once the autoscaler has provisioned the slice the check turns Ready, the
    JobSet is admitted and the real scheduler binds the workers to the queued nodes."""
    plane = flex_start
    train = _flex_train(buckets, "rflexok")
    name = train["metadata"]["name"]
    slice_nodes = tpu_slice("4x8", pool=FLEX_POOL, queued=True)
    flex_nodes = {node["metadata"]["name"] for node, _ in slice_nodes}
    try:
        with (
            PodPlayer(plane.kubeconfig(), cpu_nodes | flex_nodes, lambda pod: Outcome(exit_code=None)),
            _launched(plane, train) as client,
        ):
            workload, request = _first_request(plane, name)
            assert _condition(workload, "QuotaReserved")["status"] == "True"
            assert (_condition(workload, "Admitted") or {}).get("status") != "True"
            assert _check(workload)["state"] == "Pending"
            assert request["metadata"]["name"] == f"{workload['metadata']['name']}-{CHECK}-1"
            assert request["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
            # managedResources [google.com/tpu]: the worker pod set only, never the Pathways head.
            assert [(p["podTemplateRef"]["name"], p["count"]) for p in request["spec"]["podSets"]] == [
                (f"ppt-{request['metadata']['name']}-worker", 8)
            ]
            assert client.status(name, kind="JobSet").phase == "queued"

            # The autoscaler: the flex-start pool scales up for the whole slice, then Provisioned.
            plane.add_nodes(slice_nodes)
            _play_autoscaler(
                plane,
                request,
                ("Accepted", "Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler"),
                ("Provisioned", "CapacityIsProvisioned", "Capacity is found in the cluster"),
            )
            workload = _workload_until(
                plane,
                name,
                lambda w: (_condition(w, "Admitted") or {}).get("status") == "True",
                "the Workload admitted",
            )
            assert _check(workload)["state"] == "Ready"

            def all_running() -> list[Obj] | None:
                pods = [
                    p
                    for p in _list(plane, "pods")
                    if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == name
                ]
                running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
                return pods if len(pods) == 9 and len(running) == 9 else None

            pods = wait_until(all_running, 15, what="the head and 8 workers running")
            workers = [
                p
                for p in pods
                if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "worker"
            ]
            assert {p["spec"]["nodeName"] for p in workers} == flex_nodes
            for worker in workers:
                # Kueue's flavor labels and the request's annotation, added on admission.
                assert worker["spec"]["nodeSelector"]["cloud.google.com/gke-queued"] == "true"
                assert worker["metadata"]["annotations"][CONSUMES] == request["metadata"]["name"]
            assert {p["spec"]["nodeName"] for p in pods if p not in workers} <= cpu_nodes
            status = client.status(name, kind="JobSet")
            assert (status.phase, status.failure_class) == ("running", None), status.reason
    finally:
        plane.kubectl("delete", "nodes", *sorted(flex_nodes), "--ignore-not-found")


def _fail(plane: ControlPlane, request: Obj) -> None:
    """The autoscaler gives up on the request (GKE: no capacity for the slice now)."""
    _play_autoscaler(plane, request, ("Failed", "ResourcePoolExhausted", FAILED_MESSAGE))


def test_a_failed_request_with_retries_left_keeps_its_quota_through_the_backoff_and_stays_queued(
    flex_start: ControlPlane, buckets: Buckets
) -> None:
    """The deployed retryStrategy: the first ``Failed`` turns the check to Retry with a 60 s
    backoff. Kueue v0.17.1 does not evict yet: the workload controller first copies the check's
    retry time into ``requeueState.requeueAt`` (core/workload_controller.go:268-278,
    pkg/workload/admissionchecks.go:231-250), then returns early until that time
    (workload_controller.go:396-401), before it reaches the check-based eviction (:611). So the
    Workload holds its quota (TPU, and the head's cpu-np quota borrowed from the cohort) through
    the backoff. The classifier says ``queued``: a capacity wait, not a failure (docs/design.md#failure-classes-and-retry-budgets). The
    double has no such state: its ``provision-fail`` plays the terminal rejection only."""
    plane = flex_start
    train = _flex_train(buckets, "rflexretry")
    name = train["metadata"]["name"]
    with _launched(plane, train) as client:
        _, request = _first_request(plane, name)
        _fail(plane, request)
        workload = _workload_until(
            plane,
            name,
            lambda w: (
                _check(w).get("state") == "Retry" and (w["status"].get("requeueState") or {}).get("requeueAt")
            ),
            "the check in Retry with a requeue time",
        )
        check = _check(workload)
        assert check["message"] == f"Retrying after failure: {FAILED_MESSAGE}"
        assert check["requeueAfterSeconds"] == 60
        requeue_at = parse_rfc3339(workload["status"]["requeueState"]["requeueAt"])
        assert requeue_at - parse_rfc3339(check["lastTransitionTime"]) == datetime.timedelta(seconds=60)
        assert _condition(workload, "QuotaReserved")["status"] == "True"  # held through the backoff
        assert _condition(workload, "Evicted") is None
        retry = (
            "AdmissionCheckUpdated",
            f"Admission check {CHECK} updated state from Pending to Retry with message: "
            f"Retrying after failure: {FAILED_MESSAGE}",
        )
        _events_until(plane, workload, lambda events: retry in events, "the check's Retry event")
        status = client.status(name, kind="JobSet")
        assert (status.phase, status.failure_class, status.admitted) == ("queued", None, False), status.reason


def test_after_the_backoff_kueue_evicts_requeues_and_makes_a_new_request_while_the_run_stays_queued(
    flex_start: ControlPlane, buckets: Buckets
) -> None:
    """The rest of a retry, with the backoff base cut to 1 s: once ``requeueAt`` has passed Kueue
    evicts the Workload (reason AdmissionCheck, workload_controller.go:745-753), which resets the
    check to Pending and counts the retry (pkg/workload/admissionchecks.go:89-110); the quota is
    released and, the backoff being over, reserved again at once, and the provisioning
    controller makes request attempt 2 (controller.go:252-267). Every verdict the pipeline reads
    meanwhile is ``queued``."""
    plane = flex_start
    train = _flex_train(buckets, "rflexagain")
    name = train["metadata"]["name"]
    verdicts: list[WorkloadStatus] = []
    with _retry_strategy(plane, backoffBaseSeconds=1), _launched(plane, train) as client:
        workload, request = _first_request(plane, name)
        _fail(plane, request)

        second = f"{workload['metadata']['name']}-{CHECK}-2"

        def second_request() -> Obj | None:
            verdicts.append(client.status(name, kind="JobSet"))
            requests = _requests_of(plane, workload)
            return requests[0] if [r["metadata"]["name"] for r in requests] == [second] else None

        # Attempt 1 is deleted as attempt 2 is made: Kueue keeps only a check's latest request
        # (controller.go:164-168, 208-228).
        again = wait_until(
            second_request, 10, what="Kueue's second ProvisioningRequest in place of the first"
        )
        assert not (again.get("status") or {}).get("conditions")
        workload = _workload_until(
            plane,
            name,
            lambda w: bool(_check(w)) and (_condition(w, "Evicted") or {}).get("status") == "False",
            "the Workload holding quota again, its check back",
        )
        check = _check(workload)
        assert (check["state"], check.get("retryCount"), check.get("requeueAfterSeconds")) == (
            "Pending",
            1,
            1,
        )
        assert _condition(workload, "QuotaReserved")["status"] == "True"  # reserved again
        evicted, requeued = _condition(workload, "Evicted"), _condition(workload, "Requeued")
        assert (evicted["status"], evicted["message"]) == (
            "False",
            "Previously: At least one admission check is false",
        )
        assert (requeued["status"], requeued["reason"]) == ("True", "BackoffFinished")
        events = _events_until(
            plane,
            workload,
            lambda events: [r for r, _ in events].count("ProvisioningRequestCreated") == 2,
            "the second request's event",
        )
        assert ("EvictedDueToAdmissionCheck", "At least one admission check is false") in events
        verdicts.append(client.status(name, kind="JobSet"))
    assert {(v.phase, v.failure_class) for v in verdicts} == {("queued", None)}, [v.reason for v in verdicts]


def _on_double(kube: KubeApiServer, simulate: Callable[..., ClusterSimulator], train: Obj) -> WorkloadStatus:
    simulate("train:provision-fail")
    create(kube, train)
    client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)

    def verdict() -> WorkloadStatus | None:
        status = client.status(train["metadata"]["name"], kind="JobSet")
        return status if status.phase in ("succeeded", "failed") else None

    status = wait_until(verdict, 10, what="the double's verdict")
    # The verdict comes with the eviction; the quota's release (Requeued False) is written next.
    wait_until(
        lambda: all(_condition(w, "Requeued") for w in kube.list("workloads", namespace=NS)),
        5,
        what="the double's Workload released",
    )
    return status


def test_a_request_failed_past_its_retries_deactivates_the_run_as_capacity_on_both_clusters(
    flex_start: ControlPlane, buckets: Buckets, kube: KubeApiServer, simulate: Callable[..., ClusterSimulator]
) -> None:
    """Past ``backoffLimitCount`` the check is Rejected and Kueue deactivates the Workload; it is
    never requeued. Both clusters' verdict: ``failed``, ``capacity`` (the pipeline's capacity
    budget pays, and the next attempt makes a new request)."""
    plane = flex_start
    on_double = _on_double(kube, simulate, _flex_train(buckets, "rflexdbl"))

    train = _flex_train(buckets, "rflexrej")
    name = train["metadata"]["name"]
    with _retry_strategy(plane, backoffLimitCount=0), _launched(plane, train) as client:
        workload, request = _first_request(plane, name)
        _fail(plane, request)
        workload = _workload_until(
            plane,
            name,
            lambda w: (
                (_condition(w, "Evicted") or {}).get("reason") == "DeactivatedDueToAdmissionCheck"
                and (_condition(w, "QuotaReserved") or {}).get("status") == "False"
            ),
            "the Workload deactivated for its rejected check, its quota released",
        )
        assert workload["spec"]["active"] is False
        assert _condition(workload, "Evicted")["message"] == DEACTIVATED
        # Its quota is released and it is not requeued; the check's Rejected state went with the
        # quota (the Workload lists no admission check any more), so the events tell it.
        assert _condition(workload, "QuotaReserved")["status"] == "False"
        assert (_condition(workload, "Requeued")["status"], _condition(workload, "Requeued")["reason"]) == (
            "False",
            "DeactivatedDueToAdmissionCheck",
        )
        failed = FAILED_MESSAGE
        events = _events_until(
            plane, workload, lambda events: len(events) == len(REJECTION_EVENTS), "the rejection's events"
        )
        assert events[1:] == [
            ("ProvisioningRequestCreated", f'Created ProvisioningRequest: "{request["metadata"]["name"]}"'),
            (
                "AdmissionCheckUpdated",
                f"Admission check {CHECK} updated state from Pending to Rejected with message: {failed}",
            ),
            (
                "AdmissionCheckRejected",
                f"Deactivating workload because AdmissionCheck for {CHECK} was Rejected: {failed}",
            ),
            ("EvictedDueToDeactivatedDueToAdmissionCheck", DEACTIVATED),
        ], events
        assert [reason for reason, _ in events] == REJECTION_EVENTS
        assert len(_requests_of(plane, workload)) == 1  # no new request: not retried

        on_real = client.status(name, kind="JobSet")
    assert (on_real.phase, on_real.failure_class) == ("failed", FailureClass.CAPACITY), on_real.reason
    assert (on_real.phase, on_real.failure_class) == (on_double.phase, on_double.failure_class), (
        f"double: {on_double.reason}\nreal: {on_real.reason}"
    )
    # The double plays the same Workload events in the same order, and so gives the same reason.
    double_events = [
        e["reason"]
        for e in sorted(kube.list("events", namespace=NS), key=lambda e: e["metadata"]["creationTimestamp"])
        if e["involvedObject"].get("kind") == "Workload"
    ]
    assert double_events == [reason for reason, _ in events]
    assert on_double.reason.replace("rflexdbl", "rflexrej") == on_real.reason


def test_the_double_plays_a_rejected_request_as_the_real_kueue_did(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    """The double alone (no real plane needed): ``provision-fail`` leaves the Workload and its
    events as the real Kueue left them in the test above, and the verdict is ``capacity``."""
    train = _flex_train(buckets, "rflexsim")
    on_double = _on_double(kube, simulate, train)
    (workload,) = kube.list("workloads", namespace=NS)
    assert workload["spec"]["active"] is False
    conditions = {
        c["type"]: (c["status"], c["reason"], c["message"]) for c in workload["status"]["conditions"]
    }
    assert conditions == {
        "QuotaReserved": ("False", "Pending", DEACTIVATED),
        "Evicted": ("True", "DeactivatedDueToAdmissionCheck", DEACTIVATED),
        "Requeued": ("False", "DeactivatedDueToAdmissionCheck", DEACTIVATED),
    }
    events = [
        (e["reason"], e["message"])
        for e in kube.list("events", namespace=NS)
        if e["involvedObject"].get("name") == workload["metadata"]["name"]
    ]
    assert [reason for reason, _ in events] == REJECTION_EVENTS
    assert events[-1] == ("EvictedDueToDeactivatedDueToAdmissionCheck", DEACTIVATED)
    assert (on_double.phase, on_double.failure_class) == ("failed", FailureClass.CAPACITY)
    assert f"evicted by Kueue (DeactivatedDueToAdmissionCheck: {DEACTIVATED})" in on_double.reason
