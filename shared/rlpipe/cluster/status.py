"""Status classification: a Job or JobSet, its pods and its events folded into one :class:`WorkloadStatus`.

The workflow asks "is stage N done, and if it failed, which retry budget pays for it?" (docs/design.md, "Failure classes and retry budgets").
:func:`summarize` gathers what Kubernetes says (``cluster.evidence``: facts only) and applies the
workload rules (``core.failure_rules.workload``: the precedence, one named rule per line), so its
``reason`` names the pod, the container, the exit code and Kubernetes' own message, and its
``rule`` the rule that decided, for a person to act on one line.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from rlpipe.cluster import evidence
from rlpipe.cluster.kinds import Kind, Obj, Phase, _conditions, _true, _ts
from rlpipe.core import chip_hours
from rlpipe.core.failure_rules import workload as rules
from rlpipe.core.failure_rules.evidence import WorkloadEvidence
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
    # TPU chip-hours each of its current pods has held, by pod UID (core.chip_hours.held_by_pod)
    pod_chip_hours: Mapping[str, float] = field(default_factory=dict)
    # Ended by its own condition: the chip-hours Kueue held for it (core.chip_hours.reserved_by_kueue)
    reserved_chip_hours: float | None = None
    rule: str | None = None  # the workload rule that decided (None: a status no rule made, a test's)

    @property
    def chip_hours(self) -> float:
        """TPU chip-hours its current pods have held together."""
        return sum(self.pod_chip_hours.values())

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
            "pod_chip_hours": dict(self.pod_chip_hours),
            "reserved_chip_hours": self.reserved_chip_hours,
            "rule": self.rule,
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


# --------------------------------------------------------------------------- summary


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
    """Fold a workload, its pods and its events into one status (the rules' precedence:
    ``core.failure_rules.workload``). Pure: no I/O, so it can be tested with documents."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    facts = evidence.gather(
        kind,
        obj,
        pods,
        events,
        now=now,
        retryable_exit_codes=retryable_exit_codes,
        queued_deadline_seconds=queued_deadline_seconds,
        child_jobs=child_jobs,
    )
    verdict = rules.decide_workload(facts)
    conds = _conditions(obj)
    finished: datetime | None = None
    if verdict.phase == "succeeded":
        success = _true(conds, "Complete") or _true(conds, "Completed") or _true(conds, "SuccessCriteriaMet")
        finished = _ts(status.get("completionTime")) or _ts((success or {}).get("lastTransitionTime"))
    elif verdict.phase == "failed":
        failed = _true(conds, "Failed") or _true(conds, "FailureTarget")
        finished = _ts(failed.get("lastTransitionTime")) if failed else None
    starts = [ts for p in pods if (ts := _ts((p.get("status") or {}).get("startTime")))]
    return WorkloadStatus(
        kind=kind,
        name=facts.name,
        phase=verdict.phase,
        failure_class=verdict.failure_class if verdict.phase == "failed" else None,
        reason=verdict.message,
        uid=meta.get("uid"),
        created_at=_ts(meta.get("creationTimestamp")),
        started_at=_ts(status.get("startTime")) or (min(starts) if starts else None),
        finished_at=finished,
        admitted=not facts.suspended,
        queue=facts.queue,
        pods=dict(facts.pod_phases),
        details=rules.details(facts, verdict),
        pod_chip_hours=chip_hours.held_by_pod(pods, now),
        rule=verdict.rule,
    )


def with_reservation(status: WorkloadStatus, kueue_workloads: Iterable[Obj]) -> WorkloadStatus:
    """The status of a workload that has ended by its own condition (``finished_at``: Complete,
    Completed or Failed) with the chip-hours Kueue held for it (``core.chip_hours.
    reserved_by_kueue``). A verdict reached before that condition (a head that exited before the
    JobSet is marked Completed, a deadline) has none: its pods are still there to be read."""
    if status.finished_at is None:
        return status
    return replace(
        status, reserved_chip_hours=chip_hours.reserved_by_kueue(kueue_workloads, status.finished_at)
    )


def missing(kind: Kind, name: str, *, now: datetime) -> WorkloadStatus:
    """A workload that does not exist: reported, not raised (the caller knows whether it just
    launched it or cleaned it up)."""
    verdict = rules.decide_workload(WorkloadEvidence(kind=kind, name=name, now=now, exists=False))
    return WorkloadStatus(
        kind=kind,
        name=name,
        phase=verdict.phase,
        exists=False,
        failure_class=verdict.failure_class,
        reason=verdict.message,
        rule=verdict.rule,
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
