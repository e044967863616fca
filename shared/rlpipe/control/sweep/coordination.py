"""A sweep's children coordinating through their parent's ledger record.

Each child is an ordinary run with its own workflow execution. What they share is decided here,
each time by one compare-and-swap on the parent (``Ledger.update``), so that children asking at
the same moment cannot both win:

* the pins: the first child to plan resolves the model revision and the datasets; every later
  child trains on those commits, whatever the Hub says by then;
* the slots: at most ``max_parallel`` children between plan and selection (the TPU work);
  the others wait in plan, queued, and their workflows poll again;
* the conversion: the first child converts; the others wait for its cache entry, so one
  conversion serves them all;
* the selection: once every child has arrived at selection (trained, gated) or ended, the rule
  (``core.sweep.select``) is applied once and written once; only the winner goes on to publish.

The parent's state is derived from its children's (``core.sweep.parent_state``) and refreshed
whenever one of them changes what the parent shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import sweep as core_sweep
from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.request.sweep import SelectRule, SweepSpec
from rlpipe.core.runs import sweep_record
from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.record import Failure, RunRecord, SweepParent, SweepSelection, now
from rlpipe.core.runs.results import as_exported


def parent_of(ledger: Ledger, child: RunRecord) -> RunRecord:
    member = child.lineage.sweep
    parent = ledger.get(member.parent) if member is not None else None
    if parent is None or parent.sweep is None:
        raise PermanentFailure(f"run {child.run_id} names a sweep parent that has no record")
    return parent


def spec_of(parent: RunRecord) -> SweepSpec:
    return SweepSpec.model_validate(parent.request["sweep"])


# ---- pins ---------------------------------------------------------------------------------------


def shared_pins(
    ledger: Ledger, child: RunRecord, resolve: Callable[[], tuple[str, dict[str, Any]]]
) -> tuple[str, dict[str, Any]]:
    """The model commit and datasets every child of this sweep trains on."""
    parent = parent_of(ledger, child)
    assert parent.sweep is not None
    if parent.sweep.pins is None:
        sha, data = resolve()

        parent = ledger.edit(
            parent.run_id,
            lambda r: sweep_record.pin(r, sha, data),
            detail=lambda r: {"hf_sha": sha, "by": child.run_id},
        )
    assert parent.sweep is not None and parent.sweep.pins is not None
    return parent.sweep.pins["hf_sha"], parent.sweep.pins["data"]


# ---- slots ----------------------------------------------------------------------------------------


def take_slot(ledger: Ledger, child: RunRecord, *, conversion_ready: bool) -> Queued | None:
    """None when this child may go on (it holds a slot now); else what it waits for and why (the
    stage operation records it as the child's admission)."""
    me = child.run_id
    parent = parent_of(ledger, child)
    assert parent.sweep is not None
    released = _no_longer_holding(ledger, parent.sweep)
    _, wait = ledger.update(
        parent.run_id,
        lambda r: sweep_record.take_slot(r, me, released=released, conversion_ready=conversion_ready),
        detail=lambda r: {"child": me, "slots": r.sweep.slots if r.sweep else []},
    )
    if wait is None:
        refresh(ledger, parent.run_id)
    return wait


def _no_longer_holding(ledger: Ledger, s: SweepParent) -> set[str]:
    """Slot holders that ended (a crash or a cancel may end one without its release)."""
    gone: set[str] = set()
    for holder in s.slots:
        record = ledger.get(holder)
        if record is None or record.terminal:
            gone.add(holder)
    return gone


# ---- selection ------------------------------------------------------------------------------------


def arrive(ledger: Ledger, child: RunRecord) -> dict[str, Any]:
    """The ``select`` step: this child trained (and passed the gate); it gives its slot back and
    learns whether it publishes, or that it must wait for siblings still working."""
    me = child.run_id
    parent = parent_of(ledger, child)

    parent = ledger.edit(parent.run_id, lambda r: sweep_record.arrive(r, me), detail=lambda r: {"child": me})
    assert parent.sweep is not None
    if parent.sweep.selection is None:
        children = [ledger.get(c) for c in parent.sweep.children]
        working = [
            i
            for i, (run_id, c) in enumerate(zip(parent.sweep.children, children, strict=True))
            if run_id not in parent.sweep.arrived and c is not None and not c.terminal
        ]
        if working:
            reason = f"waiting for children {_list(working)} to finish"
            return {"wait": True, "selected": None, "reason": reason}
        parent = _select(ledger, parent, children)
    assert parent.sweep is not None and parent.sweep.selection is not None
    chosen = parent.sweep.selection.run_id == me
    _mark_selected(ledger, me, chosen)
    refresh(ledger, parent.run_id)
    reason = parent.sweep.selection.reason
    return {"wait": False, "selected": chosen, "reason": reason if chosen else f"not selected: {reason}"}


def _select(ledger: Ledger, parent: RunRecord, children: list[RunRecord | None]) -> RunRecord:
    assert parent.sweep is not None
    rule = spec_of(parent).select
    stopped = {s.run_id for s in parent.sweep.stopped}
    if rule is None:  # no rule: every child that arrived goes on (none publishes: validation)
        return parent
    candidates = [
        core_sweep.Candidate(
            run_id=run_id,
            index=i,
            point=parent.sweep.points[i],
            state=c.state if c is not None else "unknown",
            # arrived and still waiting: one failed or cancelled since (a lost select call, an
            # operator's cancel) is not a candidate
            # and one its sweep's rule stopped is never one, whatever its record says by now
            arrived=run_id in parent.sweep.arrived
            and (c is None or c.state not in ("failed", "cancelled"))
            and run_id not in stopped,
            # what its export loaded is what it would publish (export.step)
            results=as_exported(c.results, c.lineage.exported_step, c.lineage.final_step)
            if c is not None
            else {},
            stopped=run_id in stopped,
        )
        for i, (run_id, c) in enumerate(zip(parent.sweep.children, children, strict=True))
    ]
    chosen = core_sweep.select(rule, candidates)
    selection = selection_record(chosen, rule)

    return ledger.edit(
        parent.run_id,
        lambda r: sweep_record.select(r, selection),
        detail=lambda r: r.sweep.selection.model_dump() if r.sweep and r.sweep.selection else {},
    )


def selection_record(chosen: core_sweep.Selection, rule: SelectRule, at: str | None = None) -> SweepSelection:
    """What the parent keeps of a selection: the winner, its value, the table and the reason."""
    return SweepSelection(
        run_id=chosen.run_id,
        index=chosen.index,
        metric=rule.metric,
        direction=rule.direction,
        value=chosen.value,
        reason=chosen.reason,
        at=at or now(),
        table=chosen.table,
    )


def _mark_selected(ledger: Ledger, run_id: str, chosen: bool) -> None:
    ledger.edit(
        run_id, lambda r: sweep_record.mark_selected(r, chosen), detail=lambda r: {"selected": chosen}
    )


def _list(indexes: list[int]) -> str:
    return ", ".join(map(str, indexes))


# ---- a child ended; the parent's state ------------------------------------------------------------


def child_ended(ledger: Ledger, child: RunRecord) -> RunRecord | None:
    """Give back what the child held (its slot, the converter role) and refresh the parent.
    Returns the parent when this call ended it (exactly one call does), for its status message."""
    me = child.run_id
    parent = parent_of(ledger, child)

    ledger.edit(
        parent.run_id,
        lambda r: sweep_record.release(r, me),
        detail=lambda r: {"child": me, "state": child.state},
    )
    updated, ended = _refresh(ledger, parent.run_id)
    return updated if ended else None


def refresh(ledger: Ledger, parent_id: str) -> RunRecord:
    """Write the state the children imply (``core.sweep.parent_state``) when it changed."""
    return _refresh(ledger, parent_id)[0]


def _refresh(ledger: Ledger, parent_id: str) -> tuple[RunRecord, bool]:
    parent = ledger.get(parent_id)
    if parent is None or parent.sweep is None:
        raise PermanentFailure(f"no sweep {parent_id}")
    children = [ledger.get(c) for c in parent.sweep.children]
    states = [c.state if c is not None else "failed" for c in children]
    selection = parent.sweep.selection
    winner = next((c for c in children if c is not None and selection and c.run_id == selection.run_id), None)
    state = core_sweep.parent_state(
        states,
        selecting=spec_of(parent).select is not None,
        winner_state=winner.state if winner is not None else None,
        cancelled=parent.sweep.cancelled,
    )
    failure = _failure(parent, children, state)

    try:
        return ledger.update(
            parent_id,
            lambda r: sweep_record.imply(r, parent.seq, state, failure),
            detail=lambda r: {"state": r.state, "children": states},
        )
    except sweep_record.StaleParent:  # the parent changed since the children were read: again
        return _refresh(ledger, parent_id)


def _failure(parent: RunRecord, children: list[RunRecord | None], state: str) -> Failure | None:
    assert parent.sweep is not None
    if state == "cancelled":
        return Failure(
            tag="cancelled",
            message="the sweep was cancelled, and its children with it",
            caller=parent.sweep.cancelled_by,
            rule=reported.SWEEP_CANCELLED,
        )
    if state not in ("failed", "gated"):
        return None
    selection = parent.sweep.selection
    if selection is not None and selection.run_id is None:
        return Failure(
            tag=state if state == "gated" else "permanent",
            message=selection.reason,
            rule=reported.SWEEP_NONE_SELECTED,
        )
    ended = [
        f"child {i} ({c.run_id}) {c.state}" + (f": {c.failure.message}" if c.failure else "")
        for i, c in enumerate(children)
        if c is not None and c.state in ("failed", "cancelled", "gated")
    ]
    return Failure(
        tag=state if state == "gated" else "permanent",
        message="; ".join(ended)[:2000] or state,
        rule=reported.SWEEP_CHILDREN_ENDED,
    )


# ---- operators: cancel and retry the parent --------------------------------------------------------


def cancel(
    ledger: Ledger, parent_id: str, cancel_child: Callable[[str], None], *, caller: str | None = None
) -> RunRecord:
    """Mark the sweep cancelled (by ``caller``, the verified identity that asked) and cancel every
    child that has not ended."""

    parent = ledger.edit(parent_id, lambda r: sweep_record.cancel(r, caller))
    assert parent.sweep is not None
    if not parent.sweep.cancelled:  # it had ended before: nothing to cancel
        return parent
    for run_id in parent.sweep.children:
        child = ledger.get(run_id)
        if child is not None and not child.terminal:
            cancel_child(run_id)
    return refresh(ledger, parent_id)


def retry_targets(parent: RunRecord, children: list[RunRecord | None]) -> list[str]:
    """The children a retry of the parent starts again: after a selection only the winner can
    change the outcome; before one, every child that failed or was cancelled."""
    assert parent.sweep is not None
    selection = parent.sweep.selection
    if selection is not None and selection.run_id is not None:
        return [
            c.run_id
            for c in children
            if c is not None and c.run_id == selection.run_id and c.state in ("failed", "cancelled")
        ]
    return [c.run_id for c in children if c is not None and c.state in ("failed", "cancelled")]


def reopen(ledger: Ledger, parent_id: str) -> RunRecord:
    """After its children were retried: no longer cancelled, its state theirs again."""

    ledger.edit(parent_id, sweep_record.reopen)
    return refresh(ledger, parent_id)
