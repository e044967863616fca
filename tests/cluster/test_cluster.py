"""rlpipe.cluster against the Kubernetes API double, through the real ``kubernetes`` client.

The status documents below are written by hand after what the Job, JobSet, kubelet, scheduler
and Kueue controllers write (condition types and reasons, container states, events), so the
classifier is tested against the shapes a cluster produces, not against its own constants.
"""

from __future__ import annotations

import base64
import copy
import email.utils
import json
import random
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client

from rlpipe import cluster
from rlpipe.cluster import RBAC_RULES, ClusterClient, RbacRule, WorkloadStatus, api_errors, kinds
from rlpipe.cluster import transport as cluster_client
from rlpipe.control.adapters.settings import Settings
from rlpipe.core import identity
from rlpipe.core.failures import FailureClass, PermanentFailure, Preempted, TransientFailure
from rlpipe.core.manifests import RenderContext, pathways, render
from rlpipe.core.request import validate_request
from rlpipe.local import kube_api
from rlpipe.local.kube_api import KubeApiServer
from tests.conftest import minimal_request
from tests.harness.patience import ceiling

NS = "rlpipe"
T0 = "2026-03-01T10:00:00Z"
REQ = validate_request(minimal_request())
RUN = identity.run_id_for("request:test-cluster-a")
OTHER_RUN = identity.run_id_for("request:test-cluster-b")
HF_TOKEN_LOOKALIKE = "hf_" + "A1b2C3d4" * 4

# (method, url) of every request any ClusterClient in this module made, for the RBAC test.
CALLS: list[tuple[str, str]] = []


def recorded(api: client.ApiClient) -> client.ApiClient:
    """Record every request at the client's single choke point (ApiClient.call_api)."""
    original = api.call_api

    def call_api(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        CALLS.append((method, url))
        return original(method, url, *args, **kwargs)

    api.call_api = call_api  # type: ignore[method-assign]
    return api


@dataclass
class Clock:
    """Real time plus an offset: server timestamps are real, the deadline tests move forward."""

    offset: timedelta = field(default_factory=timedelta)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclass
class Harness:
    client: ClusterClient
    sleeps: list[float]
    clock: Clock


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:  # the real validator: every object we launch is checked strictly
        yield srv


def server_log(
    server: KubeApiServer, count: int, method: str | None = None, path: str | None = None
) -> list[kube_api.RequestRecord]:
    """The double logs a request just *after* answering it, so wait (briefly) for ``count``
    matching records instead of racing the server thread."""
    deadline = time.monotonic() + ceiling(2)
    while True:
        found = [
            r
            for r in server.requests
            if (method is None or r.method == method) and (path is None or re.search(path, r.path))
        ]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.005)


def quiesce(server: KubeApiServer) -> None:
    """Let the last request of a test reach the log before it is cleared (see server_log)."""
    seen = -1
    deadline = time.monotonic() + 0.2
    while len(server.requests) != seen and time.monotonic() < deadline:
        seen = len(server.requests)
        time.sleep(0.005)


@pytest.fixture(autouse=True)
def clean(server: KubeApiServer) -> Iterator[None]:
    yield
    quiesce(server)
    server.clear_faults()
    for resource in ("jobsets", "jobs", "pods", "events"):
        server.delete_collection(resource, namespace=NS, propagation_policy="Background")
    server.clear_requests()


def make_harness(server: KubeApiServer, **kwargs: Any) -> Harness:
    sleeps: list[float] = []
    clock = Clock()
    cc = ClusterClient(recorded(server.api_client()), NS, sleep=sleeps.append, now=clock, **kwargs)
    return Harness(cc, sleeps, clock)


@pytest.fixture
def h(server: KubeApiServer) -> Harness:
    return make_harness(server)


def rendered(stage: identity.Stage, run_id: str = RUN, attempt: int = 1) -> dict[str, Any]:
    return render(REQ, stage, attempt, RenderContext(run_id=run_id, bucket="art", namespace=NS))


# --------------------------------------------------------------------------- document builders


def cond(
    type_: str, status: str = "True", reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type_, "status": status, "lastTransitionTime": T0}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


SCHEDULED = [
    cond("PodReadyToStartContainers"),
    cond("Initialized"),
    cond("Ready"),
    cond("ContainersReady"),
    cond("PodScheduled"),
]
STOPPED = [
    cond("PodReadyToStartContainers", "False"),
    cond("Initialized"),
    cond("Ready", "False", "PodFailed"),
    cond("ContainersReady", "False", "PodFailed"),
    cond("PodScheduled"),
]


def running(
    name: str, image: str = "img", *, restarts: int = 0, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imageID": f"{image}@sha256:{'a' * 64}",
        "ready": True,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": T0}},
        "lastState": {"terminated": last} if last else {},
    }


def term(code: int, reason: str = "Error", message: str | None = None) -> dict[str, Any]:
    out = {
        "exitCode": code,
        "reason": reason,
        "startedAt": T0,
        "finishedAt": T0,
        "containerID": "containerd://" + "b" * 64,
    }
    if message:
        out["message"] = message
    return out


def terminated(name: str, code: int, reason: str = "Error", message: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "image": "img",
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"terminated": term(code, reason, message)},
        "lastState": {},
    }


def waiting(
    name: str, reason: str, message: str, *, restarts: int = 0, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "image": "img",
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason, "message": message}},
        "lastState": {"terminated": last} if last else {},
    }


UNSCHEDULABLE_CPU = (
    "0/6 nodes are available: 3 Insufficient cpu, 3 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/6 nodes are available: 3 No preemption victims found "
    "for incoming pod, 3 Preemption is not helpful for scheduling."
)
UNSCHEDULABLE_TPU = (
    "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
    "4 Insufficient google.com/tpu. preemption: not eligible due to preemptionPolicy=Never."
)


def pod_doc(
    name: str,
    labels: dict[str, str],
    spec: dict[str, Any],
    *,
    phase: str,
    conditions: list[Any],
    containers: list[Any] | None = None,
    init: list[Any] | None = None,
    node: str | None = None,
    reason: str | None = None,
    message: str | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "conditions": conditions, "qosClass": "Burstable"}
    if node:
        status.update(hostIP="10.128.0.7", podIP="10.128.0.7", startTime=T0)
    if containers is not None:
        status["containerStatuses"] = containers
    if init is not None:
        status["initContainerStatuses"] = init
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": labels}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def job_pod(
    job: dict[str, Any],
    *,
    suffix: str = "x7k2p",
    phase: str = "Running",
    conditions: list[Any] | None = None,
    containers: list[Any] | None = None,
    node: str | None = "gke-rlpipe-cpu-np-3f2a1b7c-q9zt",
    **kw: Any,
) -> dict[str, Any]:
    """A pod as the Job controller creates it (its labels are the Job's defaulted template labels)."""
    meta, template = job["metadata"], job["spec"]["template"]
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    if containers is None:
        containers = [running("workload-container", REQ.image)]
    return pod_doc(
        f"{meta['name']}-{suffix}",
        dict(template["metadata"]["labels"]),
        template["spec"],
        phase=phase,
        conditions=SCHEDULED if conditions is None else conditions,
        containers=containers,
        node=node,
        owner=owner,
        **kw,
    )


