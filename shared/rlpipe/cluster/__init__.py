"""The pipeline's only door to Kubernetes: idempotent launch, status as (phase, failure class), cleanup.

Why this module looks the way it does:

* **One status answer per workload.** The workflow asks "is stage N done, and if it failed, which
  retry budget pays for it?" (DESIGN §6). Kubernetes spreads that answer over the Job/JobSet
  conditions, Kueue's suspension, the pods' conditions and container states, and events.
  :func:`summarize` folds them into one :class:`WorkloadStatus` whose ``reason`` names the pod,
  the container, the exit code and Kubernetes' own message, so a person can act on one line.
* **Retries of the API itself live here**, with exponential backoff and full jitter, honouring
  ``Retry-After``, bounded by ``api_retries``; only what survives that budget becomes a
  :class:`~rlpipe.core.failures.TransientFailure` for the workflow. urllib3's own status retries are
  switched off on the client we are given, because they sleep on ``Retry-After`` with the real
  clock and outside any budget (the ``kubernetes`` client enables them for idempotent GETs).
* **Raw JSON, verbatim bodies.** Calls use the typed APIs with ``_preload_content=False`` and the
  objects stay plain dicts, exactly as the manifests render them and the apiserver returns them.
  Jobs are created through the generic objects API: the 37.x typed ``create_namespaced_job``
  validates the body against pydantic models that reject valid Kubernetes (integer quantities
  such as ``cpu: 2``) and every field newer than the client. Creates ask for
  ``fieldValidation=Strict`` so the apiserver refuses, rather than silently prunes, unknown fields.
* ``kubernetes`` and ``google.auth`` are imported on first use: importing this module (e.g. for
  :class:`WorkloadStatus` in a Cloud Function that never talks to the cluster) costs nothing.

Classification precedence, strongest first (one rule per line; the first that has evidence wins):

1. the workload's own terminal success (Job ``Complete``/``SuccessCriteriaMet``, JobSet
   ``Completed`` or ``terminalState: Completed``) → ``succeeded``; nothing a pod shows overrides it
   (workers and sidecars are killed *because* the head finished);
2. otherwise, for a workload that failed (``Failed``/``FailureTarget``/``terminalState: Failed``),
   was evicted by Kueue, or has a pod that can never start, the strongest pod evidence:
   ``preempted`` (DisruptionTarget, node lost or shut down, TPU maintenance, Kueue eviction)
   > ``resources`` (OOMKilled, ephemeral-storage eviction)
   > ``permanent`` configuration (image pull errors, a missing Secret, a container that cannot start)
   > ``capacity`` (pods that were never scheduled: the program never had its devices)
   > the program's exit code (``transient`` if listed in ``retryable_exit_codes``, else ``permanent``)
   > any other container's non-zero exit (``permanent``)
   > no pod evidence: ``permanent`` with the condition's reason and message;
3. a workload not yet terminal is ``queued`` while Kueue has not admitted it or none of its pods is
   scheduled, ``capacity``-failed once that has lasted past ``queued_deadline_seconds``, else
   ``running``. Disruptions, OOMs and exits of a live workload are reported as details only:
   the Job/JobSet controller decides whether it recovers, and killing a workload that might
   recover would waste more than the minutes until the controller's verdict.

For a JobSet only the ``pathways-head`` replicated job's main container is "the program": worker and
sidecar exit codes never count as the program's (they exit 143 when the JobSet is torn down), but a
worker's OOM, preemption or image pull error does fail the run with that worker named.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from rlpipe.core import identity
from rlpipe.core.failures import (
    FailureClass,
    PermanentFailure,
    PipelineFailure,
    TransientFailure,
    failure_for,
)

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration

    from rlpipe.control.settings import Settings

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Kind = Literal["Job", "JobSet"]
Phase = Literal["queued", "running", "succeeded", "failed"]
T = TypeVar("T")

KINDS: tuple[Kind, ...] = ("Job", "JobSet")
JOB_GROUP, JOB_VERSION, JOB_PLURAL = "batch", "v1", "jobs"
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

# Labels the controllers put on the pods (and, for JobSets, on the child Jobs).
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
# Must equal rlpipe.core.manifests.pathways.HEAD (a test keeps them equal; importing the manifests
# here would pull pydantic into every status poll).
HEAD_REPLICATED_JOB = "pathways-head"


class RbacRule(NamedTuple):
    api_group: str
    resource: str
    verb: str


# Every (apiGroup, resource, verb) this module calls; infra's Role is checked against it, and a
# test records every request the client makes and asserts it is covered.
RBAC_RULES: frozenset[RbacRule] = frozenset(
    RbacRule(group, resource, verb)
    for group, resource, verbs in (
        (JOB_GROUP, JOB_PLURAL, ("create", "get", "list", "delete")),
        (JOBSET_GROUP, JOBSET_PLURAL, ("create", "get", "list", "delete")),
        ("", "pods", ("list",)),
        ("", "events", ("list",)),
        ("", "pods/log", ("get",)),
    )
    for verb in verbs
)


def role_rules() -> list[Obj]:
    """``RBAC_RULES`` as the ``rules`` of a Kubernetes Role (one rule per group and resource)."""
    grouped: dict[tuple[str, str], set[str]] = {}
    for rule in RBAC_RULES:
        grouped.setdefault((rule.api_group, rule.resource), set()).add(rule.verb)
    return [{"apiGroups": [g], "resources": [r], "verbs": sorted(v)} for (g, r), v in sorted(grouped.items())]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class WorkloadStatus:
    """What a Job or JobSet amounts to right now; ``reason`` is the one line a person reads."""

    kind: Kind
    name: str
    phase: Phase
    failure_class: FailureClass | None = None
    reason: str = ""
    uid: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    admitted: bool = False  # not suspended (Kueue has admitted it, or it never needed admission)
    queue: str | None = None  # the Kueue LocalQueue named by the workload's label
    exists: bool = True
    pods: Mapping[str, int] = field(default_factory=dict)  # pod phase → count
    details: tuple[str, ...] = ()  # further evidence, strongest first

    @property
    def done(self) -> bool:
        return self.phase in ("succeeded", "failed")

    def failure(self) -> PipelineFailure | None:
        """The failure to raise or record, or None unless the phase is ``failed``."""
        if self.phase != "failed":
            return None
        return failure_for(self.failure_class or FailureClass.PERMANENT, self.reason)

    def to_dict(self) -> Obj:
        """JSON-ready, for the ``stage`` function's answer to the workflow and the ledger."""

        def iso(ts: datetime | None) -> str | None:
            return ts.isoformat() if ts else None

        return {
            "kind": self.kind, "name": self.name, "phase": self.phase,
            "failure_class": self.failure_class.value if self.failure_class else None,
            "reason": self.reason, "uid": self.uid, "created_at": iso(self.created_at),
            "started_at": iso(self.started_at), "finished_at": iso(self.finished_at),
            "admitted": self.admitted, "queue": self.queue, "exists": self.exists,
            "pods": dict(self.pods), "details": list(self.details),
        }


