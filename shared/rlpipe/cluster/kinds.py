"""The shared vocabulary of :mod:`rlpipe.cluster`: the object kinds it launches, their API group,
version and plural, the labels the Job and JobSet controllers put on what they make, and tiny helpers
that read any Kubernetes object (timestamps, conditions, deletion, ownership) or bound a message.

It imports nothing from the other modules of the package, which all import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from rlpipe.core.failures import PermanentFailure
from rlpipe.core.timestamps import parse_rfc3339

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
# Kueue v0.14.8 (commit 2f2a452481b23fd664e4133ad51de1caa1d49c3a). Kueue never writes a condition
# on the Job or JobSet: Evicted/Preempted are conditions of its Workload object. What reaches the
# Job/JobSet is ``spec.suspend: true`` and these events.
KUEUE_WORKLOAD_KIND = "Workload"
# Kueue's Workload API as the deploy's Kueue (v0.17.8, infra/cluster/k8s/kueue.yaml) serves it; a
# Workload is labelled with the uid of the job it stands for (Kueue constants.go JobUIDLabel).
KUEUE_GROUP, KUEUE_VERSION, KUEUE_WORKLOAD_PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
KUEUE_STARTED = "Started"  # on the job, "Admitted by clusterQueue <cq>": jobframework/events.go:21, reconciler.go:1104,1135
KUEUE_STOPPED = "Stopped"  # on the job, message = the Evicted condition's: jobframework/events.go:23, reconciler.go:1151,1184
KUEUE_EVICTED_PREFIX = (
    "EvictedDueTo"  # on the Workload: pkg/workload/workload.go:1367-1371 (ReasonWithCause, L1430)
)
KUEUE_PREEMPTED = "Preempted"  # on the Workload: pkg/scheduler/preemption/preemption.go:190
KUEUE_ADMITTED = ("QuotaReserved", "Admitted")  # on the Workload: pkg/scheduler/scheduler.go:815, 829

# Must equal rlpipe.core.manifests.pathways.HEAD (a test keeps them equal; importing the manifests
# here would pull pydantic into every status poll).
HEAD_REPLICATED_JOB = "pathways-head"


# --------------------------------------------------------------------------- small helpers


_ts = parse_rfc3339


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


# The most a FallbackToLogsOnError message holds (k8s pkg/kubelet/container/runtime.go).
FALLBACK_MESSAGE_BYTES = 2048


def last_words(text: Any, limit: int = _MAX_MESSAGE) -> str:
    """A container's termination message as one bounded line that keeps its end: with
    FallbackToLogsOnError it is the program's last log lines (up to 2 KiB), and the verdict (the
    exception, ``... exited with status N``) is at the bottom, after whatever the program said
    first. Tokens are masked as in :func:`_clean`; a message of the kubelet's whole 2048 bytes may
    begin inside a line (a token cut before its ``hf_``), so that first line is left out."""
    text = str(text or "")
    if len(text.encode()) >= FALLBACK_MESSAGE_BYTES and "\n" in text:
        text = text.split("\n", 1)[1]
    line = _HF_TOKEN.sub("hf_***", " ".join(text.split()))
    return line if len(line) <= limit else "…" + line[len(line) - (limit - 1) :]


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
            return str(ref["name"]) if ref.get("name") else None
    name = (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)
    return str(name) if name else None


# --------------------------------------------------------------------------- the controllers' policies


def _pod_failure_action(policy: Obj | None, pod: Obj, *, before_exit: bool = False) -> tuple[str, str] | None:
    """(action, the Job controller's message) of the first ``podFailurePolicy`` rule matching a pod
    in phase Failed (k8s pkg/controller/job/pod_failure_policy.go @ 95f08499: rules in order, first
    match wins; messages L56 and L73). With a podFailurePolicy the Job controller judges a pod only
    in phase Failed (job_controller.go isPodFailed); ``before_exit`` asks what it will decide for a
    pod that has not exited yet, which is known only if no exit-code rule comes first."""
    status = pod.get("status") or {}
    if (
        not policy
        or status.get("phase") == "Succeeded"
        or (status.get("phase") != "Failed" and not before_exit)
    ):
        return None
    meta = pod.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '?')}"
    codes = [
        (cs.get("name", "?"), term.get("exitCode"))
        for key in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(key) or []
        if isinstance(term := (cs.get("state") or {}).get("terminated"), dict)
    ]
    conds = _conditions(pod)
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action", "")
        on_codes = rule.get("onExitCodes")
        if on_codes and status.get("phase") != "Failed":
            return None  # decided by an exit code not known yet
        if on_codes:
            values, negate = set(on_codes.get("values") or []), on_codes.get("operator") == "NotIn"
            for cname, code in codes:
                if not isinstance(code, int) or code == 0:
                    continue
                if on_codes.get("containerName") not in (None, cname):
                    continue
                if (code in values) != negate:
                    return action, (
                        f"Container {cname} for pod {who} failed with exit code {code} "
                        f"matching {action} rule at index {index}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            cond = conds.get(pattern.get("type", ""))
            if cond and str(cond.get("status")) == str(pattern.get("status", "True")):
                return (
                    action,
                    f"Pod {who} has condition {pattern.get('type')} matching {action} rule at index {index}",
                )
    return None


def _jobset_fails_on(jobset: Obj, rjob: str, reason: str, message: str) -> str | None:
    """How the JobSet controller ends the JobSet when a child Job of ``rjob`` fails with (reason,
    message), or None when it restarts the JobSet instead (JobSet v0.10.1 failure_policy.go: no
    policy L49-57; rules in order L83, ruleIsApplicable L138-160; default RestartJobSet L41;
    RestartJobSet fails once restartsCountTowardsMax >= maxRestarts L220-226)."""
    policy = (jobset.get("spec") or {}).get("failurePolicy")
    if not policy:
        return "FailedJobs (no failurePolicy)"
    action = "RestartJobSet"
    for rule in policy.get("rules") or []:
        reasons, targets = rule.get("onJobFailureReasons") or [], rule.get("targetReplicatedJobs") or []
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if reasons and reason not in reasons:
            continue
        if patterns and not any(_search(p, message) for p in patterns):
            continue
        if targets and rjob not in targets:
            continue
        action = rule.get("action", "RestartJobSet")
        break
    if action == "FailJobSet":
        return "FailJobSet failure policy action"
    if action == "RestartJobSet":
        counted = int((jobset.get("status") or {}).get("restartsCountTowardsMax") or 0)
        limit = int(policy.get("maxRestarts") or 0)
        if counted >= limit:
            return f"ReachedMaxRestarts (maxRestarts {limit})"
    return None


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False  # the controller logs an invalid pattern and skips it


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