def jobset_pod(
    js: dict[str, Any],
    rjob: str,
    job_index: int = 0,
    pod_index: int = 0,
    *,
    phase: str = "Running",
    conditions: list[Any] | None = None,
    containers: list[Any] | None = None,
    init: list[Any] | None = None,
    node: str | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A pod as the JobSet controller's child Job creates it, with the labels JobSet sets."""
    meta = js["metadata"]
    spec = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == rjob)
    child = f"{meta['name']}-{rjob}-{job_index}"
    labels = {
        **spec["template"]["spec"]["template"]["metadata"]["labels"],
        kinds.JOBSET_NAME_LABEL: meta["name"],
        kinds.JOBSET_UID_LABEL: meta["uid"],
        kinds.REPLICATED_JOB_LABEL: rjob,
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(spec["replicas"]),
        "batch.kubernetes.io/job-name": child,
        "job-name": child,
        "batch.kubernetes.io/job-completion-index": str(pod_index),
    }
    head = rjob == pathways.HEAD
    if node is None and phase != "Pending":
        node = "gke-rlpipe-cpu-np-3f2a1b7c-h4x1" if head else f"gke-tpu-v6e-4x8-7d1e-w{pod_index}"
    if containers is None:
        containers = [running(pathways.MAIN_CONTAINER if head else "pathways-worker")]
    if init is None and head:
        init = [running("pathways-proxy"), running("pathways-rm")]  # native sidecars show as running
    return pod_doc(
        f"{child}-{pod_index}-{'abcde'[job_index % 5]}{pod_index}q7z",
        labels,
        spec["template"]["spec"]["template"]["spec"],
        phase=phase,
        conditions=SCHEDULED if conditions is None else conditions,
        containers=containers,
        init=init,
        node=node,
        **kw,
    )


def event(
    obj_kind: str,
    obj_name: str,
    reason: str,
    message: str,
    *,
    uid: str | None = None,
    api_version: str = "v1",
    component: str = "kueue-admission",
    type_: str = "Normal",
) -> dict[str, Any]:
    involved = {"kind": obj_kind, "namespace": NS, "name": obj_name, "apiVersion": api_version}
    if uid:
        involved["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{obj_name}.{abs(hash((reason, message))) % 10**12:x}", "namespace": NS},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": T0,
        "lastTimestamp": T0,
        "count": 1,
    }


JOB_FAILED = {
    "failed": 1,
    "startTime": T0,
    "conditions": [
        cond(
            "FailureTarget",
            reason="BackoffLimitExceeded",
            message="Job has reached the specified backoff limit",
        ),
        cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit"),
    ],
}
JOBSET_FAILED = {
    "terminalState": "Failed",
    "conditions": [
        cond("StartupPolicyCompleted", reason="StartupPolicyCompleted", message="startup policy completed"),
        cond("Failed", reason="FailedJobs", message="jobset failed due to one or more job failures"),
    ],
}
JOBSET_RUNNING = {
    "replicatedJobsStatus": [
        {"name": "pathways-head", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0},
        {"name": "worker", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0},
    ],
    "conditions": [
        cond("StartupPolicyCompleted", reason="StartupPolicyCompleted", message="startup policy completed")
    ],
}


def suspend(server: KubeApiServer, kind: str, name: str) -> None:
    """What Kueue's webhook does to every workload with a queue label: create it suspended."""
    server.modify(kind, name, lambda o: o["spec"].__setitem__("suspend", True), namespace=NS)


# --------------------------------------------------------------------------- idempotent apply


@pytest.mark.parametrize("stage", ["convert", "train"])
def test_apply_twice_is_one_object_and_returns_the_first_uid(
    server: KubeApiServer, h: Harness, stage: identity.Stage
) -> None:
    obj = rendered(stage)
    first = h.client.apply(obj)
    second = h.client.apply(copy.deepcopy(obj))

    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    resource = "jobs" if obj["kind"] == "Job" else "jobsets"
    assert [o["metadata"]["name"] for o in server.list(resource, namespace=NS)] == [obj["metadata"]["name"]]
    posts = server_log(server, 2, "POST")
    assert [r.status for r in posts] == [201, 409]
    # Sent verbatim (generic objects API), with strict field validation requested.
    assert posts[0].body == obj and posts[0].query == {"fieldValidation": "Strict"}


def test_apply_refuses_an_existing_object_of_another_run(server: KubeApiServer, h: Harness) -> None:
    obj = rendered("convert")
    squatter = copy.deepcopy(obj)
    squatter["metadata"]["labels"][identity.LABEL_RUN] = OTHER_RUN
    server.create("jobs", squatter)
    with pytest.raises(PermanentFailure, match=f"belongs to something else.*{OTHER_RUN}"):
        h.client.apply(obj)


def test_apply_of_an_object_still_being_deleted_is_transient(server: KubeApiServer, h: Harness) -> None:
    obj = copy.deepcopy(rendered("train"))
    obj["metadata"]["finalizers"] = ["example.com/hold"]
    server.create("jobsets", obj)
    server.delete("jobsets", obj["metadata"]["name"], namespace=NS)
    with pytest.raises(TransientFailure, match="being deleted"):
        h.client.apply(rendered("train"))
    server.modify("jobsets", obj["metadata"]["name"], lambda o: o["metadata"].pop("finalizers"), namespace=NS)


