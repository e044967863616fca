"""Liveness across runs: the waits-for graph of the runs that wait, and which of them can never move.

A run that waits (``RunRecord.admission``) waits for other runs: a team place for one of the
team's holders to end or reach its sweep's selection, a sweep slot for one of the slot holders,
the shared conversion for the sibling converting it, the selection for every sibling still
working. A run that does not wait and has not ended is making progress (its stages have deadlines
and budgets, ``core.failure_rules``), so whatever waits on it will move.

A waiting run is **live** when what it waits for can still change: for a place, a slot or the
conversion, *one* of the runs it waits for is live or has ended (its place or slot is then given
back at the next plan); for the selection, *every* sibling it waits for is. Nothing to wait for at
all is live too: the next poll answers it. Live is the least fixed point of those rules from the
runs that make progress; every waiting run outside it is **stuck**: it waits, through a cycle or
a chain, only on runs that wait on it or on each other (the deadlock of a team sweep whose arrived
children kept their places). A run the caller could not read counts as live: the check reports
only what it can show.

Pure: records and the teams' holders in, stuck runs with their reasons out (``reconcile`` reads
and reports).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rlpipe.core.runs.admission import WAITS_FOR_WORDS
from rlpipe.core.runs.record import RunRecord, WaitsFor


@dataclass(frozen=True)
class Wait:
    """One waiting run: what it waits for and on which runs."""

    run_id: str
    waits_for: WaitsFor
    on: tuple[str, ...]
    every: bool  # the selection needs every sibling; the others need any one of their runs


def waits(records: Mapping[str, RunRecord], holders: Mapping[str, Sequence[str]]) -> dict[str, Wait]:
    """The waits-for graph of the waiting runs in ``records`` (every record the caller read, by run
    id); ``holders``: per team, the runs its usage document counts as holding a place."""
    graph: dict[str, Wait] = {}
    for run_id, record in records.items():
        admission = record.admission
        if admission is None or record.terminal:
            continue
        kind = admission.waits_for
        parent = records.get(record.lineage.sweep.parent) if record.lineage.sweep else None
        sweep = parent.sweep if parent is not None else None
        on: tuple[str, ...] = ()
        if kind in ("team-place", "team-budget"):
            on = tuple(h for h in holders.get(record.team, ()) if h != run_id)
        elif sweep is not None and kind == "sweep-slot":
            on = tuple(h for h in sweep.slots if h != run_id)
        elif sweep is not None and kind == "conversion":
            on = (sweep.converter,) if sweep.converter and sweep.converter != run_id else ()
        elif sweep is not None and kind == "selection":
            on = tuple(c for c in sweep.children if c != run_id and c not in sweep.arrived)
        graph[run_id] = Wait(run_id, kind, on, every=kind == "selection")
    return graph


def stuck(records: Mapping[str, RunRecord], graph: Mapping[str, Wait]) -> dict[str, str]:
    """The waiting runs that can never move, each with why (the runs it waits on, and on what those wait)."""

    def moves(run_id: str, live: set[str]) -> bool:
        record = records.get(run_id)
        return record is None or record.terminal or run_id in live or run_id not in graph

    live: set[str] = set()
    changed = True
    while changed:
        changed = False
        for run_id, wait in graph.items():
            if run_id in live:
                continue
            ok = [moves(t, live) for t in wait.on]
            if not wait.on or (all(ok) if wait.every else any(ok)):
                live.add(run_id)
                changed = True
    found: dict[str, str] = {}
    for run_id, wait in graph.items():
        if run_id in live:
            continue
        others = "; ".join(
            f"{t} waits for {WAITS_FOR_WORDS[graph[t].waits_for]}" for t in wait.on if t in graph
        )
        found[run_id] = (
            f"run {run_id} waits for {WAITS_FOR_WORDS[wait.waits_for]}, held by runs that can never give "
            f"it: {others}. None of them can move until one of them ends (rlpipe cancel one of them)"
        )
    return found
