"""Kueue evictions as Kueue really reports them, classified by ``rlpipe.cluster.status.summarize``.

Every document below has the shape the controllers write; the source of each shape is cited where
it is built. Pinned revisions (the same strings in Kueue v0.17.8, which the blueprint installs):

* Kueue v0.14.8 = ``2f2a452481b23fd664e4133ad51de1caa1d49c3a``
* JobSet v0.10.1 = ``da72d32bb0060354aa04b1a5868f3b363b088446``
* k8s.io/api v0.34.10 = ``06d3e85b84ef86973ad19a2d7976995bd3908226``

What Kueue does on an eviction (pkg/workload/workload.go ``Evict`` L1289, ``reportEvictedWorkload``
L1354-1372; pkg/controller/jobframework/reconciler.go L539-565 and ``stopJob`` L1143-1184): it sets
``Evicted`` (and, for a preemption, ``Preempted``) on its **Workload**, emits ``EvictedDueTo<reason>``
(and ``Preempted``) on the Workload, sets ``spec.suspend: true`` on the JobSet and emits ``Stopped``
on it with the Evicted message. No ``Evicted`` or ``Preempted`` condition is ever written on a Job or
JobSet, and there is no plain ``Evicted`` event.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.cluster import ClusterClient
from rlpipe.cluster.status import summarize
from rlpipe.core.failures import FailureClass
from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.request import validate_request
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets, minimal_request
from tests.local.test_simulator import (  # noqa: F401
    capture,
    create,
    events_for,
    kube,
    pods_of,
    program_args,
    seed,
    simulate,
)
from tests.local.test_simulator import render as render_for

NS = "rlpipe"
NOW = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)
DEADLINE = 600.0  # timeouts.queued of the request: 10 minutes
REQ = validate_request(minimal_request())
Obj = dict[str, Any]


def ts(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def jobset(*, suspended_at: datetime | None, created: datetime) -> Obj:
    """The rendered training JobSet as the API server returns it, after hours of running."""
    js = copy.deepcopy(render(REQ, "train", 1, RenderContext(run_id="r1", bucket="b", namespace=NS)))
    js["metadata"].update(uid="0b7c9a5e-js", creationTimestamp=ts(created))
    conditions: list[Obj] = [
        # jobset_controller.go: StartupPolicyCompleted once the head is up (InOrder startup).
        {
            "type": "StartupPolicyCompleted",
            "status": "True",
            "reason": "InOrderStartupPolicyCompleted",
            "message": "in order startup policy has completed",
            "lastTransitionTime": ts(created + timedelta(minutes=5)),
        }
    ]
    if suspended_at is not None:
        # Kueue's stopJob for a JobSet (no custom Stop): spec.suspend = true (jobs/jobset/
        # jobset_controller.go:102-103; reconciler.go:1174-1184); the JobSet controller then writes
        # Suspended=True "SuspendedJobs"/"jobset is suspended" (JobSet jobset_controller.go:1036-1046),
        # its transition time the suspension's (updateCondition L961-1001).
        js["spec"]["suspend"] = True
        conditions.append(
            {
                "type": "Suspended",
                "status": "True",
                "reason": "SuspendedJobs",
                "message": "jobset is suspended",
                "lastTransitionTime": ts(suspended_at),
            }
        )
    js["status"] = {"conditions": conditions, "restarts": 0, "restartsCountTowardsMax": 0}
    return js


def terminating_pod(name: str, rjob: str, at: datetime) -> Obj:
    """A pod of a suspended child Job: deleted by the Job controller ("Deleting all active pods in
    suspended job"), still on its node with a deletionTimestamp, its container killed by SIGTERM."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "deletionTimestamp": ts(at + timedelta(seconds=30)),
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "r1-train-a1",
                "jobset.sigs.k8s.io/replicatedjob-name": rjob,
            },
        },
        "spec": {"nodeName": f"gke-node-{name}", "containers": [{"name": "c", "image": "i"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": False, "restartCount": 0, "state": {"running": {}}}],
        },
    }


def event(kind: str, name: str, reason: str, message: str, at: datetime, *, type_: str = "Normal") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{abs(hash((reason, at))) % 10**9:x}", "namespace": NS},
        "involvedObject": {"kind": kind, "name": name, "namespace": NS},
        "reason": reason,
        "message": message,
        "type": type_,
        "firstTimestamp": ts(at),
        "lastTimestamp": ts(at),
        "count": 1,
    }