def test_apply_invalid_object_is_permanent_and_names_the_problem(h: Harness) -> None:
    obj = rendered("convert")
    obj["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    with pytest.raises(PermanentFailure) as exc:
        h.client.apply(obj)
    assert "422" in exc.value.reason
    assert "spec.template.spec.restartPolicyy: unknown field" in exc.value.reason


def test_apply_refuses_a_foreign_namespace_before_calling_the_api(server: KubeApiServer, h: Harness) -> None:
    obj = render(REQ, "convert", 1, RenderContext(run_id=RUN, bucket="art", namespace="elsewhere"))
    with pytest.raises(PermanentFailure, match="namespace 'elsewhere'"):
        h.client.apply(obj)
    # the module's server is shared: a request of an earlier test's may still land; none may be ours
    assert not [r for r in server.requests if "elsewhere" in r.path or "elsewhere" in str(r.body)]


# --------------------------------------------------------------------------- status table

Setup = Callable[[KubeApiServer, dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    setup: Setup
    phase: str
    failure_class: FailureClass | None
    fragments: tuple[str, ...] = ()  # must all appear in the reason ("{name}" = the workload's name)
    absent: tuple[str, ...] = ()  # must not appear in the reason
    retryable: tuple[int, ...] = ()
    deadline: float | None = 600.0
    hours_later: float = 0.0  # how far the clock is moved before asking


def _patch(server: KubeApiServer, resource: str, obj: dict[str, Any], status: dict[str, Any]) -> None:
    server.patch_status(resource, obj["metadata"]["name"], status, namespace=NS)


def _pods(server: KubeApiServer, *pods: dict[str, Any]) -> None:
    for pod in pods:
        server.create("pods", pod)


# -- Job cases


def job_running(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, {"active": 1, "ready": 1, "startTime": T0})
    _pods(s, job_pod(job))


def job_succeeded(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(
        s,
        "jobs",
        job,
        {
            "succeeded": 1,
            "startTime": T0,
            "completionTime": T0,
            "conditions": [
                cond(
                    "SuccessCriteriaMet",
                    reason="CompletionsReached",
                    message="Reached expected number of succeeded pods",
                ),
                cond(
                    "Complete",
                    reason="CompletionsReached",
                    message="Reached expected number of succeeded pods",
                ),
            ],
        },
    )
    _pods(
        s,
        job_pod(
            job,
            phase="Succeeded",
            conditions=STOPPED,
            containers=[terminated("workload-container", 0, "Completed")],
        ),
    )


def job_preempted(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, JOB_FAILED)
    _pods(
        s,
        job_pod(
            job,
            phase="Failed",
            conditions=[
                cond(
                    "DisruptionTarget",
                    reason="PreemptionByScheduler",
                    message="default-scheduler: preempting to accommodate a higher priority pod",
                ),
                *STOPPED,
            ],
            containers=[terminated("workload-container", 143)],
        ),
    )


def job_node_shutdown(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, JOB_FAILED)
    _pods(
        s,
        job_pod(
            job,
            phase="Failed",
            conditions=STOPPED,
            reason="Terminated",
            message="Pod was terminated in response to imminent node shutdown.",
            containers=[terminated("workload-container", 137)],
        ),
    )


def job_oom(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, JOB_FAILED)
    _pods(
        s,
        job_pod(
            job,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("workload-container", 137, "OOMKilled")],
        ),
    )


def job_image_pull_backoff(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("Ready", "False", "ContainersNotReady"), cond("PodScheduled")],
            containers=[
                waiting("workload-container", "ImagePullBackOff", f'Back-off pulling image "{REQ.image}"')
            ],
        ),
    )


def job_err_image_pull(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("PodScheduled")],
            containers=[
                waiting(
                    "workload-container",
                    "ErrImagePull",
                    f'rpc error: code = NotFound desc = failed to pull and unpack image "{REQ.image}9": failed to '
                    f'resolve reference "{REQ.image}9": {REQ.image}9: not found',
                )
            ],
        ),
    )


def job_err_image_pull_registry_timeout(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("PodScheduled")],
            containers=[
                waiting(
                    "workload-container",
                    "ErrImagePull",
                    f'rpc error: code = Unknown desc = failed to pull and unpack image "{REQ.image}": failed to copy: '
                    "httpReadSeeker: failed open: dial tcp 142.250.102.82:443: i/o timeout",
                )
            ],
        ),
    )


def job_secret_missing(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("PodScheduled")],
            containers=[
                waiting("workload-container", "CreateContainerConfigError", 'secret "hf-token" not found')
            ],
        ),
    )


def _job_exit(code: int) -> Setup:
    def setup(s: KubeApiServer, job: dict[str, Any]) -> None:
        _patch(s, "jobs", job, JOB_FAILED)
        _pods(
            s,
            job_pod(
                job,
                phase="Failed",
                conditions=STOPPED,
                containers=[
                    terminated(
                        "workload-container",
                        code,
                        message='Traceback (most recent call last):\n  File "to_maxtext.py"\n'
                        f"ValueError: checkpoint shape mismatch token={HF_TOKEN_LOOKALIKE}",
                    )
                ],
            ),
        )

    return setup


def job_failed_no_pods(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(
        s,
        "jobs",
        job,
        {
            "startTime": T0,
            "conditions": [
                cond(
                    "FailureTarget",
                    reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline",
                ),
                cond(
                    "Failed",
                    reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline",
                ),
            ],
        },
    )


def job_unschedulable(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            node=None,
            containers=[],
            conditions=[cond("PodScheduled", "False", "Unschedulable", UNSCHEDULABLE_CPU)],
        ),
    )


def job_kueue_suspended(s: KubeApiServer, job: dict[str, Any]) -> None:
    """Suspended by Kueue's webhook at creation: the Job controller's Suspended condition carries the
    creation time (the queued deadline is timed from the latest Suspended=True transition)."""
    suspend(s, "jobs", job["metadata"]["name"])
    created = job["metadata"]["creationTimestamp"]
    _patch(
        s,
        "jobs",
        job,
        {
            "conditions": [
                {
                    **cond("Suspended", reason="JobSuspended", message="Job suspended"),
                    "lastTransitionTime": created,
                }
            ]
        },
    )
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    _pods(s)
    s.create(
        "events",
        event(
            "Job",
            name,
            "Suspended",
            "Kueue suspended the Job",
            uid=uid,
            api_version="batch/v1",
            component="kueue-job-controller",
        ),
    )
    s.create(
        "events",
        event(
            "Job",
            name,
            "CreatedWorkload",
            f"Created Workload: {NS}/job-{name}-4c1f2",
            uid=uid,
            api_version="batch/v1",
            component="kueue-job-controller",
        ),
    )
    s.create(
        "events",
        event(
            "Workload",
            f"job-{name}-4c1f2",
            "Pending",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor cpu-np, 32 more needed",
            api_version="kueue.x-k8s.io/v1beta1",
        ),
    )


KUEUE_PREEMPTED = (  # Kueue v0.14.8 pkg/scheduler/preemption/preemption.go:163
    "Preempted to accommodate a workload (UID: 5c6a1e0f, JobUID: 77b1c2d3) due to prioritization in the ClusterQueue"
)


def job_kueue_evicted(s: KubeApiServer, job: dict[str, Any]) -> None:
    """Kueue preempted it: EvictedDueToPreempted and Preempted on its Workload (workload.go:1367-1371,
    preemption.go:190), Stopped on the Job (jobframework/reconciler.go:1151); never a condition on the Job."""
    job_kueue_suspended(s, job)
    name = job["metadata"]["name"]
    s.create(
        "events",
        event(
            "Job",
            name,
            "Stopped",
            KUEUE_PREEMPTED,
            uid=job["metadata"]["uid"],
            api_version="batch/v1",
            component="kueue-job-controller",
        ),
    )
    for reason in ("Preempted", "EvictedDueToPreempted"):
        s.create(
            "events",
            event(
                "Workload", f"job-{name}-4c1f2", reason, KUEUE_PREEMPTED, api_version="kueue.x-k8s.io/v1beta2"
            ),
        )


