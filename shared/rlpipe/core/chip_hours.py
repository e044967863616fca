"""TPU chip-hours a workload's pods actually held, from the pods' own start and end times.

Why from pods and not from the attempt's launch and finish: an attempt may wait in Kueue's queue
for hours holding nothing, and a TPU host holds its chips from the moment its pod starts until its
containers have exited. Per pod: ``google.com/tpu`` chips (the largest container request or limit)
× (end − ``status.startTime``), where end is the latest container ``finishedAt`` of a finished pod,
its ``deletionTimestamp`` if it is being deleted, else ``now``. Pure: pod documents in.

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


def _end(pod: Mapping[str, Any], now: datetime) -> datetime:
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        finished = [
            ts
            for cs in status.get("containerStatuses") or []
            if (ts := parse_rfc3339(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt")))
        ]
        if finished:
            return max(finished)
    deleting = parse_rfc3339((pod.get("metadata") or {}).get("deletionTimestamp"))
    return min(deleting, now) if deleting else now


def held_by_pod(pods: Iterable[Mapping[str, Any]], now: datetime) -> dict[str, float]:
    """Chip-hours each TPU pod that has started has held so far, by its UID (CPU-only pods and
    pods never started are left out; a document without a UID, which the API server never serves,
    is keyed by its name or its place)."""
    held: dict[str, float] = {}
    for place, pod in enumerate(pods):
        chips = _chips(pod)
        started = parse_rfc3339((pod.get("status") or {}).get("startTime"))
        meta = pod.get("metadata") or {}
        if chips and started:
            held[str(meta.get("uid") or meta.get("name") or f"#{place}")] = (
                chips * max(0.0, (_end(pod, now) - started).total_seconds()) / 3600.0
            )
    return held


def chip_hours(pods: Iterable[Mapping[str, Any]], now: datetime) -> float:
    """Chip-hours these pods have held together so far."""
    return sum(held_by_pod(pods, now).values())