WL = "jobset-r1-train-a1-7f3c2"  # jobframework/workload_names.go:44-50: <kind>-<name>-<5 hex>
PREEMPTED_MSG = (  # pkg/scheduler/preemption/preemption.go:163, reasons L141-147
    "Preempted to accommodate a workload (UID: 5c6a1e0f-aaaa, JobUID: 77b1c2d3-bbbb) due to "
    "prioritization in the ClusterQueue"
)


def evicted(reason: str, message: str, at: datetime, *, preempted: bool = False) -> list[Obj]:
    """Kueue's events for one eviction: on the Workload ``Preempted`` (preemption.go:190) and
    ``EvictedDueTo<reason>`` (workload.go:1367-1371, ReasonWithCause L1430-1431), on the JobSet
    ``Stopped`` with the Evicted condition's message (jobframework/events.go:23, reconciler.go:1184)."""
    out = [event("Workload", WL, f"EvictedDueTo{reason}", message, at)]
    if preempted:
        out.append(event("Workload", WL, "Preempted", message, at))
    out.append(event("JobSet", "r1-train-a1", "Stopped", message, at))
    # JobSet controller's own event for its Suspended condition (jobset_controller.go:1036-1046).
    out.append(event("JobSet", "r1-train-a1", "SuspendedJobs", "jobset is suspended", at))
    return out


def admitted(at: datetime) -> list[Obj]:
    """Admission: Workload events QuotaReserved and Admitted (scheduler.go:815, 829) and the job's
    Started "Admitted by clusterQueue <cq>" (jobframework/reconciler.go:1104, 1135)."""
    return [
        event(
            "Workload",
            WL,
            "QuotaReserved",
            "Quota reserved in ClusterQueue rlpipe, wait time since queued was 4s",
            at,
        ),
        event(
            "Workload",
            WL,
            "Admitted",
            "Admitted by ClusterQueue rlpipe, wait time since reservation was 0s",
            at,
        ),
        event("JobSet", "r1-train-a1", "Started", "Admitted by clusterQueue rlpipe", at),
    ]


def classify(js: Obj, pods: list[Obj], events: list[Obj]) -> Any:
    return summarize("JobSet", js, pods, events, now=NOW, queued_deadline_seconds=DEADLINE)


RAN_FOR_HOURS = NOW - timedelta(hours=3)
EVICTED_AT = NOW - timedelta(seconds=20)
PODS = [terminating_pod("r1-train-a1-pathways-head-0-0-abcde", "pathways-head", EVICTED_AT)] + [
    terminating_pod(f"r1-train-a1-worker-0-{i}-fghij", "worker", EVICTED_AT) for i in range(2)
]


# ------------------------------------------------------------------------------ by eviction reason

