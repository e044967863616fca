"""Evidence: what Jobs, pods, Kueue and events say about a workload, read as facts.

Each :class:`~rlpipe.core.failure_rules.evidence.Finding` is one fact (its ``Sign``) with the line a
person reads; :func:`gather` collects them with the rest of what the rules judge (conditions,
suspension, waits, events) into a ``WorkloadEvidence``. Nothing here decides a phase or a failure
class: the rules do (``core.failure_rules.workload``), and ``status.summarize`` applies them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
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
    last_words,
)
from rlpipe.core import identity
from rlpipe.core.failure_rules.evidence import Finding, Sign, WorkloadEvidence
from rlpipe.core.failure_rules.workload import DEACTIVATED_BY_ADMISSION_CHECK


def _cond_text(cond: Obj) -> str:
    reason, message = cond.get("reason") or "", _clean(cond.get("message"))
    return f"{reason}: {message}" if reason and message else (reason or message or cond.get("type", ""))


# --------------------------------------------------------------------------- evidence

IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"})
# Waiting reasons that never resolve by themselves (a person must fix the image or the Secret).
FATAL_WAITING_REASONS = IMAGE_PULL_REASONS | {"CreateContainerConfigError"}
CONFIG_WAITING_REASONS = FATAL_WAITING_REASONS | {"CreateContainerError", "RunContainerError"}
CANNOT_START_REASONS = frozenset({"ContainerCannotRun", "StartError"})
# A pull failing with these words is the registry's hiccup, not a wrong image.
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


def _job_findings(job: Obj) -> list[Finding]:
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
        Finding(Sign.JOB_FAILED_ON_DISRUPTION, f"Job {name} was failed by its pod failure policy: {message}")
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
    pod: Obj, who: str, cname: str, term: Obj, *, program: bool, restarted: bool
) -> Finding | None:
    code = term.get("exitCode")
    reason = term.get("reason") or ""
    message = last_words(term.get("message"))
    tail = f": {message}" if message else ""
    before = " (before a restart)" if restarted else ""
    if reason == "OOMKilled":
        limit = _memory_limit(pod, cname)
        lim = f", memory limit {limit}" if limit else ""
        return Finding(
            Sign.OOM_KILLED, f"{who} container {cname} was OOMKilled{before} (exit code {code}{lim})"
        )
    if reason in CANNOT_START_REASONS:
        return Finding(
            Sign.CONTAINER_CANNOT_START,
            f"{who} container {cname} could not start ({reason}, exit code {code}){tail}",
        )
    if not isinstance(code, int) or code == 0:
        return None
    what = (
        f"{who} container {cname} exited with code {code}{before}" + (f" ({reason})" if reason else "") + tail
    )
    return Finding(Sign.PROGRAM_EXIT if program else Sign.OTHER_EXIT, what, exit_code=code)


def _pod_findings(kind: Kind, pod: Obj) -> list[Finding]:
    """Everything one pod says about why its workload is stuck or failed."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    name = meta.get("name", "?")
    node = (pod.get("spec") or {}).get("nodeName")
    role = _pod_role(kind, pod)
    who = f"{role} {name}"
    where = f" on node {node}" if node else ""
    conds = _conditions(pod)
    found: list[Finding] = []

    disruption = _true(conds, "DisruptionTarget")
    if disruption:
        found.append(Finding(Sign.POD_DISRUPTED, f"{who}{where} was disrupted ({_cond_text(disruption)})"))
    pod_reason, pod_message = status.get("reason") or "", _clean(status.get("message"))
    if pod_reason == "Evicted":
        sign = Sign.POD_EVICTED_FOR_OVERUSE if _OVERUSE.search(pod_message) else Sign.POD_EVICTED
        found.append(Finding(sign, f"{who}{where} was evicted: {pod_message}"))
    elif (
        pod_reason in NODE_LOST_REASONS
        or status.get("phase") == "Unknown"
        or _MAINTENANCE.search(pod_message)
    ):
        why = pod_reason or status.get("phase") or "maintenance"
        found.append(
            Finding(
                Sign.NODE_LOST,
                f"{who}{where} lost its node ({why}" + (f": {pod_message})" if pod_message else ")"),
            )
        )

    scheduled = conds.get("PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") in UNSCHEDULED_REASONS:
        since = _ts(meta.get("creationTimestamp")) or _ts(scheduled.get("lastTransitionTime"))
        found.append(
            Finding(
                Sign.POD_UNSCHEDULABLE,
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
                    found.append(Finding(Sign.IMAGE_PULL_REGISTRY_ERROR, text))
                else:
                    found.append(
                        Finding(
                            Sign.CONTAINER_CONFIG_ERROR, text, never_resolves=wreason in FATAL_WAITING_REASONS
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
                        restarted=restarted,
                    )
                    if finding:
                        found.append(finding)
    return found


# --------------------------------------------------------------------------- Kueue eviction

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
    # as the real Kueue wrote it in tests/cluster/real_plane/test_real_flex_start.py.
    (
        re.compile(r"^The workload is deactivated due to (AdmissionCheck|Admission [Cc]heck)"),
        DEACTIVATED_BY_ADMISSION_CHECK,
    ),
    (re.compile(r"^The workload is deactivated"), "Deactivated"),  # workload_controller.go:313-318
    (re.compile(r"^At least one admission check is false"), "AdmissionCheck"),  # workload_controller.go:554
    # tas/node_failure_controller.go:57, scheduler/scheduler.go:583
    (re.compile(r"TAS assigned node failures|no replacement for unhealthy node"), "NodeFailures"),
)


def _stopped_reason(message: str) -> str | None:
    return next((reason for pattern, reason in _STOPPED_MESSAGES if pattern.search(message)), None)


def _kueue_eviction(obj: Obj, events: Iterable[Obj]) -> Finding | None:
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
        return _eviction((evicted.get("reason") or "")[len(KUEUE_EVICTED_PREFIX) :], message)
    if stopped is not None:
        message = _clean(stopped.get("message"))
        return _eviction(_stopped_reason(message) or "Preempted", message)
    return None


def _eviction(reason: str, message: str) -> Finding:
    """Kueue's eviction: ``reason`` is the Workload's Evicted condition reason."""
    text = f"evicted by Kueue ({reason}: {message})" if message else f"evicted by Kueue ({reason})"
    return Finding(Sign.KUEUE_EVICTED, text, eviction_reason=reason)


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


def _doomed(kind: Kind, obj: Obj, pods: Iterable[Obj], child_jobs: Iterable[Obj]) -> Finding | None:
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
                    return Finding(Sign.FAILURE_CERTAIN, f"{finding.text}; the JobSet fails next: {how}")
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
            return Finding(
                Sign.FAILURE_CERTAIN,
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


# --------------------------------------------------------------------------- all of it


def gather(
    kind: Kind,
    obj: Obj,
    pods: list[Obj],
    events: list[Obj],
    *,
    now: datetime,
    retryable_exit_codes: Collection[int] = (),
    queued_deadline_seconds: float | None = None,
    child_jobs: Iterable[Obj] = (),
) -> WorkloadEvidence:
    """What a workload, its pods, its child Jobs and its events say, as the rules read it."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conds = _conditions(obj)
    created = _ts(meta.get("creationTimestamp"))
    suspended = bool(spec.get("suspend"))
    success = _true(conds, "Complete") or _true(conds, "Completed") or _true(conds, "SuccessCriteriaMet")
    failed = _true(conds, "Failed") or _true(conds, "FailureTarget")
    child_jobs = list(child_jobs)
    # Timed from the latest suspension (Kueue's at creation, or an eviction after hours of
    # running); a Suspended condition keeps its transition time while its status stays True.
    held = _true(conds, "Suspended")
    # Measured from admission, not creation: a workload queued in Kueue for hours has had no
    # chance to create pods until a moment ago.
    resumed = conds.get("Suspended")
    resumed_at = (
        _ts(resumed.get("lastTransitionTime")) if resumed and resumed.get("status") == "False" else None
    )
    return WorkloadEvidence(
        kind=kind,
        name=meta.get("name", "?"),
        now=now,
        succeeded=bool(success) or status.get("terminalState") == "Completed",
        success_condition=_cond_text(success) if success else None,
        failed=bool(failed) or status.get("terminalState") == "Failed",
        failed_condition=_cond_text(failed) if failed else None,
        findings=(
            *(f for pod in pods for f in _pod_findings(kind, pod)),
            *(f for job in [obj, *child_jobs] for f in _job_findings(job)),
        ),
        eviction=_kueue_eviction(obj, events),
        failure_certain=_doomed(kind, obj, pods, child_jobs),
        suspended=suspended,
        suspended_since=_ts((held or {}).get("lastTransitionTime")) or created,
        queue=(meta.get("labels") or {}).get(identity.LABEL_QUEUE),
        # The Workload's "Pending" says why it is not admitted; the Job's "Suspended" only that it is not.
        kueue_says=next(
            (
                _clean(e.get("message"))
                for wanted in ("Pending", "Suspended")
                for e in _newest_first(events)
                if e.get("reason") == wanted and e.get("message")
            ),
            "",
        ),
        on_node=any(_on_node(p) for p in pods),
        awaiting_pods_since=_ts(status.get("startTime")) or resumed_at or created,
        failed_create=next(
            (
                f"{e.get('reason')}: {_clean(e.get('message'))}"
                for e in _newest_first(events)
                if e.get("reason") == "FailedCreate"
            ),
            "",
        ),
        pod_phases=_pod_counts(pods),
        retryable_exit_codes=frozenset(retryable_exit_codes),
        queued_deadline_seconds=queued_deadline_seconds,
    )
