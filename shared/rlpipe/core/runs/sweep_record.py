"""What a sweep's coordination changes in its parent's record, and in a child's: the pins, the
slots and the one converter, an arrival at selection, the selection, a child's end, the state the
children imply, and an operator's cancel and reopening.

Kept apart from ``control.sweep.coordination`` for the reason ``plan_record`` is: every change is a
compare-and-swap on the parent (``Ledger.update``), which may apply it again on a newer record, so
each is one function of the record being replaced, and what it decides (who holds a slot, whose
pins and selection stand) is decided on the record that is written.
"""

from __future__ import annotations

from typing import Any

from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.record import TERMINAL, Failure, RunRecord, SweepParent, SweepSelection


class StaleParent(Exception):
    """The parent's record moved while its children were read (another child's refresh)."""


def _sweep(r: RunRecord) -> SweepParent:
    if r.sweep is None:
        raise ValueError(f"run {r.run_id} is not a sweep's parent")
    return r.sweep


def index_of(s: SweepParent, run_id: str | None) -> int | None:
    return s.children.index(run_id) if run_id in s.children else None


def pin(r: RunRecord, sha: str, data: dict[str, Any]) -> str | None:
    """The first child to plan pins the sweep's commits; a sibling that pinned first stands."""
    s = _sweep(r)
    if s.pins is not None:
        return None
    s.pins = {"hf_sha": sha, "data": data}
    r.lineage.hf_sha = sha
    r.lineage.data = data
    return "sweep-pinned"


def take_slot(
    r: RunRecord, me: str, *, released: set[str], conversion_ready: bool
) -> tuple[str | None, Queued | None]:
    """→ (the event, why child ``me`` waits; None: it holds a slot now). ``released``: holders that
    ended without giving theirs back (a crash, a cancel)."""
    s = _sweep(r)
    if me in s.slots:
        return None, None
    before = (list(s.slots), s.converter)
    s.slots = [h for h in s.slots if h not in released and h not in s.arrived]
    if s.converter is not None and (s.converter in released or s.converter not in s.slots):
        s.converter = None  # it ended or moved on without a conversion in the cache: next one
    wait = None
    if not conversion_ready and s.converter not in (None, me):
        wait = Queued(
            "conversion",
            f"queued: waiting for child {index_of(s, s.converter)} ({s.converter}) to convert the "
            "checkpoint every child shares",
        )
    elif len(s.slots) >= s.max_parallel:
        wait = Queued(
            "sweep-slot",
            f"queued: all {s.max_parallel} of the sweep's slots are in use "
            f"(children {', '.join(str(index_of(s, h)) for h in s.slots)})",
        )
    else:
        s.slots.append(me)
        s.arrived = [a for a in s.arrived if a != me]  # a retried child works again
        if not conversion_ready:
            s.converter = me
        return "sweep-slot-taken", None
    return ("sweep-slots-freed" if (s.slots, s.converter) != before else None), wait


def arrive(r: RunRecord, me: str) -> str | None:
    """Child ``me`` arrived at selection: it gives its slot (and the converter role) back."""
    s = _sweep(r)
    if me in s.arrived and me not in s.slots:
        return None
    s.arrived = [*dict.fromkeys([*s.arrived, me])]
    s.slots = [h for h in s.slots if h != me]
    s.converter = None if s.converter == me else s.converter
    return "sweep-arrived"


def select(r: RunRecord, selection: SweepSelection) -> str | None:
    """The selection, written once: a sibling that selected first, from the same ledgers, stands."""
    s = _sweep(r)
    if s.selection is not None:
        return None
    s.selection = selection
    return "sweep-selected"


def mark_selected(r: RunRecord, chosen: bool) -> str | None:
    """A child learns whether its sweep selected it."""
    if r.lineage.sweep is None or r.lineage.sweep.selected is chosen:
        return None
    r.lineage.sweep.selected = chosen
    return "sweep-selected" if chosen else "sweep-not-selected"


def release(r: RunRecord, me: str) -> str | None:
    """Child ``me`` ended: what it held (its slot, the converter role) goes back."""
    s = _sweep(r)
    if me not in s.slots and s.converter != me:
        return None
    s.slots = [h for h in s.slots if h != me]
    s.converter = None if s.converter == me else s.converter
    return "sweep-slot-released"


def imply(r: RunRecord, read_at_seq: int, state: str, failure: Failure | None) -> tuple[str | None, bool]:
    """The state (and failure) the children imply, computed from a read of the parent at
    ``read_at_seq`` (``StaleParent`` when it moved since); → (the event, whether this write ended
    the parent)."""
    if r.seq != read_at_seq:
        raise StaleParent
    if r.state == state and r.failure == failure:
        return None, False
    ended = not r.terminal and state in TERMINAL
    # Not set_state: the parent runs nothing, so its state is whatever its children's imply.
    r.state = state  # type: ignore[assignment]
    r.failure = failure
    return f"sweep-{state}", ended


def cancel(r: RunRecord, caller: str | None) -> str | None:
    """An operator cancels the sweep (``caller``: the identity verified on it)."""
    s = _sweep(r)
    if s.cancelled or r.terminal:
        return None
    s.cancelled = True
    s.cancelled_by = caller
    return "sweep-cancel"


def reopen(r: RunRecord) -> str | None:
    """After its children were retried: no longer cancelled, and a selection that chose none is
    made again once the retried children arrive or end."""
    s = _sweep(r)
    no_winner = s.selection is not None and s.selection.run_id is None
    if not s.cancelled and not no_winner:
        return None
    s.cancelled, s.cancelled_by = False, None
    if no_winner:
        s.selection = None
    return "sweep-reopened"