@dataclass(frozen=True)
class RunObject:
    """One top-level workload of a run, as reconciliation needs it (no pod reads)."""

    kind: Kind
    name: str
    run_id: str
    stage: str | None
    attempt: int | None
    uid: str
    created_at: datetime | None
    phase: Phase  # from the object's own spec/status only: suspended → queued, conditions → done
    deleting: bool = False


# --------------------------------------------------------------------------- small helpers


def _ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


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
    return line[:head] + "…" + line[len(line) - (limit - 1 - head):]


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
    r"temporar|unavailable|EOF", re.IGNORECASE)
# Pod-level status reasons meaning the node went away under the pod.
NODE_LOST_REASONS = frozenset({"NodeLost", "Shutdown", "NodeShutdown", "Terminated", "Preempting",
                               "UnexpectedAdmissionError"})
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
    return [_Finding(FailureClass.PREEMPTED, RANK_PREEMPTED, f"Job {name} was failed by its pod failure "
                                                             f"policy: {message}")]


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


def _terminated_finding(pod: Obj, who: str, cname: str, term: Obj, *, program: bool,
                        retryable: Collection[int], restarted: bool) -> _Finding | None:
    code = term.get("exitCode")
    reason = term.get("reason") or ""
    message = _clean(term.get("message"), 200)
    tail = f": {message}" if message else ""
    before = " (before a restart)" if restarted else ""
    if reason == "OOMKilled":
        limit = _memory_limit(pod, cname)
        lim = f", memory limit {limit}" if limit else ""
        return _Finding(FailureClass.RESOURCES, RANK_RESOURCES,
                        f"{who} container {cname} was OOMKilled{before} (exit code {code}{lim})")
    if reason in CANNOT_START_REASONS:
        return _Finding(FailureClass.PERMANENT, RANK_CONFIG,
                        f"{who} container {cname} could not start ({reason}, exit code {code}){tail}")
    if not isinstance(code, int) or code == 0:
        return None
    what = f"{who} container {cname} exited with code {code}{before}" + (f" ({reason})" if reason else "") + tail
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
        found.append(_Finding(FailureClass.PREEMPTED, RANK_PREEMPTED,
                              f"{who}{where} was disrupted ({_cond_text(disruption)})"))
    pod_reason, pod_message = status.get("reason") or "", _clean(status.get("message"))
    if pod_reason == "Evicted":
        cls, rank = ((FailureClass.RESOURCES, RANK_RESOURCES) if _OVERUSE.search(pod_message)
                     else (FailureClass.PREEMPTED, RANK_PREEMPTED))
        found.append(_Finding(cls, rank, f"{who}{where} was evicted: {pod_message}"))
    elif pod_reason in NODE_LOST_REASONS or status.get("phase") == "Unknown" or _MAINTENANCE.search(pod_message):
        why = pod_reason or status.get("phase") or "maintenance"
        found.append(_Finding(FailureClass.PREEMPTED, RANK_PREEMPTED,
                              f"{who}{where} lost its node ({why}" + (f": {pod_message})" if pod_message else ")")))

    scheduled = conds.get("PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") in UNSCHEDULED_REASONS:
        since = _ts(meta.get("creationTimestamp")) or _ts(scheduled.get("lastTransitionTime"))
        found.append(_Finding(FailureClass.CAPACITY, RANK_CAPACITY,
                              f"{who} is {scheduled.get('reason')}: {_clean(scheduled.get('message'))}",
                              pending_since=since))

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
                    found.append(_Finding(FailureClass.TRANSIENT, RANK_OTHER_EXIT, text + " [registry error]"))
                else:
                    found.append(_Finding(FailureClass.PERMANENT, RANK_CONFIG, text,
                                          fatal_now=wreason in FATAL_WAITING_REASONS))
            for term, restarted in ((state.get("terminated"), False), (last.get("terminated"), True)):
                if term:
                    finding = _terminated_finding(pod, who, cname, term, program=program,
                                                  retryable=retryable_exit_codes, restarted=restarted)
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


