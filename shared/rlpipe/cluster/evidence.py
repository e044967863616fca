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
    KUEUE_ADMITTED,
    KUEUE_EVICTED_PREFIX,
    KUEUE_PREEMPTED,
    KUEUE_STARTED,
    KUEUE_STOPPED,
    KUEUE_WORKLOAD_KIND,
    REPLICATED_JOB_LABEL,
    Kind,
    Obj,
    _clean,
    _conditions,
    _jobset_fails_on,
    _pod_failure_action,
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


# --------------------------------------------------------------------------- Kueue eviction

# The Evicted condition's reason (Kueue v0.14.8, apis/kueue/v1beta1/workload_types.go:673-705) and
# what it means for the pipeline. Deactivated carries its cause ("DeactivatedDueTo<cause>",
# pkg/workload/workload.go:1306-1307). AdmissionCheck (a ProvisioningRequest to retry) is not a
# failure: Kueue requeues the workload itself after a backoff (workload_controller.go:553-556).
# A workload deactivated because an admission check was Rejected: for flex-start, Kueue's
# ProvisioningRequest failed past its retries (or its capacity was revoked), i.e. no TPU capacity
# to be had now (Kueue pkg/controller/admissionchecks/provisioning/controller.go:617-679,
# core/workload_controller.go:905-936: Evicted reason DeactivatedDueToAdmissionCheck). A new
# attempt makes a new ProvisioningRequest, so it is `capacity`, not the request's fault.
DEACTIVATED_BY_ADMISSION_CHECK = "DeactivatedDueToAdmissionCheck"
EVICTION_CLASSES: dict[str, FailureClass | None] = {
    "Preempted": FailureClass.PREEMPTED,  # L673: another workload needed the quota
    "NodeFailures": FailureClass.PREEMPTED,  # L693: TAS nodes failed under it
    "PodsReadyTimeout": FailureClass.CAPACITY,  # L677: pods not ready in time (no room to start)
    "LocalQueueStopped": FailureClass.PERMANENT,  # L689: a person stopped the queue
    "ClusterQueueStopped": FailureClass.PERMANENT,  # L685
    "Deactivated": FailureClass.PERMANENT,  # L705: spec.active=false; nothing resumes it by itself
    DEACTIVATED_BY_ADMISSION_CHECK: FailureClass.CAPACITY,
    "AdmissionCheck": None,  # L681: requeued by Kueue with a backoff
}
# The Stopped event's message is the Evicted condition's message (jobframework/reconciler.go:542,
# 1151, 1184); when the Workload's own events are gone, the message still says which reason it was.
_STOPPED_MESSAGES = (
    (re.compile(r"^Preempted to accommodate"), "Preempted"),  # preemption/preemption.go:163
    (re.compile(r"^Exceeded the PodsReady timeout"), "PodsReadyTimeout"),  # workload_controller.go:703
    (re.compile(r"^The LocalQueue is stopped"), "LocalQueueStopped"),  # workload_controller.go:588
    (re.compile(r"^The ClusterQueue is stopped"), "ClusterQueueStopped"),  # workload_controller.go:629
    # evict.go:180-183: "The workload is deactivated due to <what>"; an admission check's rejection
    # names it (workload_controller.go:905-936, patching.go:302-304). Kueue v0.17.1 words it
    # "... due to Admission check(s): <names>, were rejected" (workload_controller.go:463-468, :737),
    # as the real Kueue wrote it in tests/test_real_flex_start.py.
    (
        re.compile(r"^The workload is deactivated due to (AdmissionCheck|Admission [Cc]heck)"),
        DEACTIVATED_BY_ADMISSION_CHECK,
    ),
    (re.compile(r"^The workload is deactivated"), "Deactivated"),  # workload_controller.go:313-318
    (re.compile(r"^At least one admission check is false"), "AdmissionCheck"),  # workload_controller.go:554
    # tas/node_failure_controller.go:57, scheduler/scheduler.go:583
    (re.compile(r"TAS assigned node failures|no replacement for unhealthy node"), "NodeFailures"),
)