CASES = [
    # (Evicted reason, message, preempted?, class, fragment)
    ("Preempted", PREEMPTED_MSG, True, FailureClass.PREEMPTED, "Preempted to accommodate"),
    # tas/node_failure_controller.go:57 / scheduler.go:583, reason NodeFailures (workload_types.go:693)
    (
        "NodeFailures",
        "Workload was evicted as there was no replacement for unhealthy node(s): gke-tpu-1",
        False,
        FailureClass.PREEMPTED,
        "unhealthy node",
    ),
    # workload_controller.go:703, reason PodsReadyTimeout (workload_types.go:677)
    (
        "PodsReadyTimeout",
        f"Exceeded the PodsReady timeout {NS}/{WL}",
        False,
        FailureClass.CAPACITY,
        "PodsReady",
    ),
    # workload_controller.go:313-318 + 724; reason DeactivatedDueTo<cause> (workload.go:1306-1307)
    (
        "DeactivatedDueToRequeuingLimitExceeded",
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
        False,
        FailureClass.PERMANENT,
        "deactivated",
    ),
    ("Deactivated", "The workload is deactivated", False, FailureClass.PERMANENT, "deactivated"),
    # workload_controller.go:588 / 629 (workload_types.go:689 / 685)
    (
        "LocalQueueStopped",
        "The LocalQueue is stopped",
        False,
        FailureClass.PERMANENT,
        "LocalQueue is stopped",
    ),
    ("ClusterQueueStopped", "The ClusterQueue is stopped", False, FailureClass.PERMANENT, "ClusterQueue"),
]


@pytest.mark.parametrize(
    ("reason", "message", "preempted", "cls", "fragment"), CASES, ids=[c[0] for c in CASES]
)
def test_an_eviction_is_classified_by_its_reason(
    reason: str, message: str, preempted: bool, cls: FailureClass, fragment: str
) -> None:
    js = jobset(suspended_at=EVICTED_AT, created=RAN_FOR_HOURS)
    events = admitted(RAN_FOR_HOURS) + evicted(reason, message, EVICTED_AT, preempted=preempted)
    st = classify(js, PODS, events)
    assert (st.phase, st.failure_class) == ("failed", cls), st.reason
    assert "evicted by Kueue" in st.reason and reason in st.reason and fragment in st.reason
    assert not st.admitted
    assert "not admitted after" not in st.reason  # it ran for hours: never "not admitted"


def test_a_kueue_preemption_of_a_running_jobset_is_preempted_and_resumed() -> None:
    """The pipeline retries a ``preempted`` failure from the last committed checkpoint (docs/design.md#retries-preemption-and-resume);
    the pods are still terminating on their nodes when the verdict is given."""
    js = jobset(suspended_at=EVICTED_AT, created=RAN_FOR_HOURS)
    st = classify(
        js, PODS, admitted(RAN_FOR_HOURS) + evicted("Preempted", PREEMPTED_MSG, EVICTED_AT, preempted=True)
    )
    assert (st.phase, st.failure_class) == ("failed", FailureClass.PREEMPTED)
    assert st.failure() is not None and st.failure().failure_class is FailureClass.PREEMPTED  # type: ignore[union-attr]


def test_the_stopped_event_alone_names_the_reason() -> None:
    """The Workload's events are not there (another namespace's RBAC, or expired): the JobSet's own
    ``Stopped`` event carries the Evicted message (reconciler.go:542 passes evCond.Message)."""
    js = jobset(suspended_at=EVICTED_AT, created=RAN_FOR_HOURS)
    for message, cls in (
        (PREEMPTED_MSG, FailureClass.PREEMPTED),
        (f"Exceeded the PodsReady timeout {NS}/{WL}", FailureClass.CAPACITY),
        (
            # Kueue v0.17.1's wording (workload_controller.go:463-468, :737): a rejected
            # ProvisioningRequest is no capacity, as with the Workload's events
            "The workload is deactivated due to Admission check(s): prov, were rejected",
            FailureClass.CAPACITY,
        ),
        ("The LocalQueue is stopped", FailureClass.PERMANENT),
    ):
        stopped = [event("JobSet", "r1-train-a1", "Stopped", message, EVICTED_AT)]
        st = classify(js, PODS, stopped)
        assert (st.phase, st.failure_class) == ("failed", cls), (message, st.reason)


def test_an_admission_check_retry_is_requeued_by_kueue_and_stays_queued() -> None:
    """AdmissionCheck (a ProvisioningRequest to retry) is requeued by Kueue itself after a backoff
    (admissionchecks/provisioning/controller.go:544-558; workload_controller.go:553-556)."""
    js = jobset(suspended_at=EVICTED_AT, created=RAN_FOR_HOURS)
    events = admitted(RAN_FOR_HOURS) + evicted(
        "AdmissionCheck", "At least one admission check is false", EVICTED_AT
    )
    st = classify(js, [], events)
    assert st.phase == "queued", st.reason
    assert "requeued by Kueue" in st.reason and "AdmissionCheck" in st.reason