def summarize(kind: Kind, obj: Obj, pods: list[Obj], events: list[Obj], *, now: datetime,
              retryable_exit_codes: Collection[int] = (),
              queued_deadline_seconds: float | None = None, child_jobs: list[Obj] = ()) -> WorkloadStatus:
    """Fold a workload, its pods and its events into one status (precedence: module docstring).

    Pure: no I/O, so every rule can be read here and tested with documents."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = meta.get("name", "?")
    labels = meta.get("labels") or {}
    conds = _conditions(obj)
    created = _ts(meta.get("creationTimestamp"))
    suspended = bool(spec.get("suspend"))
    queue = labels.get(identity.LABEL_QUEUE)
    counts = _pod_counts(pods)
    starts = [ts for p in pods if (ts := _ts((p.get("status") or {}).get("startTime")))]
    started = _ts(status.get("startTime")) or (min(starts) if starts else None)
    base = {"kind": kind, "name": name, "uid": meta.get("uid"), "created_at": created,
            "started_at": started, "admitted": not suspended, "queue": queue, "pods": counts}
    what = f"{kind} {name}"

    success = _true(conds, "Complete") or _true(conds, "Completed") or _true(conds, "SuccessCriteriaMet")
    if success or status.get("terminalState") == "Completed":
        finished = _ts(status.get("completionTime")) or _ts((success or {}).get("lastTransitionTime"))
        return WorkloadStatus(**base, phase="succeeded", finished_at=finished,
                              reason=f"{what} succeeded" + (f" ({_cond_text(success)})" if success else ""))

    findings = _strongest([
        *(f for pod in pods for f in _pod_findings(kind, pod, retryable_exit_codes=retryable_exit_codes)),
        *(f for job in [obj, *child_jobs] for f in _job_findings(job)),
    ])
    details = tuple(f.text for f in findings)
    failed = _true(conds, "Failed") or _true(conds, "FailureTarget")
    eviction = _kueue_eviction(obj, events)

    def fail(finding: _Finding | None, fallback: str) -> WorkloadStatus:
        finished = _ts((failed or {}).get("lastTransitionTime")) if failed else None
        if finding is None:
            return WorkloadStatus(**base, phase="failed", failure_class=FailureClass.PERMANENT,
                                  reason=fallback, finished_at=finished, details=details)
        rest = tuple(d for d in details if d != finding.text)
        return WorkloadStatus(**base, phase="failed", failure_class=finding.failure_class,
                              reason=f"{what} failed: {finding.text}", finished_at=finished, details=rest)

    if failed or status.get("terminalState") == "Failed":
        evidence = _strongest([*([eviction] if eviction else []), *findings])
        cond_text = _cond_text(failed) if failed else "terminalState Failed"
        return fail(evidence[0] if evidence else None,
                    f"{what} failed ({cond_text}); no pod evidence left (pods deleted?)")
    if eviction:
        return fail(eviction, "")
    fatal = [f for f in findings if f.fatal_now]
    if fatal:
        return fail(fatal[0], "")

    deadline = queued_deadline_seconds
    if suspended:
        waited = (now - created).total_seconds() if created else 0.0
        where = f"Kueue queue {queue!r}" if queue else "suspended, no Kueue queue label; nothing will resume it"
        # The Workload's "Pending" says why it is not admitted; the Job's "Suspended" only that it is not.
        kueue_says = next((_clean(e.get("message")) for wanted in ("Pending", "Suspended")
                           for e in _newest_first(events) if e.get("reason") == wanted and e.get("message")), "")
        says = f"; Kueue: {kueue_says}" if kueue_says else ""
        if deadline is not None and waited > deadline:
            return WorkloadStatus(**base, phase="failed", failure_class=FailureClass.CAPACITY, details=details,
                                  reason=f"{what} not admitted after {_duration(waited)} "
                                         f"(deadline {_duration(deadline)}) in {where}{says}")
        return WorkloadStatus(**base, phase="queued", details=details,
                              reason=f"{what} queued for {_duration(waited)} in {where} (not admitted){says}")

    unscheduled = [f for f in findings if f.pending_since is not None]
    if unscheduled:
        oldest = min(unscheduled, key=lambda f: f.pending_since or now)
        waited = (now - (oldest.pending_since or now)).total_seconds()
        more = f" (+{len(unscheduled) - 1} more pods)" if len(unscheduled) > 1 else ""
        if deadline is not None and waited > deadline:
            return WorkloadStatus(**base, phase="failed", failure_class=FailureClass.CAPACITY, details=details,
                                  reason=f"{what} failed: {oldest.text}{more}, for {_duration(waited)} "
                                         f"(deadline {_duration(deadline)})")
        return WorkloadStatus(**base, phase="queued", details=details,
                              reason=f"{what} waiting for capacity for {_duration(waited)}: {oldest.text}{more}")

    if not any(_is_scheduled(p) for p in pods):
        # Measured from admission, not creation: a workload queued in Kueue for hours has had
        # no chance to create pods until a moment ago.
        resumed = conds.get("Suspended")
        resumed_at = _ts(resumed.get("lastTransitionTime")) if resumed and resumed.get("status") == "False" else None
        since = _ts(status.get("startTime")) or resumed_at or created
        waited = (now - since).total_seconds() if since else 0.0
        created_note = next((f"{e.get('reason')}: {_clean(e.get('message'))}" for e in _newest_first(events)
                             if e.get("reason") == "FailedCreate"), "")
        note = f"; {created_note}" if created_note else ""
        if deadline is not None and waited > deadline:
            cls = (FailureClass.CAPACITY if not created_note or re.search(r"quota", created_note, re.I)
                   else FailureClass.PERMANENT)
            return WorkloadStatus(**base, phase="failed", failure_class=cls, details=details,
                                  reason=f"{what} admitted but no pod scheduled after {_duration(waited)} "
                                         f"(deadline {_duration(deadline)}){note}")
        return WorkloadStatus(**base, phase="queued", details=details,
                              reason=f"{what} admitted, waiting for pods for {_duration(waited)}{note}")

    summary = ", ".join(f"{n} {phase.lower()}" for phase, n in sorted(counts.items()))
    watch = f"; watching: {details[0]}" if details else ""
    return WorkloadStatus(**base, phase="running", details=details,
                          reason=f"{what} running (pods: {summary}){watch}")


def _summary_phase(obj: Obj) -> Phase:
    """A phase from the object alone (reconciliation lists many objects; no pod reads)."""
    conds, status = _conditions(obj), obj.get("status") or {}
    if any(_true(conds, c) for c in ("Complete", "Completed", "SuccessCriteriaMet")) or \
            status.get("terminalState") == "Completed":
        return "succeeded"
    if _true(conds, "Failed") or _true(conds, "FailureTarget") or status.get("terminalState") == "Failed":
        return "failed"
    return "queued" if (obj.get("spec") or {}).get("suspend") else "running"


def _deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _is_jobset_child(job: Obj) -> str | None:
    """The owning JobSet's name if this Job is a JobSet's child (it carries the run labels too)."""
    meta = job.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "JobSet":
            return ref.get("name")
    return (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)


# --------------------------------------------------------------------------- the client


class _GoogleBearerToken:
    """``Configuration.refresh_api_key_hook``: the client calls it before every authenticated
    request, so a long-lived client (a warm Cloud Function instance) refreshes its token when
    google-auth says it is expired or about to be, instead of failing with 401 after an hour."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()

    def __call__(self, configuration: Configuration) -> None:
        with self._lock:
            if not self._credentials.valid:
                import google.auth.transport.requests

                self._credentials.refresh(google.auth.transport.requests.Request())
            configuration.api_key["BearerToken"] = self._credentials.token
            configuration.api_key_prefix["BearerToken"] = "Bearer"


