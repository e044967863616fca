"""The recording client and the status documents the cluster client's tests share.

The status documents below are written by hand after what the Job, JobSet, kubelet, scheduler
and Kueue controllers write (condition types and reasons, container states, events), so the
classifier is tested against the shapes a cluster produces, not against its own constants.
"""

from __future__ import annotations

import copy
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from rlpipe.cluster import ClusterClient, kinds
from rlpipe.core import identity
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


def make_harness(server: KubeApiServer, **kwargs: Any) -> Harness:
    sleeps: list[float] = []
    clock = Clock()
    cc = ClusterClient(recorded(server.api_client()), NS, sleep=sleeps.append, now=clock, **kwargs)
    return Harness(cc, sleeps, clock)


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


def patch_status_of(
    server: KubeApiServer, resource: str, obj: dict[str, Any], status: dict[str, Any]
) -> None:
    server.patch_status(resource, obj["metadata"]["name"], status, namespace=NS)
