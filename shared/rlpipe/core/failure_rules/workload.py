"""The workload rules: what a Job or JobSet amounts to right now (docs/design.md, "Failure classes and retry budgets").

The workflow asks "is stage N done, and if it failed, which retry budget pays for it?". Kubernetes
spreads that answer over the Job/JobSet conditions, Kueue's suspension, the pods' conditions and
container states, and events; ``cluster.evidence`` reads them as :class:`Finding` s, and the rules
below, in order, give the one answer (the first rule that holds decides):

1. ``workload-missing``: the workload does not exist (deleted?) → ``permanent``;
2. ``workload-succeeded``: its own terminal success; nothing a pod shows overrides it (workers and
   sidecars are killed *because* the head finished);
3. ``workload-failed``: Failed/FailureTarget/``terminalState: Failed`` → the class of the strongest
   evidence (Kueue's eviction included), else ``permanent`` with the condition's reason;
4. ``kueue-evicted``: Kueue took the admission back for a reason that is a failure (an
   ``AdmissionCheck`` eviction is requeued by Kueue and stays queued, rule 8);
5. ``failure-certain``: a disruption the controllers are certain to turn into the workload's failure
   (read before they act: the JobSet controller deletes the evidence when it does) → ``preempted``;
6. ``cannot-start``: a pod that can never start (an image pull error, a missing Secret) → ``permanent``;
7. ``not-admitted-by-deadline``/8. ``queued-in-kueue``: suspended, timed from the latest suspension
   (a workload evicted after hours of running has waited since then, not since its creation);
9. ``unschedulable-by-deadline``/10. ``waiting-for-capacity``: pods never scheduled;
11. ``pods-not-created``/12. ``no-pod-scheduled-by-deadline``/13. ``waiting-for-pods``: admitted,
    and no pod on a node: past the deadline a FailedCreate that is not a quota is ``permanent``,
    anything else ``capacity``;
14. ``running``. Other disruptions, OOMs and exits of a live workload are details only: the Job/JobSet
    controller decides whether it recovers, and killing a workload that might recover would waste
    more than the minutes until the controller's verdict.

The strongest evidence (rules 3 and 13): ``preempted`` (DisruptionTarget, node lost or shut down,
TPU maintenance) > ``resources`` (OOMKilled, ephemeral-storage eviction) > ``permanent``
configuration (image pull errors, a missing Secret, a container that cannot start) > ``capacity``
(pods never scheduled: the program never had its devices) > the program's exit code
(``transient`` if listed in ``retryable_exit_codes``, else ``permanent``) > any other container's
non-zero exit (``permanent``); within one strength, pod order. For a JobSet only the
``pathways-head`` replicated job's main container is "the program" (``cluster.evidence``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlpipe.core.failure_rules.evidence import Finding, Sign, WorkloadEvidence
from rlpipe.core.failure_rules.verdict import Decision, Rule, Verdict, first_match
from rlpipe.core.failures import FailureClass

# ---- a finding's class and strength ------------------------------------------------------------

# Strengths: lower wins.
PREEMPTION, RESOURCES, CONFIGURATION, CAPACITY, PROGRAM_EXIT, OTHER_EXIT = range(6)

_SIGNS: dict[Sign, tuple[FailureClass, int]] = {
    Sign.JOB_FAILED_ON_DISRUPTION: (FailureClass.PREEMPTED, PREEMPTION),
    Sign.POD_DISRUPTED: (FailureClass.PREEMPTED, PREEMPTION),
    Sign.POD_EVICTED: (FailureClass.PREEMPTED, PREEMPTION),
    Sign.NODE_LOST: (FailureClass.PREEMPTED, PREEMPTION),
    Sign.FAILURE_CERTAIN: (FailureClass.PREEMPTED, PREEMPTION),
    Sign.OOM_KILLED: (FailureClass.RESOURCES, RESOURCES),
    Sign.POD_EVICTED_FOR_OVERUSE: (FailureClass.RESOURCES, RESOURCES),
    Sign.CONTAINER_CONFIG_ERROR: (FailureClass.PERMANENT, CONFIGURATION),
    Sign.CONTAINER_CANNOT_START: (FailureClass.PERMANENT, CONFIGURATION),
    Sign.POD_UNSCHEDULABLE: (FailureClass.CAPACITY, CAPACITY),
    Sign.OTHER_EXIT: (FailureClass.PERMANENT, OTHER_EXIT),
    # A pull failing for a timeout, a 429 or a 5xx is the registry's hiccup, not a wrong image.
    Sign.IMAGE_PULL_REGISTRY_ERROR: (FailureClass.TRANSIENT, OTHER_EXIT),
}

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


def eviction_class(reason: str) -> FailureClass | None:
    """The failure class of a Kueue eviction reason (None: Kueue requeues it by itself); an
    unknown reason is a preemption (Kueue took the admission back; the next attempt resumes from
    the last checkpoint)."""
    if reason == DEACTIVATED_BY_ADMISSION_CHECK:
        return FailureClass.CAPACITY
    if reason.startswith("Deactivated"):
        return FailureClass.PERMANENT
    return EVICTION_CLASSES.get(reason, FailureClass.PREEMPTED)


@dataclass(frozen=True)
class Weighed:
    """A finding with the class and strength the rules give it, and its line as a person reads it."""

    finding: Finding
    failure_class: FailureClass
    strength: int
    text: str


def weigh(finding: Finding, retryable_exit_codes: frozenset[int]) -> Weighed:
    """A finding's class and strength (the module docstring's order)."""
    if finding.sign is Sign.PROGRAM_EXIT:
        if finding.exit_code in retryable_exit_codes:
            return Weighed(
                finding, FailureClass.TRANSIENT, PROGRAM_EXIT, finding.text + " [retryable exit code]"
            )
        return Weighed(finding, FailureClass.PERMANENT, PROGRAM_EXIT, finding.text)
    if finding.sign is Sign.KUEUE_EVICTED:
        cls = eviction_class(finding.eviction_reason or "") or FailureClass.CAPACITY
        strength = {FailureClass.PREEMPTED: PREEMPTION, FailureClass.CAPACITY: CAPACITY}.get(
            cls, CONFIGURATION
        )
        return Weighed(finding, cls, strength, finding.text)
    cls, strength = _SIGNS[finding.sign]
    text = finding.text + (" [registry error]" if finding.sign is Sign.IMAGE_PULL_REGISTRY_ERROR else "")
    return Weighed(finding, cls, strength, text)


def ranked(ev: WorkloadEvidence) -> list[Weighed]:
    """The workload's findings, strongest first; a stable sort keeps pod order within a strength."""
    return sorted((weigh(f, ev.retryable_exit_codes) for f in ev.findings), key=lambda w: w.strength)