def _ca_certificate(value: str) -> tuple[str | None, str | None]:
    """(path, PEM data) from ``gke_ca_cert``: a file path, PEM text, or the base64 PEM that
    ``gcloud container clusters describe`` prints as ``masterAuth.clusterCaCertificate``."""
    text = value.strip()
    if "-----BEGIN" in text:
        return None, text
    if text and "/" not in text and not text.endswith(".pem"):
        try:
            decoded = base64.b64decode(text, validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        if "-----BEGIN" in decoded:
            return None, decoded
    return (text or None), None


def _disable_urllib3_retries(api_client: ApiClient) -> None:
    """Make every attempt visible to our loop: urllib3's default Retry re-sends GETs answered
    429/503 with Retry-After (sleeping with the real clock) and reconnects three times."""
    from kubernetes.client import rest
    from urllib3.util.retry import Retry

    cfg = api_client.configuration
    cfg.retries = Retry(total=0, respect_retry_after_header=False, raise_on_status=False)
    old = api_client.rest_client
    api_client.rest_client = rest.RESTClientObject(cfg)
    old.close()


def _retryable_status(code: int | None) -> bool:
    """429 and 5xx are the apiserver's "not now"; 0 is the client's own connection/TLS failure."""
    return code == 0 or code == 429 or (code is not None and code >= 500)


class ClusterClient:
    """Kubernetes operations of the pipeline, against one namespace.

    ``api_retries`` bounds the retries of one API call after its first attempt; ``sleep`` and
    ``now`` are injectable so tests see the backoff and move the clock. The given ``ApiClient``
    is adopted: its urllib3 retries are switched off (see the module docstring).
    """

    def __init__(self, api_client: ApiClient, namespace: str, *, api_retries: int = 5,
                 sleep: Callable[[float], None] = time.sleep,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 backoff_base: float = 0.5, backoff_max: float = 30.0,
                 request_timeout: tuple[float, float] = (10.0, 60.0),
                 rng: random.Random | None = None,
                 retryable_errors: tuple[type[BaseException], ...] = ()) -> None:
        from kubernetes import client

        if api_retries < 0:
            raise ValueError("api_retries must be >= 0")
        _disable_urllib3_retries(api_client)
        self.api_client = api_client
        self.namespace = namespace
        self.api_retries = api_retries
        self._sleep = sleep
        self._now = now
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._timeout = request_timeout
        self._rng = rng or random.Random()
        self._retryable_errors = retryable_errors
        self._batch = client.BatchV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> ClusterClient:
        """The local stack's plain URL (no auth), else GKE: ``https://<gke_endpoint>``, the cluster
        CA, and a Google access token (Application Default Credentials) refreshed as it expires."""
        from kubernetes import client

        if settings.kube_url:
            config = client.Configuration(host=settings.kube_url.rstrip("/"))
            return cls(client.ApiClient(config), settings.namespace, **kwargs)
        if not settings.gke_endpoint:
            raise PermanentFailure("no cluster configured: set RLPIPE_KUBE_URL (local) or "
                                   "RLPIPE_GKE_ENDPOINT and RLPIPE_GKE_CA_CERT (GKE)")
        import google.auth
        import google.auth.exceptions

        endpoint = re.sub(r"^https?://", "", settings.gke_endpoint.strip()).rstrip("/")
        config = client.Configuration(host=f"https://{endpoint}")
        config.verify_ssl = True
        path, data = _ca_certificate(settings.gke_ca_cert)
        if path:
            config.ssl_ca_cert = path
        if data:
            config.ca_cert_data = data
        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        hook = _GoogleBearerToken(credentials)
        hook(config)  # the client sends a token only if one is present before the first call
        config.refresh_api_key_hook = hook
        kwargs.setdefault("retryable_errors", (google.auth.exceptions.TransportError,))
        return cls(client.ApiClient(config), settings.namespace, **kwargs)

    # -- the retry loop ---------------------------------------------------------------------

    def _delay(self, attempt: int, exc: BaseException) -> float:
        retry_after = _retry_after(exc)
        if retry_after is not None:
            return min(retry_after, self._backoff_max)
        return self._rng.uniform(0, min(self._backoff_max, self._backoff_base * 2**attempt))

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` with retries on 429/5xx and connection errors; other API errors propagate."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        attempts = self.api_retries + 1
        for attempt in range(attempts):
            try:
                return fn()
            except ApiException as exc:
                if not _retryable_status(exc.status):
                    raise
                error = f"{exc.status} {_api_message(exc)}"
                last: BaseException = exc
            except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, *self._retryable_errors) as exc:
                error = f"{type(exc).__name__}: {_clean(exc, 200)}"
                last = exc
            if attempt + 1 >= attempts:
                raise TransientFailure(f"Kubernetes API {what} failed after {attempts} attempts; "
                                       f"last error: {error}") from last
            delay = self._delay(attempt, last)
            log.warning("Kubernetes API %s: %s; retry %d/%d in %.2fs", what, error, attempt + 1,
                        self.api_retries, delay)
            self._sleep(delay)
        raise AssertionError("unreachable")

    def _json(self, what: str, fn: Callable[[], Any]) -> Obj:
        def call() -> Obj:
            response = fn()
            try:
                return json.loads(response.data or b"{}")
            finally:
                response.release_conn()

        return self._call(what, call)

    # -- raw operations (one API call each, retried) ------------------------------------------

    def _create(self, kind: Kind, body: Obj) -> Obj:
        group, version, plural = _gvp(kind)
        return self._json(f"create {kind}", lambda: self._custom.create_namespaced_custom_object(
            group, version, self.namespace, plural, body, field_validation="Strict",
            _preload_content=False, _request_timeout=self._timeout))

    def _read(self, kind: Kind, name: str) -> Obj:
        if kind == "Job":
            return self._json(f"get Job {name}", lambda: self._batch.read_namespaced_job(
                name, self.namespace, _preload_content=False, _request_timeout=self._timeout))
        return self._json(f"get JobSet {name}", lambda: self._custom.get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSET_PLURAL, name,
            _preload_content=False, _request_timeout=self._timeout))

    def _list(self, what: str, page: Callable[[str | None], Any]) -> list[Obj]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            body = self._json(what, lambda token=token: page(token))
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _list_kind(self, kind: Kind, selector: str) -> list[Obj]:
        kw = {"label_selector": selector, "limit": 500, "_preload_content": False,
              "_request_timeout": self._timeout}
        if kind == "Job":
            return self._list("list Jobs", lambda token: self._batch.list_namespaced_job(
                self.namespace, _continue=token, **kw))
        return self._list("list JobSets", lambda token: self._custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSET_PLURAL, _continue=token, **kw))

    def _list_pods(self, selector: str) -> list[Obj]:
        return self._list("list pods", lambda token: self._core.list_namespaced_pod(
            self.namespace, label_selector=selector, limit=500, _continue=token,
            _preload_content=False, _request_timeout=self._timeout))

    def _list_events(self, field_selector: str) -> list[Obj]:
        return self._list("list events", lambda token: self._core.list_namespaced_event(
            self.namespace, field_selector=field_selector, limit=500, _continue=token,
            _preload_content=False, _request_timeout=self._timeout))

    def _delete_one(self, kind: Kind, name: str) -> bool:
        """Delete with Background propagation (batch/v1 Jobs orphan their pods by default);
        False if it was already gone."""
        from kubernetes.client.exceptions import ApiException

        group, version, plural = _gvp(kind)
        try:
            if kind == "Job":
                self._json(f"delete Job {name}", lambda: self._batch.delete_namespaced_job(
                    name, self.namespace, propagation_policy="Background", _preload_content=False,
                    _request_timeout=self._timeout))
            else:
                self._json(f"delete JobSet {name}", lambda: self._custom.delete_namespaced_custom_object(
                    group, version, self.namespace, plural, name, propagation_policy="Background",
                    _preload_content=False, _request_timeout=self._timeout))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _api_failure(exc, f"delete {kind} {name}") from exc
        return True

    # -- public API ---------------------------------------------------------------------------

    def apply(self, obj: Obj) -> Obj:
        """Create a rendered Job or JobSet; if it already exists (a repeated launch of the same
        attempt), return the existing object instead. 422/400 → PermanentFailure naming the problems."""
        from kubernetes.client.exceptions import ApiException

        kind = _kind_of(obj)
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        namespace = meta.get("namespace") or self.namespace
        if namespace != self.namespace:
            raise PermanentFailure(f"{kind} {name} is rendered for namespace {namespace!r} but this client "
                                   f"works in {self.namespace!r}; status and cleanup would never find it")
        for _ in range(2):  # a 409 for an object deleted before we read it: create again, once
            try:
                return self._create(kind, obj)
            except ApiException as exc:
                if exc.status != 409:
                    raise _api_failure(exc, f"create {kind} {name}") from exc
            try:
                existing = self._read(kind, name)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise _api_failure(exc, f"get {kind} {name}") from exc
            _check_same_workload(kind, obj, existing)
            return existing
        raise TransientFailure(f"{kind} {name} exists and vanishes as we read it; try again")

    def status(self, name: str, *, kind: Kind, retryable_exit_codes: Collection[int] = (),
               queued_deadline_seconds: float | None = None) -> WorkloadStatus:
        """The workload's phase and, when failed, its failure class (precedence: module docstring).

        A missing workload is reported, not raised: ``failed``/``permanent`` "not found (deleted?)";
        the caller knows whether it just launched it or cleaned it up."""
        from kubernetes.client.exceptions import ApiException

        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        try:
            obj = self._read(kind, name)
        except ApiException as exc:
            if exc.status == 404:
                return WorkloadStatus(kind=kind, name=name, phase="failed", exists=False,
                                      failure_class=FailureClass.PERMANENT,
                                      reason=f"workload {name} not found (deleted?)")
            raise _api_failure(exc, f"get {kind} {name}") from exc
        try:
            return self._status_of(kind, obj, retryable_exit_codes, queued_deadline_seconds)
        except ApiException as exc:
            raise _api_failure(exc, f"status of {kind} {name}") from exc

    def _status_of(self, kind: Kind, obj: Obj, retryable_exit_codes: Collection[int],
                   queued_deadline_seconds: float | None) -> WorkloadStatus:
        phase = _summary_phase(obj)
        pods = [] if phase == "succeeded" else self._pods_of(kind, obj)
        events: list[Obj] = []
        if phase in ("queued", "running") and not any(_is_scheduled(p) for p in pods):
            events = self._events_of(kind, obj)  # Kueue's and the controller's explanations
        child_jobs: list[Obj] = []
        if kind == "JobSet" and phase == "failed":
            child_jobs = self._list_kind("Job", f"{JOBSET_NAME_LABEL}={obj['metadata']['name']}")
        return summarize(kind, obj, pods, events, now=self._now(), retryable_exit_codes=retryable_exit_codes,
                         queued_deadline_seconds=queued_deadline_seconds, child_jobs=child_jobs)

    def _pods_of(self, kind: Kind, obj: Obj) -> list[Obj]:
        """The workload's pods by the controller's labels, else by the run labels; pods of an
        earlier incarnation of the same name (another uid) are left out."""
        meta = obj["metadata"]
        name, uid = meta["name"], meta.get("uid")
        name_labels, uid_labels = ((JOB_NAME_LABELS, JOB_UID_LABELS) if kind == "Job"
                                   else ((JOBSET_NAME_LABEL,), (JOBSET_UID_LABEL,)))
        selectors = [f"{label}={name}" for label in name_labels]
        labels = meta.get("labels") or {}
        run_keys = (identity.LABEL_RUN, identity.LABEL_STAGE, identity.LABEL_ATTEMPT)
        if all(labels.get(k) for k in run_keys):
            selectors.append(",".join(f"{k}={labels[k]}" for k in run_keys))
        for selector in selectors:
            pods = [p for p in self._list_pods(selector)
                    if all((p["metadata"].get("labels") or {}).get(k, uid) == uid for k in uid_labels)]
            if pods:
                return sorted(pods, key=lambda p: p["metadata"]["name"])
        return []

    def _events_of(self, kind: Kind, obj: Obj) -> list[Obj]:
        """Events on the workload, and on the Kueue Workload Kueue made for it (named
        ``<kind>-<name>-<hash>``): that is where Kueue says why it does not admit it."""
        meta = obj["metadata"]
        name, uid = meta["name"], meta.get("uid")
        own = [e for e in self._list_events(f"involvedObject.name={name}")
               if (e.get("involvedObject") or {}).get("uid") in (None, uid)]
        prefix = f"{kind.lower()}-{name}-"
        kueue = [e for e in self._list_events("involvedObject.kind=Workload")
                 if (e.get("involvedObject") or {}).get("name", "").startswith(prefix)]
        return own + kueue

    def log_tail(self, jobset: str, *, replicated_job: str = "pathways-head", container: str = "workload-container",
                 lines: int = 200) -> str:
        """The last lines the training program printed (for progress: step and mean_reward).

        Best effort: an empty string when the pod is not there yet or the log cannot be read.
        """
        from kubernetes.client.exceptions import ApiException

        selector = f"jobset.sigs.k8s.io/jobset-name={jobset},jobset.sigs.k8s.io/replicatedjob-name={replicated_job}"
        try:
            pods = self._list_pods(selector)
            running = [p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")]
            if not running:
                return ""
            name = sorted(running, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")[-1]
            pod_name = name["metadata"]["name"]
            response = self._call(f"log of {pod_name}", lambda: self._core.read_namespaced_pod_log(
                pod_name, self.namespace, container=container, tail_lines=lines, _preload_content=False,
                _request_timeout=self._timeout))
            try:
                return (response.data or b"").decode("utf-8", "replace")
            finally:
                response.release_conn()
        except (ApiException, TransientFailure):
            return ""

    def delete(self, kind: Kind, name: str) -> bool:
        """Delete one workload (Background propagation, so its pods go too); True if it existed."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return self._delete_one(kind, name)

    def delete_run(self, run_id: str) -> list[str]:
        """Delete every Job and JobSet of the run (by label), pods included; the names deleted by
        this call. Idempotent: a second call deletes nothing and returns []."""
        selector = identity.run_selector(run_id)
        from kubernetes.client.exceptions import ApiException

        try:
            jobsets = self._list_kind("JobSet", selector)
            jobs = self._list_kind("Job", selector)
        except ApiException as exc:
            raise _api_failure(exc, f"list the objects of run {run_id}") from exc
        jobset_names = {js["metadata"]["name"] for js in jobsets}
        deleted = [js["metadata"]["name"] for js in jobsets if not _deleting(js)
                   and self._delete_one("JobSet", js["metadata"]["name"])]
        for job in jobs:
            if _is_jobset_child(job) in jobset_names or _deleting(job):
                continue  # goes with its JobSet, or its deletion is already under way
            if self._delete_one("Job", job["metadata"]["name"]):
                deleted.append(job["metadata"]["name"])
        return deleted

    def list_run_objects(self, run_id: str | None = None) -> list[RunObject]:
        """Every top-level Job and JobSet carrying ``rlpipe.dev/run`` (of one run, or all), for
        reconciliation. A JobSet's child Jobs carry the run labels too and are left out."""
        selector = identity.run_selector(run_id) if run_id else identity.LABEL_RUN
        from kubernetes.client.exceptions import ApiException

        try:
            found = [("JobSet", o) for o in self._list_kind("JobSet", selector)]
            found += [("Job", o) for o in self._list_kind("Job", selector) if not _is_jobset_child(o)]
        except ApiException as exc:
            raise _api_failure(exc, "list run objects") from exc
        out = []
        for kind, obj in found:
            meta = obj["metadata"]
            labels = meta.get("labels") or {}
            attempt = labels.get(identity.LABEL_ATTEMPT, "")
            out.append(RunObject(
                kind=kind, name=meta["name"], run_id=labels.get(identity.LABEL_RUN, ""),
                stage=labels.get(identity.LABEL_STAGE), attempt=int(attempt) if attempt.isdigit() else None,
                uid=meta.get("uid", ""), created_at=_ts(meta.get("creationTimestamp")),
                phase=_summary_phase(obj), deleting=_deleting(obj)))
        return sorted(out, key=lambda o: (o.run_id, o.created_at or datetime.min.replace(tzinfo=UTC), o.name))


# --------------------------------------------------------------------------- error helpers


def _gvp(kind: Kind) -> tuple[str, str, str]:
    return (JOB_GROUP, JOB_VERSION, JOB_PLURAL) if kind == "Job" else (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)


def _kind_of(obj: Obj) -> Kind:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if (api_version, kind) == (f"{JOB_GROUP}/{JOB_VERSION}", "Job"):
        return "Job"
    if (api_version, kind) == (f"{JOBSET_GROUP}/{JOBSET_VERSION}", "JobSet"):
        return "JobSet"
    raise PermanentFailure(f"cannot apply {api_version}/{kind}: only batch/v1 Job and "
                           f"{JOBSET_GROUP}/{JOBSET_VERSION} JobSet are launched")


def _check_same_workload(kind: Kind, wanted: Obj, existing: Obj) -> None:
    """A 409 means "already launched" only if the existing object is this run's same attempt."""
    want = (wanted.get("metadata") or {}).get("labels") or {}
    have = (existing.get("metadata") or {}).get("labels") or {}
    keys = (identity.LABEL_RUN, identity.LABEL_STAGE, identity.LABEL_ATTEMPT)
    name = existing["metadata"]["name"]
    if any(want.get(k) != have.get(k) for k in keys):
        theirs = ", ".join(f"{k}={have.get(k)}" for k in keys)
        raise PermanentFailure(f"{kind} {name} already exists but belongs to something else ({theirs})")
    if existing["metadata"].get("deletionTimestamp"):
        raise TransientFailure(f"{kind} {name} already exists and is being deleted; launch again once it is gone")


def _status_body(exc: Any) -> Obj:
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        return {"message": body}
    return parsed if isinstance(parsed, dict) else {}


def _api_message(exc: Any) -> str:
    status = _status_body(exc)
    return _clean(status.get("message") or getattr(exc, "reason", "") or str(exc), 400)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from ``Retry-After`` (delta-seconds or an HTTP date), else the Status body's
    ``details.retryAfterSeconds``; None if the server gave no hint."""
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                return max(0.0, (when - datetime.now(UTC)).total_seconds())
    seconds = (_status_body(exc).get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def _api_failure(exc: Any, what: str) -> PipelineFailure:
    """A non-retryable API answer as a classified failure a person can act on."""
    code = getattr(exc, "status", None)
    status = _status_body(exc)
    message = _api_message(exc)
    if code in (400, 422):
        causes = [c.get("message") or f"{c.get('field')}: {c.get('reason')}"
                  for c in (status.get("details") or {}).get("causes") or []]
        problems = "; ".join(_clean(c, 200) for c in causes) or message
        return PermanentFailure(f"Kubernetes rejected {what} as invalid ({code}): {problems}")
    if code in (401, 403):
        return PermanentFailure(f"Kubernetes refused {what} ({code} {status.get('reason') or ''}): {message}; "
                                "check the pipeline identity's credentials and RBAC (cluster.RBAC_RULES)")
    if code == 404:
        return PermanentFailure(f"Kubernetes has no such resource for {what} (404): {message}; is the namespace "
                                "there and the JobSet CRD installed?")
    return PermanentFailure(f"Kubernetes API {what} failed ({code}): {message}")