def job_readmitted_after_eviction(s: KubeApiServer, job: dict[str, Any]) -> None:
    """Kueue evicted it once and has admitted it again: the old event is history, not a verdict."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    resumed = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _patch(
        s,
        "jobs",
        job,
        {
            "active": 1,
            "startTime": resumed,
            "conditions": [
                {**cond("Suspended", "False", "JobResumed", "Job resumed"), "lastTransitionTime": resumed}
            ],
        },
    )
    _pods(s, job_pod(job, phase="Pending", node=None, containers=[], conditions=[]))
    for reason, message in (
        (
            "Stopped",
            "Preempted to accommodate a workload (UID: 5c6a1e) due to prioritization in the ClusterQueue",
        ),
        ("Started", "Admitted by clusterQueue cpu-cq"),
    ):
        s.create(
            "events",
            event(
                "Job",
                name,
                reason,
                message,
                uid=uid,
                api_version="batch/v1",
                component="kueue-job-controller",
            ),
        )


def _admitted_a_minute_ago_after_two_hours_in_kueue(s: KubeApiServer, js: dict[str, Any]) -> None:
    resumed = (datetime.now(UTC) + timedelta(hours=2, minutes=-1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _patch(
        s,
        "jobsets",
        js,
        {
            "conditions": [
                {
                    **cond("Suspended", "False", "ResumeJobs", "jobset is resumed"),
                    "lastTransitionTime": resumed,
                }
            ]
        },
    )


def job_disrupted_not_yet_failed(s: KubeApiServer, job: dict[str, Any]) -> None:
    _patch(s, "jobs", job, {"active": 1, "startTime": T0, "terminating": 1})
    _pods(
        s,
        job_pod(
            job,
            conditions=[
                cond("DisruptionTarget", reason="EvictionByEvictionAPI", message="Eviction API: evicting"),
                *SCHEDULED,
            ],
        ),
    )


# -- JobSet cases


def js_running(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(s, "jobsets", js, JOBSET_RUNNING)
    _pods(s, jobset_pod(js, "pathways-head"), jobset_pod(js, "worker", 0, 0), jobset_pod(js, "worker", 0, 1))


def js_succeeded(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(
        s,
        "jobsets",
        js,
        {
            "terminalState": "Completed",
            "conditions": [
                cond(
                    "StartupPolicyCompleted",
                    reason="StartupPolicyCompleted",
                    message="startup policy completed",
                ),
                cond("Completed", reason="AllJobsCompleted", message="jobset completed successfully"),
            ],
        },
    )
    # Only the head decides: workers and sidecars are killed (143) when the head is done.
    _pods(
        s,
        jobset_pod(
            js,
            "pathways-head",
            phase="Succeeded",
            conditions=STOPPED,
            containers=[terminated(pathways.MAIN_CONTAINER, 0, "Completed")],
            init=[terminated("pathways-proxy", 143), terminated("pathways-rm", 143)],
        ),
        jobset_pod(
            js,
            "worker",
            0,
            0,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("pathways-worker", 143)],
        ),
    )


def js_worker_preempted_and_head_crashed(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(s, "jobsets", js, JOBSET_FAILED)
    _pods(
        s,
        jobset_pod(
            js,
            "pathways-head",
            phase="Failed",
            conditions=STOPPED,
            containers=[
                terminated(
                    pathways.MAIN_CONTAINER,
                    1,
                    message="jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: "
                    "Pathways worker tpu-v6e-4x8-7d1e-w1 unreachable",
                )
            ],
        ),
        jobset_pod(
            js,
            "worker",
            0,
            0,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("pathways-worker", 143)],
        ),
        jobset_pod(
            js,
            "worker",
            0,
            1,
            phase="Failed",
            conditions=[
                cond(
                    "DisruptionTarget",
                    reason="DeletionByTaintManager",
                    message="Taint manager: deleting due to NoExecute taint",
                ),
                *STOPPED,
            ],
            containers=[terminated("pathways-worker", 143)],
        ),
    )


def js_worker_oom(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(s, "jobsets", js, JOBSET_FAILED)
    _pods(
        s,
        jobset_pod(js, "pathways-head"),
        jobset_pod(
            js,
            "worker",
            0,
            1,
            conditions=[cond("Ready", "False", "ContainersNotReady"), cond("PodScheduled")],
            containers=[
                waiting(
                    "pathways-worker",
                    "CrashLoopBackOff",
                    "back-off 40s restarting failed container=pathways-worker",
                    restarts=3,
                    last=term(137, "OOMKilled"),
                )
            ],
        ),
    )


def _js_head_exit(code: int) -> Setup:
    def setup(s: KubeApiServer, js: dict[str, Any]) -> None:
        _patch(s, "jobsets", js, JOBSET_FAILED)
        _pods(
            s,
            jobset_pod(
                js,
                "pathways-head",
                phase="Failed",
                conditions=STOPPED,
                containers=[terminated(pathways.MAIN_CONTAINER, code)],
                init=[terminated("pathways-proxy", 143), terminated("pathways-rm", 143)],
            ),
            jobset_pod(
                js,
                "worker",
                0,
                0,
                phase="Failed",
                conditions=STOPPED,
                containers=[terminated("pathways-worker", 143)],
            ),
        )

    return setup


def js_worker_exit_while_head_runs(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(s, "jobsets", js, JOBSET_FAILED)
    _pods(
        s,
        jobset_pod(js, "pathways-head"),
        jobset_pod(
            js,
            "worker",
            0,
            0,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("pathways-worker", 42, message="F0301 pathways worker: bad flag")],
        ),
    )


def js_sidecar_err_image_pull(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(s, "jobsets", js, JOBSET_RUNNING)
    _pods(
        s,
        jobset_pod(
            js,
            "pathways-head",
            phase="Pending",
            conditions=[cond("Initialized", "False", "ContainersNotInitialized"), cond("PodScheduled")],
            init=[
                running("pathways-proxy"),
                waiting(
                    "pathways-rm",
                    "ErrImagePull",
                    "rpc error: code = NotFound desc = failed to pull and unpack image "
                    '"us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:v0.0.0-bogus": '
                    "manifest unknown",
                ),
            ],
            containers=[waiting(pathways.MAIN_CONTAINER, "PodInitializing", "")],
        ),
    )


def js_kueue_suspended(s: KubeApiServer, js: dict[str, Any]) -> None:
    name = js["metadata"]["name"]
    suspend(s, "jobsets", name)
    created = js["metadata"]["creationTimestamp"]
    _patch(
        s,
        "jobsets",
        js,
        {
            "conditions": [
                {
                    **cond("Suspended", reason="SuspendedJobs", message="jobset is suspended"),
                    "lastTransitionTime": created,
                }
            ]
        },
    )
    s.create(
        "events",
        event(
            "Workload",
            f"jobset-{name}-9b7e1",
            "Pending",
            "couldn't assign flavors to pod set worker: insufficient quota for google.com/tpu in "
            "flavor tpu-v6e-4x8, request > maximum capacity (32 > 0)",
            api_version="kueue.x-k8s.io/v1beta1",
        ),
    )
    # Another workload's Kueue message must not leak into this one's reason.
    s.create(
        "events",
        event(
            "Workload",
            f"jobset-{name}x-11111",
            "Pending",
            "UNRELATED WORKLOAD",
            api_version="kueue.x-k8s.io/v1beta1",
        ),
    )


def js_workers_unschedulable(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(s, "jobsets", js, JOBSET_RUNNING)
    _pods(
        s,
        jobset_pod(js, "pathways-head"),
        *(
            jobset_pod(
                js,
                "worker",
                0,
                i,
                phase="Pending",
                containers=[],
                node=None,
                conditions=[cond("PodScheduled", "False", "Unschedulable", UNSCHEDULABLE_TPU)],
            )
            for i in range(2)
        ),
    )


def js_kueue_preempted_after_hours(s: KubeApiServer, js: dict[str, Any]) -> None:
    """Ran for hours, then preempted by Kueue: suspended again a minute ago (JobSet Suspended=True,
    jobset_controller.go:1036-1046), the Workload's EvictedDueToPreempted and the JobSet's Stopped."""
    name = js["metadata"]["name"]
    suspend(s, "jobsets", name)
    minute_ago = (datetime.now(UTC) + timedelta(hours=3, minutes=-1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _patch(
        s,
        "jobsets",
        js,
        {
            "conditions": [
                {
                    **cond("Suspended", reason="SuspendedJobs", message="jobset is suspended"),
                    "lastTransitionTime": minute_ago,
                }
            ]
        },
    )
    s.create("events", event("JobSet", name, "Stopped", KUEUE_PREEMPTED, uid=js["metadata"]["uid"]))
    s.create(
        "events",
        event(
            "Workload",
            f"jobset-{name}-9b7e1",
            "EvictedDueToPreempted",
            KUEUE_PREEMPTED,
            api_version="kueue.x-k8s.io/v1beta2",
        ),
    )


def js_failed_no_pods(s: KubeApiServer, js: dict[str, Any]) -> None:
    _patch(s, "jobsets", js, JOBSET_FAILED)


P, C, R, T, PR = (
    FailureClass.PERMANENT,
    FailureClass.CAPACITY,
    FailureClass.RESOURCES,
    FailureClass.TRANSIENT,
    FailureClass.PREEMPTED,
)
JOB_POD = "{name}-x7k2p"
HEAD_POD = "{name}-pathways-head-0-0-a0q7z"

CASES = [
    Case("job-running", "Job", job_running, "running", None, ("running", "1 running")),
    Case("job-succeeded", "Job", job_succeeded, "succeeded", None, ("succeeded", "CompletionsReached")),
    Case("job-preempted", "Job", job_preempted, "failed", PR, (JOB_POD, "PreemptionByScheduler"), ("exit",)),
    Case("job-node-shutdown", "Job", job_node_shutdown, "failed", PR, (JOB_POD, "imminent node shutdown")),
    Case(
        "job-oom",
        "Job",
        job_oom,
        "failed",
        R,
        (JOB_POD, "workload-container", "OOMKilled", "exit code 137", f"memory limit {REQ.cpu_job.memory}"),
    ),
    Case(
        "job-image-pull-backoff",
        "Job",
        job_image_pull_backoff,
        "failed",
        P,
        (JOB_POD, "workload-container", "ImagePullBackOff", REQ.image),
    ),
    Case(
        "job-err-image-pull",
        "Job",
        job_err_image_pull,
        "failed",
        P,
        (JOB_POD, "workload-container", "ErrImagePull", "not found"),
    ),
    Case(
        "job-err-image-pull-registry-timeout",
        "Job",
        job_err_image_pull_registry_timeout,
        "running",
        None,
        ("i/o timeout",),
    ),
    Case(
        "job-secret-missing",
        "Job",
        job_secret_missing,
        "failed",
        P,
        (JOB_POD, "CreateContainerConfigError", 'secret "hf-token" not found'),
    ),
    Case(
        "job-exit-1",
        "Job",
        _job_exit(1),
        "failed",
        P,
        (JOB_POD, "workload-container", "exited with code 1", "ValueError: checkpoint shape mismatch"),
        (HF_TOKEN_LOOKALIKE, "\n"),
    ),
    Case(
        "job-exit-42-retryable",
        "Job",
        _job_exit(42),
        "failed",
        T,
        (JOB_POD, "workload-container", "exited with code 42", "retryable"),
        retryable=(42, 75),
    ),
    Case(
        "job-exit-42-not-listed", "Job", _job_exit(42), "failed", P, ("exited with code 42",), retryable=(75,)
    ),
    Case(
        "job-failed-no-pods",
        "Job",
        job_failed_no_pods,
        "failed",
        P,
        ("{name}", "DeadlineExceeded", "Job was active longer than specified deadline"),
    ),
    Case(
        "job-unschedulable-before-deadline",
        "Job",
        job_unschedulable,
        "queued",
        None,
        (JOB_POD, "Unschedulable", "3 Insufficient cpu"),
    ),
    Case(
        "job-unschedulable-after-deadline",
        "Job",
        job_unschedulable,
        "failed",
        C,
        (JOB_POD, "3 Insufficient cpu", "deadline 10m"),
        hours_later=1,
    ),
    Case(
        "job-unschedulable-no-deadline",
        "Job",
        job_unschedulable,
        "queued",
        None,
        (JOB_POD,),
        deadline=None,
        hours_later=48,
    ),
    Case(
        "job-kueue-suspended-before-deadline",
        "Job",
        job_kueue_suspended,
        "queued",
        None,
        ("{name}", "'user-queue'", "not admitted", "insufficient unused quota for cpu"),
    ),
    Case(
        "job-kueue-suspended-after-deadline",
        "Job",
        job_kueue_suspended,
        "failed",
        C,
        ("{name}", "not admitted after 2h00m", "deadline 10m", "insufficient unused quota for cpu"),
        hours_later=2,
    ),
    Case(
        "job-kueue-evicted",
        "Job",
        job_kueue_evicted,
        "failed",
        PR,
        ("evicted by Kueue", "Preempted to accommodate"),
    ),
    Case(
        "job-readmitted-after-eviction",
        "Job",
        job_readmitted_after_eviction,
        "queued",
        None,
        ("admitted, waiting for pods",),
        ("evicted",),
    ),
    Case(
        "job-disrupted-not-yet-failed",
        "Job",
        job_disrupted_not_yet_failed,
        "running",
        None,
        (JOB_POD, "EvictionByEvictionAPI"),
    ),
    Case("jobset-running", "JobSet", js_running, "running", None, ("running", "3 running")),
    Case("jobset-succeeded-workers-killed", "JobSet", js_succeeded, "succeeded", None, ("AllJobsCompleted",)),
    Case(
        "jobset-worker-preempted-wins-over-head-exit",
        "JobSet",
        js_worker_preempted_and_head_crashed,
        "failed",
        PR,
        ("{name}-worker-0-1-a1q7z", "DeletionByTaintManager"),
        ("exited with code 1",),
        retryable=(1,),
    ),
    Case(
        "jobset-worker-oom",
        "JobSet",
        js_worker_oom,
        "failed",
        R,
        ("worker pod {name}-worker-0-1-a1q7z", "pathways-worker", "OOMKilled"),
    ),
    Case(
        "jobset-head-exit-42-retryable",
        "JobSet",
        _js_head_exit(42),
        "failed",
        T,
        (HEAD_POD, pathways.MAIN_CONTAINER, "exited with code 42"),
        ("143",),
        retryable=(42,),
    ),
    Case(
        "jobset-head-exit-1",
        "JobSet",
        _js_head_exit(1),
        "failed",
        P,
        (f"head pod {HEAD_POD}", pathways.MAIN_CONTAINER, "exited with code 1"),
        retryable=(42,),
    ),
    # A worker's exit code is never the program's: 42 is retryable for the head only.
    Case(
        "jobset-worker-exit-is-not-the-programs",
        "JobSet",
        js_worker_exit_while_head_runs,
        "failed",
        P,
        ("worker pod {name}-worker-0-0-a0q7z", "pathways-worker", "exited with code 42"),
        retryable=(42,),
    ),
    Case(
        "jobset-sidecar-err-image-pull",
        "JobSet",
        js_sidecar_err_image_pull,
        "failed",
        P,
        (HEAD_POD, "pathways-rm", "ErrImagePull", "manifest unknown"),
    ),
    Case(
        "jobset-kueue-suspended-before-deadline",
        "JobSet",
        js_kueue_suspended,
        "queued",
        None,
        ("'user-queue'", "insufficient quota for google.com/tpu"),
        ("UNRELATED",),
    ),
    Case(
        "jobset-kueue-suspended-after-deadline",
        "JobSet",
        js_kueue_suspended,
        "failed",
        C,
        ("not admitted after 1h00m", "insufficient quota for google.com/tpu"),
        ("UNRELATED",),
        hours_later=1,
    ),
    Case(
        "jobset-workers-unschedulable-before-deadline",
        "JobSet",
        js_workers_unschedulable,
        "queued",
        None,
        ("{name}-worker-0-0-a0q7z", "Insufficient google.com/tpu", "+1 more"),
    ),
    Case(
        "jobset-workers-unschedulable-after-deadline",
        "JobSet",
        js_workers_unschedulable,
        "failed",
        C,
        ("worker pod {name}-worker-0-0-a0q7z", "Insufficient google.com/tpu"),
        hours_later=1,
    ),
    Case(
        "jobset-kueue-evicted-after-hours-of-running",
        "JobSet",
        js_kueue_preempted_after_hours,
        "failed",
        PR,
        ("evicted by Kueue", "Preempted: Preempted to accommodate"),
        ("not admitted",),
        hours_later=3,
    ),
    Case(
        "jobset-admitted-late-is-not-a-capacity-failure",
        "JobSet",
        _admitted_a_minute_ago_after_two_hours_in_kueue,
        "queued",
        None,
        ("admitted, waiting for pods for 1m",),
        hours_later=2,
    ),
    Case(
        "jobset-failed-no-pods",
        "JobSet",
        js_failed_no_pods,
        "failed",
        P,
        ("FailedJobs", "jobset failed due to one or more job failures", "no pod evidence"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_status_table(server: KubeApiServer, h: Harness, case: Case) -> None:
    obj = h.client.apply(rendered("convert" if case.kind == "Job" else "train"))
    name = obj["metadata"]["name"]
    case.setup(server, obj)
    h.clock.offset = timedelta(hours=case.hours_later)

    st = h.client.status(
        name,
        kind=case.kind,
        retryable_exit_codes=case.retryable,  # type: ignore[arg-type]
        queued_deadline_seconds=case.deadline,
    )

    assert (st.phase, st.failure_class) == (case.phase, case.failure_class), st.reason
    for fragment in case.fragments:
        assert fragment.format(name=name) in st.reason, (fragment, st.reason)
    for fragment in case.absent:
        assert fragment.format(name=name) not in st.reason, (fragment, st.reason)
    assert st.uid == obj["metadata"]["uid"] and st.name == name and st.exists
    assert st.admitted == ("suspended" not in case.id and "evicted" not in case.id)
    assert st.queue == REQ.tpu.queue
    json.dumps(st.to_dict())  # the stage function returns it as JSON


def test_preemption_wins_and_the_rest_stays_in_details(server: KubeApiServer, h: Harness) -> None:
    js = h.client.apply(rendered("train"))
    js_worker_preempted_and_head_crashed(server, js)
    st = h.client.status(js["metadata"]["name"], kind="JobSet")

    assert st.failure_class is FailureClass.PREEMPTED
    assert isinstance(st.failure(), Preempted) and st.failure().reason == st.reason  # type: ignore[union-attr]
    # The head's crash is a consequence, kept for the person reading, never the classification.
    assert any("exited with code 1" in d and "head pod" in d for d in st.details)
    assert st.pods == {"Failed": 3}


def test_success_is_not_overridden_by_pod_evidence(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    job_preempted(server, job)  # a disrupted pod and a Failed condition ...
    server.modify(
        "jobs",
        job["metadata"]["name"],
        lambda o: o["status"].__setitem__("conditions", [cond("Complete", reason="CompletionsReached")]),
        namespace=NS,
    )  # ... then a replacement completed
    st = h.client.status(job["metadata"]["name"], kind="Job")
    assert (st.phase, st.failure_class, st.failure()) == ("succeeded", None, None)


def test_pods_of_an_earlier_incarnation_are_ignored(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    stale = job_pod(
        job,
        phase="Failed",
        conditions=STOPPED,
        containers=[terminated("workload-container", 137, "OOMKilled")],
    )
    for key in kinds.JOB_UID_LABELS:
        stale["metadata"]["labels"][key] = "uid-of-a-deleted-job"
    stale["metadata"].pop("ownerReferences")
    server.create("pods", stale)
    _patch(server, "jobs", job, JOB_FAILED)
    st = h.client.status(job["metadata"]["name"], kind="Job")
    assert st.failure_class is FailureClass.PERMANENT and "BackoffLimitExceeded" in st.reason


def test_pods_found_by_run_labels_when_controller_labels_are_missing(
    server: KubeApiServer, h: Harness
) -> None:
    job = h.client.apply(rendered("convert"))
    pod = job_pod(
        job,
        phase="Failed",
        conditions=STOPPED,
        containers=[terminated("workload-container", 137, "OOMKilled")],
    )
    for key in (*kinds.JOB_NAME_LABELS, *kinds.JOB_UID_LABELS):
        pod["metadata"]["labels"].pop(key)
    server.create("pods", pod)
    _patch(server, "jobs", job, JOB_FAILED)
    assert h.client.status(job["metadata"]["name"], kind="Job").failure_class is FailureClass.RESOURCES


def test_missing_workload_is_reported_not_raised(h: Harness) -> None:
    st = h.client.status("rgone0000000-train-a1", kind="JobSet")
    assert (st.phase, st.failure_class, st.exists) == ("failed", FailureClass.PERMANENT, False)
    assert st.reason == "workload rgone0000000-train-a1 not found (deleted?)"


def test_status_rejects_an_unknown_kind(h: Harness) -> None:
    with pytest.raises(ValueError, match="kind"):
        h.client.status("x", kind="Deployment")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- API faults


def test_503_twice_then_success_recovers(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    name = job["metadata"]["name"]
    server.inject_fault(503, count=2)

    st = h.client.status(name, kind="Job")

    assert st.exists and st.uid == job["metadata"]["uid"]
    assert [r.status for r in server_log(server, 3, "GET", f"/jobs/{name}$")] == [503, 503, 200]
    assert len(h.sleeps) == 2
    assert 0 <= h.sleeps[0] <= 0.5 and 0 <= h.sleeps[1] <= 1.0  # full jitter under base * 2**attempt


def test_create_retried_after_503_still_makes_one_object(server: KubeApiServer, h: Harness) -> None:
    server.inject_fault(503, method="POST")
    created = h.client.apply(rendered("train"))
    assert [r.status for r in server_log(server, 2, "POST")] == [503, 201]
    assert [o["metadata"]["uid"] for o in server.list("jobsets", namespace=NS)] == [
        created["metadata"]["uid"]
    ]


def test_503_beyond_the_budget_is_transient(server: KubeApiServer) -> None:
    h = make_harness(server, api_retries=3)
    server.inject_fault(503, count=10, message="etcdserver: leader changed")

    with pytest.raises(TransientFailure) as exc:
        h.client.status("rabc-convert-a1", kind="Job")

    assert "after 4 attempts" in exc.value.reason and "503 etcdserver: leader changed" in exc.value.reason
    assert len(server_log(server, 4)) == 4 and len(h.sleeps) == 3
    assert server.pending_faults == 6


def test_429_retry_after_is_honoured_with_the_injected_sleep(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    name = job["metadata"]["name"]
    server.inject_fault(429, retry_after=7, method="GET")

    h.client.status(name, kind="Job")

    # Our injected sleep saw the 429: had urllib3 slept the 7 s and retried by itself, unseen and
    # outside the budget, the client would have seen only the 200 and slept nothing.
    assert h.sleeps == [7.0]
    assert [r.status for r in server_log(server, 2, "GET", f"/jobs/{name}$")] == [429, 200]


def test_retry_after_is_bounded_by_backoff_max(server: KubeApiServer) -> None:
    h = make_harness(server, backoff_max=20.0)
    server.inject_fault(429, retry_after=3600, count=2)
    h.client.list_run_objects(RUN)
    assert h.sleeps == [20.0, 20.0]


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    delay = api_errors._retry_after(SimpleNamespace(headers={"Retry-After": when}, body=None))  # type: ignore[arg-type]
    assert delay is not None and 27 <= delay <= 30
    assert api_errors._retry_after(SimpleNamespace(headers={"Retry-After": "soon"}, body=None)) is None  # type: ignore[arg-type]


def test_backoff_is_exponential_with_full_jitter(server: KubeApiServer) -> None:
    h = make_harness(server, api_retries=6, backoff_base=0.5, backoff_max=8.0, rng=random.Random(7))
    server.inject_fault(500, count=6)
    h.client.list_run_objects(RUN)

    expected_rng = random.Random(7)
    caps = [min(8.0, 0.5 * 2**i) for i in range(6)]
    assert caps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert h.sleeps == [expected_rng.uniform(0, cap) for cap in caps]


def test_connection_refused_is_retried_then_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    sleeps: list[float] = []
    api = recorded(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")))
    cc = ClusterClient(api, NS, api_retries=2, sleep=sleeps.append)
    with pytest.raises(TransientFailure, match=r"after 3 attempts.*(Connection refused|NewConnectionError)"):
        cc.apply(rendered("convert"))
    assert len(sleeps) == 2


def test_forbidden_is_permanent_and_points_at_rbac(server: KubeApiServer, h: Harness) -> None:
    server.inject_fault(
        403,
        message='jobs.batch is forbidden: User "rlpipe-stage@p.iam" cannot list resource '
        '"jobs" in API group "batch" in the namespace "rlpipe"',
    )
    with pytest.raises(PermanentFailure, match=r"403.*cannot list resource.*RBAC_RULES"):
        h.client.delete_run(RUN)
    assert h.sleeps == []


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
    _patch(
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


# --------------------------------------------------------------------------- construction


def test_from_settings_with_a_plain_kube_url(server: KubeApiServer) -> None:
    cc = ClusterClient.from_settings(Settings(kube_url=server.url + "/", namespace=NS), sleep=lambda _s: None)
    recorded(cc.api_client)
    created = cc.apply(rendered("convert"))
    assert cc.namespace == NS and cc.api_client.configuration.host == server.url
    assert cc.status(created["metadata"]["name"], kind="Job").uid == created["metadata"]["uid"]
    assert "authorization" not in {k.lower() for k in cc.api_client.default_headers}


def _kubeconfig(tmp_path: Any, server: str) -> tuple[Any, dict[str, Any]]:
    """A kubeconfig as the real control plane writes one for the pipeline's identity."""
    files = {name: tmp_path / name for name in ("ca.crt", "user.crt", "user.key")}
    for path in files.values():
        path.write_text(PEM)
    path = tmp_path / "stage.kubeconfig"
    cluster_entry = {"server": server, "certificate-authority": str(files["ca.crt"])}
    user = {"client-certificate": str(files["user.crt"]), "client-key": str(files["user.key"])}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": cluster_entry}],
                "users": [{"name": "stage", "user": user}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "stage"}}],
                "current-context": "local",
            }
        )
    )
    return path, files


