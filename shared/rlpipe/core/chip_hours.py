"""TPU chip-hours a workload's pods actually held, from the pods' own start and end times.

Why from pods and not from the attempt's launch and finish: an attempt may wait in Kueue's queue
for hours holding nothing, and a TPU host holds its chips from the moment its pod starts until its
containers have exited. Per pod: ``google.com/tpu`` chips (the largest container request or limit)
× (end − ``status.startTime``), where end is the latest container ``state.terminated.finishedAt``
once its containers have all exited (the kubelet's report), else its ``deletionTimestamp`` if it is
being deleted, else ``now``. Pure: pod documents in.

A read of a live workload counts a pod being deleted only up to ``min(deletionTimestamp, now)``: the
next read sees more. The last read of a cancelled workload (``final``) has no next read, so a pod
still terminating counts up to its ``deletionTimestamp`` itself: the API server stamps it when the
pod's deletion is asked, as that moment plus the pod's grace period (``deletionGracePeriodSeconds``),
and it is when the kubelet kills whatever is still running, so the pod holds its chips no longer.

Kept per pod UID (``held_by_pod``) because pods come and go between two reads of a workload: a
JobSet that restarts in place deletes its workers and makes new ones, and a failing JobSet deletes
its active Jobs. The attempt's record adds up what each pod was last seen holding
(``core.runs.phase_record``), so a worker gone by the next read keeps the time it was seen holding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from rlpipe.core.timestamps import parse_rfc3339

TPU_RESOURCE = "google.com/tpu"
# The most TPU chips one pod can hold: a TPU host has at most 8; anything above this ceiling is not a
# chip count (read as none, like one that does not parse), so no product overflows a float.
MAX_CHIPS_PER_POD = 4096
# The most TPU chips one admitted pod set can hold: above the largest TPU pod built (9,216 chips),
# with room; a larger figure is not a chip count and is read as none.
MAX_CHIPS_RESERVED = 65536


def _chips(pod: Mapping[str, Any]) -> int:
    best = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            raw = (resources.get(kind) or {}).get(TPU_RESOURCE)
            try:
                count = int(str(raw)) if raw is not None else 0
            except ValueError:  # not a whole number, or more digits than Python converts
                continue
            if 0 <= count <= MAX_CHIPS_PER_POD:
                best = max(best, count)
    return best


def _finished(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's containers exited, as the kubelet reports it: the latest ``finishedAt``, once
    the pod is Succeeded or Failed or every container it reports on has terminated (a deleted pod's
    containers exit before the kubelet marks its phase); else None."""
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    terminated = [(cs.get("state") or {}).get("terminated") for cs in containers]
    done = status.get("phase") in ("Succeeded", "Failed") or (bool(containers) and all(terminated))
    finished = [ts for t in terminated if t and (ts := parse_rfc3339(t.get("finishedAt")))]
    return max(finished) if done and finished else None


def _end(pod: Mapping[str, Any], now: datetime, *, final: bool) -> datetime:
    finished = _finished(pod)
    if finished:
        return finished
    deleting = parse_rfc3339((pod.get("metadata") or {}).get("deletionTimestamp"))
    if deleting:
        return deleting if final else min(deleting, now)
    return now


def settled(pod: Mapping[str, Any]) -> bool:
    """Does the pod report its own end: its containers have exited, or its deletion has been asked
    (it has a ``deletionTimestamp``, the latest it can end)? A pod that holds no chips (CPU only,
    or never started) has nothing to settle. A TPU pod of a deleted workload that is not settled
    yet is one the garbage collector has not reached."""
    if not _chips(pod) or not parse_rfc3339((pod.get("status") or {}).get("startTime")):
        return True
    return _finished(pod) is not None or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def held_by_pod(pods: Iterable[Mapping[str, Any]], now: datetime, *, final: bool = False) -> dict[str, float]:
    """Chip-hours each TPU pod that has started has held so far, by its UID (CPU-only pods and
    pods never started are left out; a document without a UID, which the API server never serves,
    is keyed by its name or its place). ``final``: the last read of a deleted workload's pods, so a
    pod still terminating counts up to its ``deletionTimestamp`` (see the module's docstring)."""
    held: dict[str, float] = {}
    for place, pod in enumerate(pods):
        chips = _chips(pod)
        started = parse_rfc3339((pod.get("status") or {}).get("startTime"))
        meta = pod.get("metadata") or {}
        if chips and started:
            held[str(meta.get("uid") or meta.get("name") or f"#{place}")] = (
                chips * max(0.0, (_end(pod, now, final=final) - started).total_seconds()) / 3600.0
            )
    return held


def _true_since(workload: Mapping[str, Any], kind: str) -> datetime | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return parse_rfc3339(cond.get("lastTransitionTime"))
    return None


def reserved_by_kueue(workloads: Iterable[Mapping[str, Any]], ended: datetime) -> float | None:
    """Chip-hours Kueue held for a job that has ended (``ended``: its own Completed or Failed
    condition): the ``google.com/tpu`` of each Workload's admission
    (``status.admission.podSetAssignments[].resourceUsage``, each pod set's total) × (its end − its
    ``Admitted`` time), its end being ``ended``, or its own ``Finished`` time when that is earlier (a
    Workload that was replaced); None when no Workload has TPUs admitted.

    Why: a Pathways JobSet's workers never exit by themselves; the JobSet controller deletes them
    once the head has completed, so by the read that finds the JobSet finished they are gone, and
    the time since the read before was held by pods nobody sees again (all of it, when no read came
    while the workers ran). Kueue keeps the Workload and its admission until the job itself is
    deleted (Kueue v0.17.8 ``pkg/workload/workload.go`` ``Finish`` adds ``Finished`` and leaves the
    admission). From ``Admitted``, not ``QuotaReserved``: with flex-start, quota is reserved while
    the capacity is still being provisioned, and no chip is held until the admission check passes.
    It counts from the latest admission only (an eviction's requeue gives the quota back and
    clears the admission), so it is a floor, as the pods' own figure is, and the record keeps the
    larger of the two."""
    total = 0.0
    found = False
    for workload in workloads:
        admitted, finished = _true_since(workload, "Admitted"), _true_since(workload, "Finished")
        end = min(ended, finished) if finished else ended
        admission = (workload.get("status") or {}).get("admission") or {}
        chips = 0
        for assignment in admission.get("podSetAssignments") or []:
            raw = (assignment.get("resourceUsage") or {}).get(TPU_RESOURCE)
            try:
                count = int(str(raw)) if raw is not None else 0
            except ValueError:  # not a whole number of chips: read as none, as a pod's request is
                continue
            if 0 <= count <= MAX_CHIPS_RESERVED:
                chips += count
        if admitted and chips:
            total += chips * max(0.0, (end - admitted).total_seconds()) / 3600.0
            found = True
    return total if found else None


def chip_hours(pods: Iterable[Mapping[str, Any]], now: datetime) -> float:
    """Chip-hours these pods have held together so far."""
    return sum(held_by_pod(pods, now).values())