def eviction_class(reason: str) -> FailureClass | None:
    """The failure class of a Kueue eviction reason; an unknown reason is a preemption (Kueue took
    the admission back; the next attempt resumes from the last checkpoint)."""
    if reason == DEACTIVATED_BY_ADMISSION_CHECK:
        return FailureClass.CAPACITY
    if reason.startswith("Deactivated"):
        return FailureClass.PERMANENT
    return EVICTION_CLASSES.get(reason, FailureClass.PREEMPTED)


@dataclass(frozen=True)
class KueueEviction:
    """Kueue evicted the workload since its latest admission: ``reason`` is the Workload's Evicted
    condition reason, ``failure_class`` None when Kueue requeues it by itself."""

    reason: str
    message: str
    failure_class: FailureClass | None

    @property
    def text(self) -> str:
        return (
            f"evicted by Kueue ({self.reason}: {self.message})"
            if self.message
            else f"evicted by Kueue ({self.reason})"
        )

    def finding(self) -> _Finding:
        cls = self.failure_class or FailureClass.CAPACITY
        rank = {FailureClass.PREEMPTED: RANK_PREEMPTED, FailureClass.CAPACITY: RANK_CAPACITY}.get(
            cls, RANK_CONFIG
        )
        return _Finding(cls, rank, self.text)


def _stopped_reason(message: str) -> str | None:
    return next((reason for pattern, reason in _STOPPED_MESSAGES if pattern.search(message)), None)


def _kueue_eviction(obj: Obj, events: Iterable[Obj]) -> KueueEviction | None:
    """Kueue took the admission back: while the workload is suspended, Kueue's ``EvictedDueTo<reason>``
    (and ``Preempted``) events on its Workload, or its ``Stopped`` event on the workload, newer than
    its latest admission (``Started`` on the workload, ``QuotaReserved``/``Admitted`` on the Workload).
    Kueue writes no Evicted or Preempted condition on a Job or JobSet, so none is read."""
    if not (obj.get("spec") or {}).get("suspend"):
        return None  # running again (re-admitted): older evictions are history
    events = _newest_first(events)
    # The latest admission; older events are history. Event times have one-second resolution, so
    # an eviction in the same second as the admission counts: the workload is suspended now.
    admitted_at = next((_event_time(e) for e in events if _is_admission(e)), None)
    evicted: Obj | None = None
    stopped: Obj | None = None
    for event in events:
        if admitted_at is not None and _event_time(event) < admitted_at:
            break
        on_workload = (event.get("involvedObject") or {}).get("kind") == KUEUE_WORKLOAD_KIND
        reason = event.get("reason") or ""
        if on_workload and evicted is None and reason.startswith(KUEUE_EVICTED_PREFIX):
            evicted = event
        elif on_workload and evicted is None and reason == KUEUE_PREEMPTED:
            evicted = {**event, "reason": KUEUE_EVICTED_PREFIX + "Preempted"}
        elif (
            not on_workload
            and stopped is None
            and reason == KUEUE_STOPPED
            and _stopped_reason(_clean(event.get("message")))
        ):
            stopped = event
    if evicted is not None:
        message = _clean(evicted.get("message")) or _clean((stopped or {}).get("message"))
        why = (evicted.get("reason") or "")[len(KUEUE_EVICTED_PREFIX) :]
        return KueueEviction(why, message, eviction_class(why))
    if stopped is not None:
        message = _clean(stopped.get("message"))
        why = _stopped_reason(message) or "Preempted"
        return KueueEviction(why, message, eviction_class(why))
    return None


def _is_admission(event: Obj) -> bool:
    on_workload = (event.get("involvedObject") or {}).get("kind") == KUEUE_WORKLOAD_KIND
    reason = event.get("reason") or ""
    return (on_workload and reason in KUEUE_ADMITTED) or (not on_workload and reason == KUEUE_STARTED)


