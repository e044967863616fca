"""Status classification: a Job or JobSet, its pods and its events folded into one :class:`WorkloadStatus`.

* **One status answer per workload.** The workflow asks "is stage N done, and if it failed, which
  retry budget pays for it?" (docs/design.md#failure-classes-and-retry-budgets). Kubernetes spreads that answer over the Job/JobSet
  conditions, Kueue's suspension, the pods' conditions and container states, and events.
  :func:`summarize` folds them into one :class:`WorkloadStatus` whose ``reason`` names the pod,
  the container, the exit code and Kubernetes' own message, so a person can act on one line.

Classification precedence, strongest first (one rule per line; the first that has evidence wins):

1. the workload's own terminal success (Job ``Complete``/``SuccessCriteriaMet``, JobSet
   ``Completed`` or ``terminalState: Completed``) → ``succeeded``; nothing a pod shows overrides it
   (workers and sidecars are killed *because* the head finished);
2. otherwise, for a workload that failed (``Failed``/``FailureTarget``/``terminalState: Failed``),
   was evicted by Kueue, is certain to fail from a disruption, or has a pod that can never start,
   the strongest pod evidence:
   ``preempted`` (DisruptionTarget, node lost or shut down, TPU maintenance)
   > ``resources`` (OOMKilled, ephemeral-storage eviction)
   > ``permanent`` configuration (image pull errors, a missing Secret, a container that cannot start)
   > ``capacity`` (pods that were never scheduled: the program never had its devices)
   > the program's exit code (``transient`` if listed in ``retryable_exit_codes``, else ``permanent``)
   > any other container's non-zero exit (``permanent``)
   > no pod evidence: ``permanent`` with the condition's reason and message;
   Kueue's eviction (the workload suspended again, with Kueue's ``EvictedDueTo<reason>`` event on
   its Workload or ``Stopped`` event on the workload since its latest admission) is classed by its
   reason: ``Preempted``/``NodeFailures`` → ``preempted``, ``PodsReadyTimeout`` → ``capacity``,
   ``Deactivated…``/``LocalQueueStopped``/``ClusterQueueStopped`` → ``permanent``; an
   ``AdmissionCheck`` eviction is requeued by Kueue and stays ``queued``. A disruption is fatal
   before the controllers say so when they are certain to fail the workload for it (a child Job
   at ``FailureTarget`` by its podFailurePolicy; a disrupted pod the podFailurePolicy fails: a TPU
   worker from the moment it is disrupted, the program's pod once in phase Failed; under a JobSet
   failure policy that then fails): the JobSet controller deletes the Jobs still active when
   another child fails first, evidence included (the preemption race);
3. a workload not yet terminal is ``queued`` while Kueue has not admitted it or none of its pods is
   scheduled, ``capacity``-failed once that has lasted past ``queued_deadline_seconds`` (timed from
   the latest ``Suspended=True`` transition: a workload evicted after hours of running has waited
   since then, not since its creation), else ``running``. Other disruptions, OOMs and exits of a
   live workload are reported as details only: the Job/JobSet controller decides whether it
   recovers, and killing a workload that might recover would waste more than the minutes until
   the controller's verdict.

For a JobSet only the ``pathways-head`` replicated job's main container is "the program": worker and
sidecar exit codes never count as the program's (they exit 143 when the JobSet is torn down), but a
worker's OOM, preemption or image pull error does fail the run with that worker named.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from rlpipe.cluster.evidence import (
    _cond_text,
    _doomed,
    _Finding,
    _job_findings,
    _kueue_eviction,
    _newest_first,
    _on_node,
    _pod_counts,
    _pod_findings,
    _strongest,
)
from rlpipe.cluster.kinds import (
    Kind,
    Obj,
    Phase,
    _clean,
    _conditions,
    _true,
    _ts,
)
from rlpipe.core import chip_hours, identity
from rlpipe.core.failures import FailureClass, PipelineFailure, failure_for

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
    chip_hours: float = 0.0  # TPU chip-hours its current pods have held (core.chip_hours)

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
            "kind": self.kind,
            "name": self.name,
            "phase": self.phase,
            "failure_class": self.failure_class.value if self.failure_class else None,
            "reason": self.reason,
            "uid": self.uid,
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "admitted": self.admitted,
            "queue": self.queue,
            "exists": self.exists,
            "pods": dict(self.pods),
            "details": list(self.details),
            "chip_hours": self.chip_hours,
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


def summarize(
    kind: Kind,
    obj: Obj,
    pods: list[Obj],
    events: list[Obj],
    *,
    now: datetime,
    retryable_exit_codes: Collection[int] = (),
    queued_deadline_seconds: float | None = None,
    child_jobs: Iterable[Obj] = (),
) -> WorkloadStatus:
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
    base = {
        "kind": kind,
        "name": name,
        "uid": meta.get("uid"),
        "created_at": created,
        "started_at": started,
        "admitted": not suspended,
        "queue": queue,
        "pods": counts,
        "chip_hours": chip_hours.chip_hours(pods, now),
    }
    what = f"{kind} {name}"

    success = _true(conds, "Complete") or _true(conds, "Completed") or _true(conds, "SuccessCriteriaMet")
    if success or status.get("terminalState") == "Completed":
        finished = _ts(status.get("completionTime")) or _ts((success or {}).get("lastTransitionTime"))
        return WorkloadStatus(
            **base,
            phase="succeeded",
            finished_at=finished,
            reason=f"{what} succeeded" + (f" ({_cond_text(success)})" if success else ""),
        )

    child_jobs = list(child_jobs)
    findings = _strongest(
        [
            *(f for pod in pods for f in _pod_findings(kind, pod, retryable_exit_codes=retryable_exit_codes)),
            *(f for job in [obj, *child_jobs] for f in _job_findings(job)),
        ]
    )
    details = tuple(f.text for f in findings)
    failed = _true(conds, "Failed") or _true(conds, "FailureTarget")
    eviction = _kueue_eviction(obj, events)

    def fail(finding: _Finding | None, fallback: str) -> WorkloadStatus:
        finished = _ts((failed or {}).get("lastTransitionTime")) if failed else None
        if finding is None:
            return WorkloadStatus(
                **base,
                phase="failed",
                failure_class=FailureClass.PERMANENT,
                reason=fallback,
                finished_at=finished,
                details=details,
            )
        rest = tuple(d for d in details if d != finding.text)
        return WorkloadStatus(
            **base,
            phase="failed",
            failure_class=finding.failure_class,
            reason=f"{what} failed: {finding.text}",
            finished_at=finished,
            details=rest,
        )

    evicted = eviction.finding() if eviction and eviction.failure_class else None
    if failed or status.get("terminalState") == "Failed":
        evidence = _strongest([*([evicted] if evicted else []), *findings])
        cond_text = _cond_text(failed) if failed else "terminalState Failed"
        return fail(
            evidence[0] if evidence else None,
            f"{what} failed ({cond_text}); no pod evidence left (pods deleted?)",
        )
    if evicted:
        return fail(evicted, "")
    doomed = _doomed(kind, obj, pods, child_jobs)
    if doomed:
        return fail(doomed, "")
    fatal = [f for f in findings if f.fatal_now]
    if fatal:
        return fail(fatal[0], "")

    deadline = queued_deadline_seconds
    if suspended:
        # Timed from the latest suspension (Kueue's at creation, or an eviction after hours of
        # running); a Suspended condition keeps its transition time while its status stays True.
        held = _true(conds, "Suspended")
        since = _ts((held or {}).get("lastTransitionTime")) or created
        waited = (now - since).total_seconds() if since else 0.0
        where = (
            f"Kueue queue {queue!r}" if queue else "suspended, no Kueue queue label; nothing will resume it"
        )
        # The Workload's "Pending" says why it is not admitted; the Job's "Suspended" only that it is not.
        kueue_says = next(
            (
                _clean(e.get("message"))
                for wanted in ("Pending", "Suspended")
                for e in _newest_first(events)
                if e.get("reason") == wanted and e.get("message")
            ),
            "",
        )
        says = f"; Kueue: {kueue_says}" if kueue_says else ""
        if eviction:  # requeued by Kueue itself (an admission check to retry)
            says = f"; {eviction.text}, requeued by Kueue{says}"
        if deadline is not None and waited > deadline:
            return WorkloadStatus(
                **base,
                phase="failed",
                failure_class=FailureClass.CAPACITY,
                details=details,
                reason=f"{what} not admitted after {_duration(waited)} "
                f"(deadline {_duration(deadline)}) in {where}{says}",
            )
        return WorkloadStatus(
            **base,
            phase="queued",
            details=details,
            reason=f"{what} queued for {_duration(waited)} in {where} (not admitted){says}",
        )

    unscheduled = [f for f in findings if f.pending_since is not None]
    if unscheduled:
        oldest = min(unscheduled, key=lambda f: f.pending_since or now)
        waited = (now - (oldest.pending_since or now)).total_seconds()
        more = f" (+{len(unscheduled) - 1} more pods)" if len(unscheduled) > 1 else ""
        if deadline is not None and waited > deadline:
            return WorkloadStatus(
                **base,
                phase="failed",
                failure_class=FailureClass.CAPACITY,
                details=details,
                reason=f"{what} failed: {oldest.text}{more}, for {_duration(waited)} "
                f"(deadline {_duration(deadline)})",
            )
        return WorkloadStatus(
            **base,
            phase="queued",
            details=details,
            reason=f"{what} waiting for capacity for {_duration(waited)}: {oldest.text}{more}",
        )

    if not any(_on_node(p) for p in pods):
        # Measured from admission, not creation: a workload queued in Kueue for hours has had
        # no chance to create pods until a moment ago.
        resumed = conds.get("Suspended")
        resumed_at = (
            _ts(resumed.get("lastTransitionTime")) if resumed and resumed.get("status") == "False" else None
        )
        since = _ts(status.get("startTime")) or resumed_at or created
        waited = (now - since).total_seconds() if since else 0.0
        created_note = next(
            (
                f"{e.get('reason')}: {_clean(e.get('message'))}"
                for e in _newest_first(events)
                if e.get("reason") == "FailedCreate"
            ),
            "",
        )
        note = f"; {created_note}" if created_note else ""
        if deadline is not None and waited > deadline:
            cls = (
                FailureClass.CAPACITY
                if not created_note or re.search(r"quota", created_note, re.I)
                else FailureClass.PERMANENT
            )
            return WorkloadStatus(
                **base,
                phase="failed",
                failure_class=cls,
                details=details,
                reason=f"{what} admitted but no pod scheduled after {_duration(waited)} "
                f"(deadline {_duration(deadline)}){note}",
            )
        return WorkloadStatus(
            **base,
            phase="queued",
            details=details,
            reason=f"{what} admitted, waiting for pods for {_duration(waited)}{note}",
        )

    summary = ", ".join(f"{n} {phase.lower()}" for phase, n in sorted(counts.items()))
    watch = f"; watching: {details[0]}" if details else ""
    return WorkloadStatus(
        **base, phase="running", details=details, reason=f"{what} running (pods: {summary}){watch}"
    )


def _summary_phase(obj: Obj) -> Phase:
    """A phase from the object alone (reconciliation lists many objects; no pod reads)."""
    conds, status = _conditions(obj), obj.get("status") or {}
    if (
        any(_true(conds, c) for c in ("Complete", "Completed", "SuccessCriteriaMet"))
        or status.get("terminalState") == "Completed"
    ):
        return "succeeded"
    if _true(conds, "Failed") or _true(conds, "FailureTarget") or status.get("terminalState") == "Failed":
        return "failed"
    return "queued" if (obj.get("spec") or {}).get("suspend") else "running"