def details(ev: WorkloadEvidence, verdict: Verdict) -> tuple[str, ...]:
    """The further evidence a status lists beside its verdict, strongest first."""
    if verdict.phase == "succeeded":
        return ()
    return tuple(w.text for w in ranked(ev) if w.text != verdict.evidence)


def _evicted(ev: WorkloadEvidence) -> Weighed | None:
    """Kueue's eviction, when its reason is a failure (not one Kueue requeues by itself)."""
    eviction = ev.eviction
    if eviction is None or eviction_class(eviction.eviction_reason or "") is None:
        return None
    return weigh(eviction, ev.retryable_exit_codes)


def _failed_by(ev: WorkloadEvidence, weighed: Weighed) -> Decision:
    return Decision(
        "failed", f"{ev.what} failed: {weighed.text}", weighed.failure_class, evidence=weighed.text
    )


def duration(seconds: float) -> str:
    """A wait as a person reads it: 45s, 12m, 3h05m, 2d04h."""
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


def _past_deadline(ev: WorkloadEvidence, waited: float) -> bool:
    return ev.queued_deadline_seconds is not None and waited > ev.queued_deadline_seconds


def _deadline(ev: WorkloadEvidence) -> str:
    return duration(ev.queued_deadline_seconds or 0)


# ---- the rules, in order -----------------------------------------------------------------------


