"""Object helpers for the store: metadata, Job defaulting, ownership."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from .resources import (
    JOB_NAME_LABELS,
    JOB_UID_LABELS,
    JOBS,
    JOBSET_NAME_LABEL,
    JOBSET_UID_LABEL,
    JOBSETS,
    Obj,
    Resource,
)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _rv_of(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def _spec_part(obj: Obj) -> Obj:
    """Everything that drives ``generation``: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _without_rv(obj: Obj) -> Obj:
    stripped = copy.deepcopy(obj)
    stripped.get("metadata", {}).pop("resourceVersion", None)
    return stripped


def apply_job_defaults(job: Obj) -> None:
    """A subset of the apiserver's Job defaulting (SetDefaults_Job + the strategy's
    selector/labels), so a simulator finds the same labels a real Job controller would set."""
    meta, spec = job["metadata"], job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return  # leave it to the validator to complain
    uid, name = meta["uid"], meta["name"]
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault(
        "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    if not spec.get("manualSelector"):
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        template = spec.setdefault("template", {})
        if isinstance(template, dict):
            tmeta = template.setdefault("metadata", {})
            labels = tmeta.setdefault("labels", {}) if isinstance(tmeta, dict) else None
            if isinstance(labels, dict):
                for key in JOB_UID_LABELS:
                    labels.setdefault(key, uid)
                for key in JOB_NAME_LABELS:
                    labels.setdefault(key, name)


def owned_pod_labels_match(owner_res: Resource, owner: Obj, pod: Obj) -> bool:
    """Does ``pod`` carry the labels its Job/JobSet controller would have put on it?"""
    meta = owner["metadata"]
    labels = pod.get("metadata", {}).get("labels") or {}
    names: tuple[str, ...]
    uids: tuple[str, ...]
    if owner_res is JOBS:
        names, uids = JOB_NAME_LABELS, JOB_UID_LABELS
    elif owner_res is JOBSETS:
        names, uids = (JOBSET_NAME_LABEL,), (JOBSET_UID_LABEL,)
    else:
        return False
    if not any(labels.get(k) == meta["name"] for k in names):
        return False
    # A uid label, when present, must be this owner's: a recreated Job of the same name
    # must not take the previous incarnation's pods with it.
    return all(labels.get(k, meta["uid"]) == meta["uid"] for k in uids)


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])