def test_from_settings_with_a_kubeconfig_takes_its_server_ca_and_client_certificate(tmp_path: Any) -> None:
    """The local stack's real control plane: TLS with the plane's CA and the pipeline identity's
    client certificate, all from the kubeconfig, and no bearer token."""
    path, files = _kubeconfig(tmp_path, "https://127.0.0.1:6443")
    cc = ClusterClient.from_settings(Settings(kubeconfig=str(path), namespace=NS))
    config = cc.api_client.configuration
    assert config.host == "https://127.0.0.1:6443" and config.verify_ssl and cc.namespace == NS
    assert (config.ssl_ca_cert, config.cert_file, config.key_file) == tuple(str(p) for p in files.values())
    assert "authorization" not in {k.lower() for k in cc.api_client.default_headers}
    assert not config.api_key


def test_a_kubeconfig_wins_over_a_plain_url(server: KubeApiServer, tmp_path: Any) -> None:
    path, _files = _kubeconfig(tmp_path, server.url)
    settings = Settings(kubeconfig=str(path), kube_url="http://127.0.0.1:1", namespace=NS)
    cc = ClusterClient.from_settings(settings, sleep=lambda _s: None)
    assert cc.api_client.configuration.host == server.url
    created = cc.apply(rendered("convert"))
    assert cc.status(created["metadata"]["name"], kind="Job").uid == created["metadata"]["uid"]


