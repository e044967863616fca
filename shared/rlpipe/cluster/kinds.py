"""The shared vocabulary of :mod:`rlpipe.cluster`: the object kinds it launches, their API group,
version and plural, the labels the Job and JobSet controllers put on what they make, and tiny helpers
that read any Kubernetes object (timestamps, conditions, deletion, ownership) or bound a message.

It imports nothing from the other modules of the package, which all import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from rlpipe.core.failures import PermanentFailure

Obj = dict[str, Any]
Kind = Literal["Job", "JobSet"]
Phase = Literal["queued", "running", "succeeded", "failed"]

KINDS: tuple[Kind, ...] = ("Job", "JobSet")
JOB_GROUP, JOB_VERSION, JOB_PLURAL = "batch", "v1", "jobs"
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"

# Labels the controllers put on the pods (and, for JobSets, on the child Jobs).
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
# Must equal rlpipe.core.manifests.pathways.HEAD (a test keeps them equal; importing the manifests
# here would pull pydantic into every status poll).
HEAD_REPLICATED_JOB = "pathways-head"


# --------------------------------------------------------------------------- small helpers


def _ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
_MAX_MESSAGE = 300


def _clean(text: Any, limit: int = _MAX_MESSAGE) -> str:
    """One line, bounded, with anything shaped like a Hugging Face token removed: termination
    messages are the program's last log lines, and reasons end up in the ledger. Long text loses
    its middle, not its end: the end holds the verdict ("...: not found", the exception line)."""
    line = " ".join(str(text or "").split())
    line = _HF_TOKEN.sub("hf_***", line)
    if len(line) <= limit:
        return line
    head = (limit - 1) // 2
    return line[:head] + "…" + line[len(line) - (limit - 1 - head) :]


def _conditions(obj: Obj) -> dict[str, Obj]:
    """Latest condition per type (later entries win, as controllers append)."""
    out: dict[str, Obj] = {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type"):
            out[cond["type"]] = cond
    return out


def _true(conds: Mapping[str, Obj], kind: str) -> Obj | None:
    cond = conds.get(kind)
    return cond if cond and str(cond.get("status")) == "True" else None


def _deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _is_jobset_child(job: Obj) -> str | None:
    """The owning JobSet's name if this Job is a JobSet's child (it carries the run labels too)."""
    meta = job.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "JobSet":
            return ref.get("name")
    return (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)


def _gvp(kind: Kind) -> tuple[str, str, str]:
    return (
        (JOB_GROUP, JOB_VERSION, JOB_PLURAL)
        if kind == "Job"
        else (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)
    )


def _kind_of(obj: Obj) -> Kind:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if (api_version, kind) == (f"{JOB_GROUP}/{JOB_VERSION}", "Job"):
        return "Job"
    if (api_version, kind) == (f"{JOBSET_GROUP}/{JOBSET_VERSION}", "JobSet"):
        return "JobSet"
    raise PermanentFailure(
        f"cannot apply {api_version}/{kind}: only batch/v1 Job and "
        f"{JOBSET_GROUP}/{JOBSET_VERSION} JobSet are launched"
    )