def _missing(ev: WorkloadEvidence) -> Decision | None:
    if ev.exists:
        return None
    return Decision("failed", f"workload {ev.name} not found (deleted?)", FailureClass.PERMANENT)


def _succeeded(ev: WorkloadEvidence) -> Decision | None:
    if not ev.succeeded:
        return None
    condition = f" ({ev.success_condition})" if ev.success_condition else ""
    return Decision("succeeded", f"{ev.what} succeeded{condition}")


def _failed(ev: WorkloadEvidence) -> Decision | None:
    if not ev.failed:
        return None
    evicted = _evicted(ev)
    evidence = sorted([*([evicted] if evicted else []), *ranked(ev)], key=lambda w: w.strength)
    if evidence:
        return _failed_by(ev, evidence[0])
    said = ev.failed_condition or "terminalState Failed"
    return Decision(
        "failed", f"{ev.what} failed ({said}); no pod evidence left (pods deleted?)", FailureClass.PERMANENT
    )


def _kueue_evicted(ev: WorkloadEvidence) -> Decision | None:
    evicted = _evicted(ev)
    return _failed_by(ev, evicted) if evicted else None


def _failure_certain(ev: WorkloadEvidence) -> Decision | None:
    certain = ev.failure_certain
    return _failed_by(ev, weigh(certain, ev.retryable_exit_codes)) if certain else None


def _cannot_start(ev: WorkloadEvidence) -> Decision | None:
    fatal = next((w for w in ranked(ev) if w.finding.never_resolves), None)
    return _failed_by(ev, fatal) if fatal else None


def _suspended_wait(ev: WorkloadEvidence) -> tuple[float, str, str]:
    """How long it has waited since its latest suspension, where, and what Kueue says."""
    since = ev.suspended_since
    waited = (ev.now - since).total_seconds() if since else 0.0
    where = (
        f"Kueue queue {ev.queue!r}" if ev.queue else "suspended, no Kueue queue label; nothing will resume it"
    )
    says = f"; Kueue: {ev.kueue_says}" if ev.kueue_says else ""
    if ev.eviction is not None:  # requeued by Kueue itself (an admission check to retry)
        says = f"; {ev.eviction.text}, requeued by Kueue{says}"
    return waited, where, says


def _not_admitted_by_deadline(ev: WorkloadEvidence) -> Decision | None:
    if not ev.suspended:
        return None
    waited, where, says = _suspended_wait(ev)
    if not _past_deadline(ev, waited):
        return None
    return Decision(
        "failed",
        f"{ev.what} not admitted after {duration(waited)} (deadline {_deadline(ev)}) in {where}{says}",
        FailureClass.CAPACITY,
    )


def _queued_in_kueue(ev: WorkloadEvidence) -> Decision | None:
    if not ev.suspended:
        return None
    waited, where, says = _suspended_wait(ev)
    return Decision("queued", f"{ev.what} queued for {duration(waited)} in {where} (not admitted){says}")


def _unscheduled(ev: WorkloadEvidence) -> tuple[Weighed, float, str] | None:
    """The pod that has waited longest to be scheduled, how long, and how many more wait."""
    waiting = [w for w in ranked(ev) if w.finding.pending_since is not None]
    if not waiting:
        return None
    oldest = min(waiting, key=lambda w: w.finding.pending_since or ev.now)
    waited = (ev.now - (oldest.finding.pending_since or ev.now)).total_seconds()
    more = f" (+{len(waiting) - 1} more pods)" if len(waiting) > 1 else ""
    return oldest, waited, more