def test_the_kubeconfig_comes_from_rlpipe_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLPIPE_KUBECONFIG", "/stack/controlplane/stage.kubeconfig")
    assert Settings.from_env().kubeconfig == "/stack/controlplane/stage.kubeconfig"


class FakeCredentials:
    """google.auth credentials that count refreshes instead of calling Google."""

    def __init__(self) -> None:
        self.refreshes = 0
        self.token: str | None = None
        self.expired = True

    @property
    def valid(self) -> bool:
        return self.token is not None and not self.expired

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = f"ya29.token-{self.refreshes}"
        self.expired = False


def _authorization(cc: ClusterClient) -> str:
    """The Authorization header the client computes for a request, through its real auth path."""
    _method, _url, headers, _body, _post = cc.api_client.param_serialize(
        method="GET",
        resource_path="/api/v1/namespaces/{namespace}/pods",
        path_params={"namespace": NS},
        auth_settings=["BearerToken"],
    )
    return headers["authorization"]


PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize("ca_form", ["path", "pem", "base64"])
def test_from_settings_for_gke_uses_the_ca_and_refreshes_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, ca_form: str
) -> None:
    import google.auth

    creds = FakeCredentials()
    scopes_seen: list[Any] = []

    def fake_default(scopes: Any = None, **_: Any) -> tuple[FakeCredentials, str]:
        scopes_seen.append(scopes)
        return creds, "proj"

    monkeypatch.setattr(google.auth, "default", fake_default)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(PEM)
    ca = {"path": str(ca_file), "pem": PEM, "base64": base64.b64encode(PEM.encode()).decode()}[ca_form]

    cc = ClusterClient.from_settings(Settings(gke_endpoint="34.118.0.10", gke_ca_cert=ca, namespace=NS))
    config = cc.api_client.configuration

    assert scopes_seen == [[cluster_client.CLOUD_PLATFORM_SCOPE]]
    assert config.host == "https://34.118.0.10" and config.verify_ssl
    if ca_form == "path":
        assert config.ssl_ca_cert == str(ca_file)
    else:
        assert config.ca_cert_data.strip() == PEM.strip()
    assert _authorization(cc) == "Bearer ya29.token-1"
    assert _authorization(cc) == "Bearer ya29.token-1" and creds.refreshes == 1  # valid: no refresh
    creds.expired = True  # an hour later, in a warm function instance
    assert _authorization(cc) == "Bearer ya29.token-2"


