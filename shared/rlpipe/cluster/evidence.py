"""Evidence: what Jobs, pods, Kueue and events say about why a workload failed.

Each finding is one fact with a failure class and a line a person reads; ``status.summarize`` picks
the strongest. Kept apart from the summary so each rule can be read (and cited) on its own.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from rlpipe.cluster.kinds import (
    HEAD_REPLICATED_JOB,
    REPLICATED_JOB_LABEL,
    Kind,
    Obj,
    _clean,
    _conditions,
    _true,
    _ts,
)
from rlpipe.core.failures import FailureClass

# --------------------------------------------------------------------------- results


def _cond_text(cond: Obj) -> str:
    reason, message = cond.get("reason") or "", _clean(cond.get("message"))
    return f"{reason}: {message}" if reason and message else (reason or message or cond.get("type", ""))


# --------------------------------------------------------------------------- evidence

# Ranks: lower wins (module docstring, rule 2).
RANK_PREEMPTED, RANK_RESOURCES, RANK_CONFIG, RANK_CAPACITY, RANK_PROGRAM_EXIT, RANK_OTHER_EXIT = range(6)

IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"})
# Waiting reasons that never resolve by themselves (a person must fix the image or the Secret).
FATAL_WAITING_REASONS = IMAGE_PULL_REASONS | {"CreateContainerConfigError"}
CONFIG_WAITING_REASONS = FATAL_WAITING_REASONS | {"CreateContainerError", "RunContainerError"}
CANNOT_START_REASONS = frozenset({"ContainerCannotRun", "StartError"})
# A pull failing for these reasons is the registry's hiccup, not a wrong image.
_TRANSIENT_PULL = re.compile(
    r"timeout|timed out|i/o|connection (reset|refused)|too many requests|\b429\b|\b50[0234]\b|"
    r"temporar|unavailable|EOF",
    re.IGNORECASE,
)
# Pod-level status reasons meaning the node went away under the pod.
NODE_LOST_REASONS = frozenset(
    {"NodeLost", "Shutdown", "NodeShutdown", "Terminated", "Preempting", "UnexpectedAdmissionError"}
)
_OVERUSE = re.compile(r"ephemeral|exceeds|usage of", re.IGNORECASE)
_MAINTENANCE = re.compile(r"maintenance", re.IGNORECASE)
_KUEUE_EVICTION = re.compile(r"preempt|evict", re.IGNORECASE)
KUEUE_EVICTION_CONDITIONS = ("Evicted", "Preempted")
UNSCHEDULED_REASONS = frozenset({"Unschedulable", "SchedulingGated"})


@dataclass(frozen=True)
class _Finding:
    failure_class: FailureClass
    rank: int
    text: str
    fatal_now: bool = False  # fails the workload before the controller does (it can never start)
    pending_since: datetime | None = None  # for unscheduled pods: when the wait started


def _job_findings(job: Obj) -> list[_Finding]:
    """A Job failed by its podFailurePolicy on a DisruptionTarget pod: preemption evidence that
    outlives the pod (the Job's condition message names it even after the pod is deleted)."""
    if (job.get("kind") or "Job") != "Job":
        return []
    failed = _true(_conditions(job), "Failed") or _true(_conditions(job), "FailureTarget")
    if not failed or failed.get("reason") != "PodFailurePolicy":
        return []
    message = _clean(failed.get("message"))
    if "DisruptionTarget" not in message:
        return []
    name = (job.get("metadata") or {}).get("name", "?")
    return [
        _Finding(
            FailureClass.PREEMPTED,
            RANK_PREEMPTED,
            f"Job {name} was failed by its pod failure policy: {message}",
        )
    ]


def _pod_role(kind: Kind, pod: Obj) -> str:
    if kind == "Job":
        return "pod"
    meta = pod.get("metadata") or {}
    rjob = (meta.get("labels") or {}).get(REPLICATED_JOB_LABEL)
    if rjob is None:
        rjob = HEAD_REPLICATED_JOB if f"-{HEAD_REPLICATED_JOB}-" in meta.get("name", "") else "worker"
    return "head pod" if rjob == HEAD_REPLICATED_JOB else f"{rjob} pod"


def _memory_limit(pod: Obj, container: str) -> str | None:
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if c.get("name") == container:
            return ((c.get("resources") or {}).get("limits") or {}).get("memory")
    return None


def _terminated_finding(
    pod: Obj, who: str, cname: str, term: Obj, *, program: bool, retryable: Collection[int], restarted: bool
) -> _Finding | None:
    code = term.get("exitCode")
    reason = term.get("reason") or ""
    message = _clean(term.get("message"), 200)
    tail = f": {message}" if message else ""
    before = " (before a restart)" if restarted else ""
    if reason == "OOMKilled":
        limit = _memory_limit(pod, cname)
        lim = f", memory limit {limit}" if limit else ""
        return _Finding(
            FailureClass.RESOURCES,
            RANK_RESOURCES,
            f"{who} container {cname} was OOMKilled{before} (exit code {code}{lim})",
        )
    if reason in CANNOT_START_REASONS:
        return _Finding(
            FailureClass.PERMANENT,
            RANK_CONFIG,
            f"{who} container {cname} could not start ({reason}, exit code {code}){tail}",
        )
    if not isinstance(code, int) or code == 0:
        return None
    what = (
        f"{who} container {cname} exited with code {code}{before}" + (f" ({reason})" if reason else "") + tail
    )
    if program:
        cls = FailureClass.TRANSIENT if code in retryable else FailureClass.PERMANENT
        if cls is FailureClass.TRANSIENT:
            what += " [retryable exit code]"
        return _Finding(cls, RANK_PROGRAM_EXIT, what)
    return _Finding(FailureClass.PERMANENT, RANK_OTHER_EXIT, what)


def _pod_findings(kind: Kind, pod: Obj, *, retryable_exit_codes: Collection[int] = ()) -> list[_Finding]:
    """Everything one pod says about why its workload is stuck or failed."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    name = meta.get("name", "?")
    node = (pod.get("spec") or {}).get("nodeName")
    role = _pod_role(kind, pod)
    who = f"{role} {name}"
    where = f" on node {node}" if node else ""
    conds = _conditions(pod)
    found: list[_Finding] = []

    disruption = _true(conds, "DisruptionTarget")
    if disruption:
        found.append(
            _Finding(
                FailureClass.PREEMPTED,
                RANK_PREEMPTED,
                f"{who}{where} was disrupted ({_cond_text(disruption)})",
            )
        )
    pod_reason, pod_message = status.get("reason") or "", _clean(status.get("message"))
    if pod_reason == "Evicted":
        cls, rank = (
            (FailureClass.RESOURCES, RANK_RESOURCES)
            if _OVERUSE.search(pod_message)
            else (FailureClass.PREEMPTED, RANK_PREEMPTED)
        )
        found.append(_Finding(cls, rank, f"{who}{where} was evicted: {pod_message}"))
    elif (
        pod_reason in NODE_LOST_REASONS
        or status.get("phase") == "Unknown"
        or _MAINTENANCE.search(pod_message)
    ):
        why = pod_reason or status.get("phase") or "maintenance"
        found.append(
            _Finding(
                FailureClass.PREEMPTED,
                RANK_PREEMPTED,
                f"{who}{where} lost its node ({why}" + (f": {pod_message})" if pod_message else ")"),
            )
        )

    scheduled = conds.get("PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") in UNSCHEDULED_REASONS:
        since = _ts(meta.get("creationTimestamp")) or _ts(scheduled.get("lastTransitionTime"))
        found.append(
            _Finding(
                FailureClass.CAPACITY,
                RANK_CAPACITY,
                f"{who} is {scheduled.get('reason')}: {_clean(scheduled.get('message'))}",
                pending_since=since,
            )
        )

    program_containers = kind == "Job" or role == "head pod"
    for key, program in (("initContainerStatuses", False), ("containerStatuses", program_containers)):
        for cs in status.get(key) or []:
            cname = cs.get("name", "?")
            state, last = cs.get("state") or {}, cs.get("lastState") or {}
            waiting = state.get("waiting") or {}
            wreason = waiting.get("reason") or ""
            if wreason in CONFIG_WAITING_REASONS:
                wmessage = _clean(waiting.get("message"))
                text = f"{who} container {cname} is waiting: {wreason}: {wmessage or cs.get('image', '')}"
                if wreason in IMAGE_PULL_REASONS and _TRANSIENT_PULL.search(wmessage):
                    found.append(
                        _Finding(FailureClass.TRANSIENT, RANK_OTHER_EXIT, text + " [registry error]")
                    )
                else:
                    found.append(
                        _Finding(
                            FailureClass.PERMANENT,
                            RANK_CONFIG,
                            text,
                            fatal_now=wreason in FATAL_WAITING_REASONS,
                        )
                    )
            for term, restarted in ((state.get("terminated"), False), (last.get("terminated"), True)):
                if term:
                    finding = _terminated_finding(
                        pod,
                        who,
                        cname,
                        term,
                        program=program,
                        retryable=retryable_exit_codes,
                        restarted=restarted,
                    )
                    if finding:
                        found.append(finding)
    return found


def _strongest(findings: Iterable[_Finding]) -> list[_Finding]:
    """Strongest first; a stable sort keeps pod order (by name) within a rank."""
    return sorted(findings, key=lambda f: f.rank)


def _kueue_eviction(obj: Obj, events: Iterable[Obj]) -> _Finding | None:
    """Kueue took the admission back: an Evicted/Preempted condition on the workload, or (while it
    is suspended again) Kueue's Preempted/Evicted/Stopped event on the workload or its Workload."""
    conds = _conditions(obj)
    for kind in KUEUE_EVICTION_CONDITIONS:
        cond = _true(conds, kind)
        if cond:
            return _Finding(FailureClass.PREEMPTED, RANK_PREEMPTED, f"evicted by Kueue ({_cond_text(cond)})")
    if not (obj.get("spec") or {}).get("suspend"):
        return None  # re-admitted since: old eviction events are history
    for event in _newest_first(events):
        reason, message = event.get("reason") or "", _clean(event.get("message"))
        if reason in KUEUE_EVICTION_CONDITIONS or (reason == "Stopped" and _KUEUE_EVICTION.search(message)):
            return _Finding(FailureClass.PREEMPTED, RANK_PREEMPTED, f"evicted by Kueue ({reason}: {message})")
    return None


def _event_time(event: Obj) -> datetime:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        ts = _ts(event.get(key))
        if ts:
            return ts
    return _ts((event.get("metadata") or {}).get("creationTimestamp")) or datetime.min.replace(tzinfo=UTC)


def _newest_first(events: Iterable[Obj]) -> list[Obj]:
    return sorted(events, key=_event_time, reverse=True)


def _pod_counts(pods: Iterable[Obj]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def _is_scheduled(pod: Obj) -> bool:
    scheduled = _conditions(pod).get("PodScheduled")
    return bool((scheduled and scheduled.get("status") == "True") or (pod.get("spec") or {}).get("nodeName"))