# --------------------------------------------------------------------------- certain failures

# The preemption race (issue 14): with ``maxRestarts: 0`` the JobSet fails at its first Failed child
# Job and then deletes the Jobs still active (JobSet v0.10.1 jobset_controller.go:162-191, 589-612,
# foreground). A disrupted worker's Job is still only at FailureTarget until its other pods have
# terminated (k8s job_controller enactJobFinished, "Delaying marking the Job as finished"), so if the
# head's Job fails first the worker's Job, its pods and the evidence are deleted. The verdict is
# therefore given as soon as the failure is certain, before the JobSet controller acts.


def _doomed(kind: Kind, obj: Obj, pods: Iterable[Obj], child_jobs: Iterable[Obj]) -> _Finding | None:
    """A disruption the controllers are certain to turn into the workload's failure, before they do:
    a child Job at ``FailureTarget`` by its podFailurePolicy on ``DisruptionTarget``, or a disrupted
    pod that its Job's podFailurePolicy fails (a TPU worker from the moment it is disrupted, the
    program's pod once in phase Failed), in a JobSet whose failure policy then fails (a Job at
    FailureTarget is already failed for :func:`summarize`)."""
    spec = obj.get("spec") or {}
    templates = {
        r.get("name", ""): ((r.get("template") or {}).get("spec") or {})
        for r in spec.get("replicatedJobs") or []
    }
    for job in child_jobs if kind == "JobSet" else ():
        rjob = ((job.get("metadata") or {}).get("labels") or {}).get(REPLICATED_JOB_LABEL, "")
        target = _true(_conditions(job), "FailureTarget")
        if target and not _true(_conditions(job), "Failed"):
            for finding in _job_findings(job):
                how = _jobset_fails_on(obj, rjob, "PodFailurePolicy", _clean(target.get("message")))
                if how:
                    return _Finding(
                        finding.failure_class, finding.rank, f"{finding.text}; the JobSet fails next: {how}"
                    )
    for pod in pods:
        disruption = _true(_conditions(pod), "DisruptionTarget")
        if not disruption:
            continue
        labels = (pod.get("metadata") or {}).get("labels") or {}
        rjob = labels.get(REPLICATED_JOB_LABEL, "")
        policy = (
            (templates.get(rjob) or {}).get("podFailurePolicy")
            if kind == "JobSet"
            else spec.get("podFailurePolicy")
        )
        # A TPU worker never exits 0 (it serves until the JobSet ends), so once it is disrupted its
        # end is known before it comes; the program's pod could still finish in its grace period.
        worker = kind == "JobSet" and _pod_role(kind, pod) not in ("head pod",)
        decided = _pod_failure_action(policy, pod, before_exit=worker)
        if not decided or decided[0] != "FailJob":
            continue
        how = (
            _jobset_fails_on(obj, rjob, "PodFailurePolicy", decided[1])
            if kind == "JobSet"
            else "the Job fails"
        )
        if how:
            who = f"{_pod_role(kind, pod)} {(pod.get('metadata') or {}).get('name', '?')}"
            return _Finding(
                FailureClass.PREEMPTED,
                RANK_PREEMPTED,
                f"{who} was disrupted ({_cond_text(disruption)}) and its Job's podFailurePolicy fails it; "
                f"{'the JobSet fails next: ' if kind == 'JobSet' else ''}{how}",
            )
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


def _on_node(pod: Obj) -> bool:
    scheduled = _conditions(pod).get("PodScheduled")
    return bool((scheduled and scheduled.get("status") == "True") or (pod.get("spec") or {}).get("nodeName"))


def _is_scheduled(pod: Obj) -> bool:
    """On a node and not being deleted. A pod with a deletionTimestamp no longer holds the
    workload's place: after a Kueue eviction every pod is terminating on its node while the
    reasons are in the events (the client reads them when no pod is scheduled)."""
    return _on_node(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")