def test_from_settings_without_any_cluster_is_a_clear_error() -> None:
    with pytest.raises(PermanentFailure, match="RLPIPE_KUBE_URL"):
        ClusterClient.from_settings(Settings())


def test_importing_the_module_does_not_import_kubernetes() -> None:
    import subprocess
    import sys

    code = "import sys, rlpipe.cluster; print('kubernetes' in sys.modules, 'google.auth' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_constants_match_the_manifests_and_the_controllers() -> None:
    assert kinds.HEAD_REPLICATED_JOB == pathways.HEAD
    assert kinds.JOB_NAME_LABELS == kube_api.JOB_NAME_LABELS
    assert kinds.JOB_UID_LABELS == kube_api.JOB_UID_LABELS
    assert (kinds.JOBSET_NAME_LABEL, kinds.JOBSET_UID_LABEL) == (
        kube_api.JOBSET_NAME_LABEL,
        kube_api.JOBSET_UID_LABEL,
    )


def test_workload_status_failure_and_json() -> None:
    running_ = WorkloadStatus(kind="Job", name="j", phase="running")
    assert running_.failure() is None and not running_.done
    failed = WorkloadStatus(
        kind="Job",
        name="j",
        phase="failed",
        failure_class=FailureClass.RESOURCES,
        reason="pod p container c was OOMKilled",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    failure = failed.failure()
    assert (
        failed.done
        and failure is not None
        and failure.as_error() == {"tag": "resources", "message": "pod p container c was OOMKilled"}
    )
    assert json.loads(json.dumps(failed.to_dict()))["created_at"] == "2026-01-01T00:00:00+00:00"


# --------------------------------------------------------------------------- RBAC

_API_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def rule_for(method: str, url: str) -> RbacRule:
    """The RBAC rule an apiserver would check for this request."""
    split = urlsplit(url)
    m = _API_PATH.match(split.path)
    assert m, f"not a namespaced resource request: {method} {url}"
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    query = parse_qs(split.query)
    if method == "GET":
        verb = "get" if m["name"] else ("watch" if query.get("watch") == ["true"] else "list")
    elif method == "DELETE":
        verb = "delete" if m["name"] else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return RbacRule(m["group"] or "", resource, verb)


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
    assert mine == RBAC_RULES, "RBAC_RULES must be exactly what the module uses (least privilege)"

    everything = {rule_for(m, u) for m, u in CALLS}  # all other tests in this module too
    assert everything <= RBAC_RULES, everything - RBAC_RULES


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


def test_preemption_evidence_survives_on_the_failed_child_job(server: KubeApiServer) -> None:
    """A worker preempted → its Job fails by podFailurePolicy (DisruptionTarget) and the head exits 1
    when it loses the worker; the pods of the worker may be gone, yet the class stays preempted."""
    h = make_harness(server)
    js = h.client.apply(rendered("train"))
    name = js["metadata"]["name"]
    server.create(
        "jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{name}-worker-0",
                "namespace": NS,
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": "worker",
                },
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "pathways-worker", "image": "i"}],
                    }
                }
            },
        },
    )
    server.patch_status(
        "jobs",
        f"{name}-worker-0",
        {
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": f"Pod {NS}/{name}-worker-0-3-abcde has condition DisruptionTarget matching FailJob rule at index 0",
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": f"Pod {NS}/{name}-worker-0-3-abcde has condition DisruptionTarget matching FailJob rule at index 0",
                },
            ]
        },
        namespace=NS,
    )
    server.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-pathways-head-0-0-xyz12",
                "namespace": NS,
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": "pathways-head",
                },
            },
            "spec": {"containers": [{"name": "workload-container", "image": "i"}]},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "workload-container",
                        "ready": False,
                        "restartCount": 0,
                        "image": "i",
                        "imageID": "",
                        "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    }
                ],
            },
        },
    )
    server.patch_status(
        "jobsets",
        name,
        {
            "terminalState": "Failed",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "ReachedMaxRestarts",
                    "message": "jobset failed",
                    "lastTransitionTime": "2026-12-02T00:00:00Z",
                }
            ],
        },
        namespace=NS,
    )
    status = h.client.status(name, kind="JobSet")
    assert status.phase == "failed" and status.failure_class == FailureClass.PREEMPTED
    assert "DisruptionTarget" in status.reason


