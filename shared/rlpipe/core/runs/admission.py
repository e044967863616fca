"""A run's admission (``RunRecord.admission``): what it waits for before it runs, since when, and
the bound on that wait.

Every wait of a run's workflow ends. A run queued at plan (its team's place or budget, its sweep's
slot, the conversion its sweep shares) and a sweep's child at selection each ask the stage function
again after a pause; the stage function ends the run when the wait has lasted longer than the
request's ``timeouts.waiting``, naming what it waited for. Plan's waits count as one (a run that
waited for the conversion and then for a place has waited for both), selection's as another.

Pure: records in, changes out, applied by the caller inside its compare-and-swap.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlpipe.core.runs.record import PLAN_WAITS, Admission, RunRecord, WaitsFor, parse_time

# What each wait is for, in the words ``rlpipe status``, ``list`` and the report use.
WAITS_FOR_WORDS: dict[str, str] = {
    "team-place": "a place under its team's limits",
    "team-budget": "room in its team's monthly chip-hour budget",
    "sweep-slot": "a slot of its sweep (max_parallel)",
    "conversion": "the conversion its sweep's children share",
    "selection": "its siblings, at its sweep's selection",
}


@dataclass(frozen=True)
class Queued:
    """A policy's answer at plan or selection: the run waits, for this, for this reason."""

    waits_for: WaitsFor
    reason: str


def wait(record: RunRecord, waits_for: WaitsFor, reason: str, stamp: str) -> str | None:
    """Record that the run waits for ``waits_for`` (``stamp``: now, as the ledger writes times);
    → the ledger event, or None when the record already says so."""
    before = record.admission
    if before is not None and (before.waits_for, before.reason) == (waits_for, reason):
        return None
    same_wait = before is not None and (before.waits_for in PLAN_WAITS) == (waits_for in PLAN_WAITS)
    since = before.since if before is not None and same_wait else stamp
    record.admission = Admission(waits_for=waits_for, reason=reason, since=since)
    return "admission-waiting"


def admitted(record: RunRecord) -> str | None:
    """Nothing holds the run back now; → the ledger event, or None when nothing was recorded."""
    if record.admission is None:
        return None
    record.admission = None
    return "admission-admitted"


def waited_seconds(admission: Admission, now_epoch: float) -> float:
    return now_epoch - parse_time(admission.since).timestamp()


def overdue(admission: Admission | None, bound_seconds: float, now_epoch: float) -> str | None:
    """Why the run's wait has ended it: it waited longer than ``bound_seconds``
    (``timeouts.waiting``); None while it may still wait."""
    if admission is None:
        return None
    waited = waited_seconds(admission, now_epoch)
    if waited <= bound_seconds:
        return None
    return (
        f"waited {_hours(waited)} for {WAITS_FOR_WORDS[admission.waits_for]}, longer than timeouts.waiting "
        f"({_hours(bound_seconds)}): {admission.reason}. Fix: free what it waits for, or raise "
        "timeouts.waiting, then `rlpipe retry` the run"
    )


def admission_text(admission: Admission) -> str:
    """One line for ``rlpipe status``: what it waits for, since when, and why."""
    return f"for {WAITS_FOR_WORDS[admission.waits_for]} since {admission.since[:19]}Z: {admission.reason}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"