# ------------------------------------------------------------------------------ history and time


def test_an_eviction_after_hours_of_running_is_not_never_admitted() -> None:
    """The queued deadline is timed from the latest Suspended=True transition, not from creation:
    a JobSet that ran for 3 h and was suspended 20 s ago (no eviction event read yet) has waited
    20 s. Before, it failed at once as ``capacity`` "not admitted after 3h00m"."""
    js = jobset(suspended_at=EVICTED_AT, created=RAN_FOR_HOURS)
    st = classify(js, [], [])
    assert st.phase == "queued", st.reason
    assert "queued for 20s" in st.reason
    later = summarize(
        "JobSet", js, [], [], now=EVICTED_AT + timedelta(minutes=11), queued_deadline_seconds=DEADLINE
    )
    assert (later.phase, later.failure_class) == ("failed", FailureClass.CAPACITY)
    assert "after 11m" in later.reason


def test_an_eviction_before_the_latest_admission_is_history() -> None:
    """Evicted (AdmissionCheck retry), re-admitted, then suspended again without a new eviction:
    the old eviction does not decide the new suspension."""
    first = RAN_FOR_HOURS
    js = jobset(suspended_at=EVICTED_AT, created=first - timedelta(minutes=30))
    events = evicted("Preempted", PREEMPTED_MSG, first - timedelta(minutes=10), preempted=True) + admitted(
        first
    )
    st = classify(js, [], events)
    assert st.phase == "queued" and "evicted" not in st.reason, st.reason


def test_a_readmitted_jobset_is_running_whatever_old_events_say() -> None:
    js = jobset(suspended_at=None, created=RAN_FOR_HOURS)
    running = [
        dict(p, metadata={k: v for k, v in p["metadata"].items() if k != "deletionTimestamp"}) for p in PODS
    ]
    events = evicted("Preempted", PREEMPTED_MSG, RAN_FOR_HOURS, preempted=True) + admitted(RAN_FOR_HOURS)
    st = classify(js, running, events)
    assert st.phase == "running", st.reason


def test_conditions_nothing_writes_are_not_read() -> None:
    """An ``Evicted`` or ``Preempted`` condition on the JobSet itself is invented (Kueue writes those
    on its Workload, workload_types.go:630, 637): a running JobSet stays running."""
    js = jobset(suspended_at=None, created=RAN_FOR_HOURS)
    js["status"]["conditions"].append(
        {
            "type": "Evicted",
            "status": "True",
            "reason": "Preempted",
            "message": "invented",
            "lastTransitionTime": ts(NOW),
        }
    )
    running = [
        dict(p, metadata={k: v for k, v in p["metadata"].items() if k != "deletionTimestamp"}) for p in PODS
    ]
    st = classify(js, running, [])
    assert st.phase == "running", st.reason


def test_a_plain_evicted_event_is_not_kueues() -> None:
    """There is no plain ``Evicted`` event from Kueue (only EvictedDueTo<reason>); a suspended
    JobSet with one is still just queued."""
    js = jobset(suspended_at=EVICTED_AT, created=RAN_FOR_HOURS)
    st = classify(js, [], [event("JobSet", "r1-train-a1", "Evicted", "Preempted by something", EVICTED_AT)])
    assert st.phase == "queued", st.reason


# ------------------------------------------------------------------------------ on the simulator

SIM_CASES = [
    ("preempted", FailureClass.PREEMPTED, "Preempted"),
    ("node-failures", FailureClass.PREEMPTED, "NodeFailures"),
    ("pods-ready-timeout", FailureClass.CAPACITY, "PodsReadyTimeout"),
    ("deactivated", FailureClass.PERMANENT, "DeactivatedDueToRequeuingLimitExceeded"),
    ("local-queue-stopped", FailureClass.PERMANENT, "LocalQueueStopped"),
]