def _unschedulable_by_deadline(ev: WorkloadEvidence) -> Decision | None:
    found = _unscheduled(ev)
    if found is None or not _past_deadline(ev, found[1]):
        return None
    oldest, waited, more = found
    return Decision(
        "failed",
        f"{ev.what} failed: {oldest.text}{more}, for {duration(waited)} (deadline {_deadline(ev)})",
        FailureClass.CAPACITY,
    )


def _waiting_for_capacity(ev: WorkloadEvidence) -> Decision | None:
    found = _unscheduled(ev)
    if found is None:
        return None
    oldest, waited, more = found
    return Decision("queued", f"{ev.what} waiting for capacity for {duration(waited)}: {oldest.text}{more}")


def _podless_wait(ev: WorkloadEvidence) -> float | None:
    """How long an admitted workload has had no pod on a node (measured from admission, not
    creation: a workload queued in Kueue for hours had no chance to create pods until a moment
    ago); None when a pod is on a node."""
    if ev.on_node:
        return None
    since = ev.awaiting_pods_since
    return (ev.now - since).total_seconds() if since else 0.0


def _no_pod_message(ev: WorkloadEvidence, waited: float) -> str:
    note = f"; {ev.failed_create}" if ev.failed_create else ""
    return (
        f"{ev.what} admitted but no pod scheduled after {duration(waited)} (deadline {_deadline(ev)}){note}"
    )


_QUOTA = re.compile(r"quota", re.IGNORECASE)


def _pods_not_created(ev: WorkloadEvidence) -> Decision | None:
    waited = _podless_wait(ev)
    if waited is None or not _past_deadline(ev, waited):
        return None
    if not ev.failed_create or _QUOTA.search(ev.failed_create):
        return None  # no pod for want of room: capacity (the next rule)
    return Decision("failed", _no_pod_message(ev, waited), FailureClass.PERMANENT)


def _no_pod_scheduled_by_deadline(ev: WorkloadEvidence) -> Decision | None:
    waited = _podless_wait(ev)
    if waited is None or not _past_deadline(ev, waited):
        return None
    return Decision("failed", _no_pod_message(ev, waited), FailureClass.CAPACITY)


def _waiting_for_pods(ev: WorkloadEvidence) -> Decision | None:
    waited = _podless_wait(ev)
    if waited is None:
        return None
    note = f"; {ev.failed_create}" if ev.failed_create else ""
    return Decision("queued", f"{ev.what} admitted, waiting for pods for {duration(waited)}{note}")


def _running(ev: WorkloadEvidence) -> Decision | None:
    summary = ", ".join(f"{n} {phase.lower()}" for phase, n in sorted(ev.pod_phases.items()))
    strongest = ranked(ev)
    watch = f"; watching: {strongest[0].text}" if strongest else ""
    return Decision("running", f"{ev.what} running (pods: {summary}){watch}")


WORKLOAD_RULES: tuple[Rule[WorkloadEvidence], ...] = (
    Rule("workload-missing", _missing),
    Rule("workload-succeeded", _succeeded),
    Rule("workload-failed", _failed),
    Rule("kueue-evicted", _kueue_evicted),
    Rule("failure-certain", _failure_certain),
    Rule("cannot-start", _cannot_start),
    Rule("not-admitted-by-deadline", _not_admitted_by_deadline),
    Rule("queued-in-kueue", _queued_in_kueue),
    Rule("unschedulable-by-deadline", _unschedulable_by_deadline),
    Rule("waiting-for-capacity", _waiting_for_capacity),
    Rule("pods-not-created", _pods_not_created),
    Rule("no-pod-scheduled-by-deadline", _no_pod_scheduled_by_deadline),
    Rule("waiting-for-pods", _waiting_for_pods),
    Rule("running", _running),
)


def decide_workload(ev: WorkloadEvidence) -> Verdict:
    """The workload's verdict: the first of :data:`WORKLOAD_RULES` that holds (``running`` always does)."""
    verdict = first_match(WORKLOAD_RULES, ev)
    assert verdict is not None  # the last rule holds for any evidence
    return verdict