def test_an_eviction_is_read_while_the_pods_are_still_terminating(server: KubeApiServer, h: Harness) -> None:
    """After a Kueue eviction every pod is still on its node, deleted (deletionTimestamp) and held by
    the Job controller's finalizer while it terminates. A pod being deleted no longer counts as
    scheduled, so the client reads the events and the eviction is seen now, not after the pods
    are gone."""
    js = h.client.apply(rendered("train"))
    name = js["metadata"]["name"]
    js_kueue_preempted_after_hours(server, js)
    pods = [jobset_pod(js, "pathways-head"), jobset_pod(js, "worker", 0, 0)]
    for pod in pods:
        pod["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
        server.create("pods", pod)
        server.delete("pods", pod["metadata"]["name"], namespace=NS)  # held: terminating
    h.clock.offset = timedelta(hours=3)
    try:
        st = h.client.status(name, kind="JobSet", queued_deadline_seconds=600.0)
        assert (st.phase, st.failure_class) == ("failed", FailureClass.PREEMPTED), st.reason
        assert "evicted by Kueue (Preempted" in st.reason and st.pods == {"Running": 2}
    finally:
        for pod in pods:
            server.modify(
                "pods", pod["metadata"]["name"], lambda o: o["metadata"].pop("finalizers", None), namespace=NS
            )