@pytest.mark.parametrize(("why", "cls", "reason"), SIM_CASES, ids=[c[0] for c in SIM_CASES])
def test_the_simulator_evicts_as_kueue_does_and_the_client_classifies_it(
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
    why: str,
    cls: FailureClass,
    reason: str,
) -> None:
    jobsets, pods = capture(kube, "jobsets"), capture(kube, "pods")
    sim = simulate(f"train:evict@3:{why}")
    train = render_for(buckets, "train", training={"num_batches": 10})
    name = train["metadata"]["name"]
    seed(buckets, program_args(train)["load_parameters_path"])
    create(kube, train)
    assert sim.wait_idle(15)  # evicted, suspended in its queue (parked)

    js = kube.get("jobsets", name, namespace=NS)
    assert js["spec"]["suspend"] is True
    suspended = next(c for c in js["status"]["conditions"] if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "SuspendedJobs")
    assert not [c for c in js["status"]["conditions"] if c["type"] in ("Evicted", "Preempted")]
    assert any(not (o["spec"].get("suspend")) for o in jobsets if o["metadata"]["name"] == name)  # it ran
    # The Workload carries Kueue's conditions; its events and the JobSet's Stopped say why.
    (wl,) = kube.list("workloads", namespace=NS)
    assert wl["metadata"]["name"].startswith(f"jobset-{name}-")
    assert wl["metadata"]["ownerReferences"][0]["uid"] == js["metadata"]["uid"]
    wl_conds = {c["type"]: c for c in wl["status"]["conditions"]}
    assert (wl_conds["Evicted"]["status"], wl_conds["Evicted"]["reason"]) == ("True", reason)
    assert wl_conds["QuotaReserved"]["status"] == "False" and wl_conds["QuotaReserved"]["reason"] == "Pending"
    assert ("Preempted" in wl_conds) == (why == "preempted")
    wl_events = events_for(kube, wl["metadata"]["name"])
    assert f"EvictedDueTo{reason}" in wl_events and "Evicted" not in wl_events
    assert ("Preempted" in wl_events) == (why == "preempted")
    assert "Stopped" in events_for(kube, name)
    # The pods were deleted, lingered on their nodes with a deletionTimestamp, and exited 143.
    lingering = [
        p for p in pods if p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    ]
    assert lingering
    exits = {
        cs["state"]["terminated"]["exitCode"]
        for p in pods
        if p["metadata"].get("deletionTimestamp")
        for cs in p["status"].get("containerStatuses") or []
        if "terminated" in cs["state"]
    }
    assert exits == {143}
    assert not pods_of(kube, f"jobset.sigs.k8s.io/jobset-name={name}")

    client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    st = client.status(name, kind="JobSet", queued_deadline_seconds=600.0)
    assert (st.phase, st.failure_class) == ("failed", cls), st.reason
    assert reason in st.reason and "not admitted" not in st.reason


def test_an_evicted_conversion_job_is_stopped_as_kueue_stops_a_batch_job(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:evict@0")
    job = render_for(buckets, "convert")
    create(kube, job)
    assert sim.wait_idle(15)
    stopped = kube.get("jobs", job["metadata"]["name"], namespace=NS)
    assert (
        stopped["spec"]["suspend"] is True and "startTime" not in stopped["status"]
    )  # Kueue job_controller.go:186-190
    assert {c["type"]: c["reason"] for c in stopped["status"]["conditions"]}["Suspended"] == "JobSuspended"
    assert stopped["status"].get("failed") is None  # suspended pods do not count as failures
    st = ClusterClient(kube.api_client(), NS, sleep=lambda s: None).status(
        job["metadata"]["name"], kind="Job"
    )
    assert (st.phase, st.failure_class) == ("failed", FailureClass.PREEMPTED), st.reason
