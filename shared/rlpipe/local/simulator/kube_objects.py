"""Builders for the Kubernetes objects and status fragments the controllers would write.

Pure functions (no I/O), shaped like what the kubelet, scheduler, Job controller and JobSet
controller of Kubernetes 1.32 / JobSet v0.10 write, so code that reads them on GKE reads them
here the same way: condition fields and reasons, container state shapes, Event objects.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

# Kubernetes' rand.String alphabet (no vowels, no confusable digits), used for pod suffixes.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SIMULATED_ANNOTATION = "simulator.rlpipe.dev/simulated"
SIMULATED_NOTE = "true: made by the rlpipe cluster simulator, not a real cluster"

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TPU_RESOURCE = "google.com/tpu"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rand_suffix(rng: random.Random, n: int = 5) -> str:
    return "".join(rng.choice(NAME_ALPHABET) for _ in range(n))


def condition(
    kind: str,
    status: bool | str,
    now: float,
    reason: str | None = None,
    message: str | None = None,
    *,
    probe: bool = True,
) -> Obj:
    """A core/batch condition (Pod, Job): ``lastProbeTime`` + ``lastTransitionTime``."""
    cond: Obj = {"type": kind, "status": _status(status)}
    cond["lastProbeTime"] = rfc3339(now) if probe else None
    cond["lastTransitionTime"] = rfc3339(now)
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def meta_condition(kind: str, status: bool | str, now: float, reason: str, message: str) -> Obj:
    """A ``metav1.Condition`` (JobSet): reason and message are required."""
    return {
        "type": kind,
        "status": _status(status),
        "lastTransitionTime": rfc3339(now),
        "reason": reason,
        "message": message,
    }


def _status(value: bool | str) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return value


def upsert_condition(conditions: list[Obj] | None, new: Obj) -> list[Obj]:
    """Replace the condition of the same type; keep its transition time if status is unchanged."""
    out = [dict(c) for c in conditions or []]
    for i, cond in enumerate(out):
        if cond.get("type") == new["type"]:
            if cond.get("status") == new["status"] and "lastTransitionTime" in cond:
                new = {**new, "lastTransitionTime": cond["lastTransitionTime"]}
            out[i] = new
            return out
    out.append(new)
    return out


def owner_reference(obj: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def involved(obj: Mapping[str, Any], field_path: str | None = None) -> Obj:
    meta = obj["metadata"]
    ref = {
        "kind": obj["kind"],
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": obj["apiVersion"],
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def event(
    ref: Obj,
    reason: str,
    message: str,
    *,
    now: float,
    seq: int,
    warning: bool = False,
    component: str = "kubelet",
    host: str | None = None,
) -> Obj:
    """A ``v1`` Event as the event recorder writes it (``<object>.<hex nanoseconds>``)."""
    stamp = rfc3339(now)
    source: Obj = {"component": component}
    if host:
        source["host"] = host
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{ref['name']}.{int(now * 1e9) + seq:x}",
            "namespace": ref["namespace"],
            "annotations": {SIMULATED_ANNOTATION: SIMULATED_NOTE},
        },
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": source,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": component,
        "reportingInstance": host or component,
    }


# --------------------------------------------------------------------------- containers


def container_id(rng: random.Random) -> str:
    return "containerd://" + "".join(rng.choice("0123456789abcdef") for _ in range(64))


def image_id(image: str) -> str:
    if "@sha256:" in image:
        return image
    digest = hashlib.sha256(image.encode()).hexdigest()
    return f"{image.rsplit(':', 1)[0] if ':' in image.rsplit('/', 1)[-1] else image}@sha256:{digest}"


def waiting(name: str, image: str, reason: str, message: str | None = None, *, restarts: int = 0) -> Obj:
    state: Obj = {"reason": reason}
    if message:
        state["message"] = message
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "restartCount": restarts,
        "started": False,
        "state": {"waiting": state},
        "lastState": {},
    }


def running(
    name: str, image: str, cid: str, started_at: float, *, ready: bool = True, restarts: int = 0
) -> Obj:
    return {
        "name": name,
        "image": image,
        "imageID": image_id(image),
        "containerID": cid,
        "ready": ready,
        "restartCount": restarts,
        "started": True,
        "state": {"running": {"startedAt": rfc3339(started_at)}},
        "lastState": {},
    }


def terminated(
    name: str,
    image: str,
    cid: str,
    code: int,
    reason: str,
    started_at: float,
    finished_at: float,
    *,
    message: str | None = None,
    restarts: int = 0,
) -> Obj:
    state: Obj = {
        "exitCode": code,
        "reason": reason,
        "startedAt": rfc3339(started_at),
        "finishedAt": rfc3339(finished_at),
        "containerID": cid,
    }
    if message:
        state["message"] = message
    return {
        "name": name,
        "image": image,
        "imageID": image_id(image),
        "containerID": cid,
        "ready": False,
        "restartCount": restarts,
        "started": False,
        "state": {"terminated": state},
        "lastState": {},
    }


def sidecars(spec: Mapping[str, Any]) -> list[Obj]:
    """Native sidecars: init containers with ``restartPolicy: Always`` (they keep running)."""
    return [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]


def qos_class(spec: Mapping[str, Any]) -> str:
    """Guaranteed / Burstable / BestEffort, from the containers' requests and limits."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        any_set = any_set or bool(limits or requests)
        for kind in ("cpu", "memory"):
            limit = limits.get(kind)
            if limit is None or requests.get(kind, limit) != limit:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def requests_tpu(spec: Mapping[str, Any]) -> bool:
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        if TPU_RESOURCE in (res.get("limits") or {}) or TPU_RESOURCE in (res.get("requests") or {}):
            return True
    return False


def node_pool(spec: Mapping[str, Any]) -> str:
    selector = spec.get("nodeSelector") or {}
    if NODEPOOL_LABEL in selector:
        return str(selector[NODEPOOL_LABEL])
    if requests_tpu(spec):
        return "tpu-v6e-" + str(selector.get(TPU_TOPOLOGY_LABEL, "slice"))
    return "default-pool"


def node_name(rng: random.Random, pool: str) -> str:
    """GKE's node naming: ``gke-<cluster>-<pool>-<8 hex>-<4 chars>``."""
    group = "".join(rng.choice("0123456789abcdef") for _ in range(8))
    return f"gke-rlpipe-local-{pool}-{group}-{rand_suffix(rng, 4)}"


def unschedulable_message(spec: Mapping[str, Any]) -> str:
    """The scheduler's summary when no node fits (the resource it lacks most plausibly)."""
    if requests_tpu(spec):
        lacking = "Insufficient google.com/tpu"
        other = "node(s) didn't match Pod's node affinity/selector"
    else:
        lacking = "Insufficient cpu, 3 Insufficient memory"
        other = "node(s) had untolerated taint {google.com/tpu: present}"
    return (
        f"0/6 nodes are available: 3 {lacking}, 3 {other}. preemption: 0/6 nodes are available: "
        "3 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
    )
