"""An operator's retry and cancel of a sweep: a round of the parent and of each child that can
still change the sweep's outcome (``rlpipe retry SWEEP``, through the stage function's ``retry``),
and the children's executions cancelled before the sweep is ended (``rlpipe cancel SWEEP``)."""

from __future__ import annotations

from typing import Any

from rlpipe.control.lifecycle import retry_rounds
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import CancelExecution, RetryAsked
from rlpipe.control.sweep import coordination as sweeps
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.runs.record import RunRecord


def retry_parent(ledger: Ledger, parent: RunRecord, asked: RetryAsked) -> dict[str, Any]:
    """``rlpipe retry SWEEP``: a round of the parent (who asked, why), and a round of each child
    that can still change the outcome (``sweeps.retry_targets``), each once per caller key. A
    repeated call (the same key) retries only children a lost call left failed."""
    assert parent.sweep is not None
    by, reason, from_stage, key, caller = asked.by, asked.reason, asked.from_stage, asked.key, asked.caller
    selection = parent.sweep.selection
    if selection is not None and selection.run_id is not None and from_stage not in (None, "publish"):
        raise PermanentFailure(
            f"sweep {parent.run_id} selected {selection.run_id} by what it trained; retrying it from "
            f"{from_stage} would publish a model the selection never measured (retry from publish)"
        )
    children = [ledger.get(c) for c in parent.sweep.children]
    targets = sweeps.retry_targets(parent, children)
    if not targets and retry_rounds.refusal(parent, from_stage) is None:
        raise PermanentFailure(
            f"sweep {parent.run_id}: no child that failed or was cancelled can change its outcome"
        )
    decision = retry_rounds.start_round(
        ledger, parent.run_id, by=by, reason=reason, from_stage=from_stage, key=key, caller=caller
    )
    if decision.outcome == "refused":
        raise PermanentFailure(decision.reason)
    started: list[str] = []
    for run_id in targets:
        child = retry_rounds.start_round(
            ledger, run_id, by=by, reason=reason, from_stage=from_stage, key=f"{key}:{run_id}", caller=caller
        )
        if child.outcome == "refused":
            raise PermanentFailure(f"child {run_id}: {child.reason}")
        asked.start(run_id)
        started.append(run_id)
    updated = sweeps.reopen(ledger, parent.run_id)
    return {
        "run_id": parent.run_id,
        "outcome": decision.outcome,
        "round": decision.round,
        "state": updated.state,
        "execution": None,
        "children": started,
    }


def cancel_children(
    ledger: Ledger, record: RunRecord, cancel_execution: CancelExecution
) -> list[dict[str, Any]]:
    """The execution of each child of the sweep that has not ended, cancelled; a row per such child."""
    assert record.sweep is not None
    if record.terminal:  # its children have all ended: the stage function refuses the cancel
        return []
    rows = []
    for index, run_id in enumerate(record.sweep.children):
        child = ledger.get(run_id)
        if child is None or child.terminal:
            continue
        row: dict[str, Any] = {
            "index": index,
            "run_id": run_id,
            "was": child.state,
            "execution": child.execution.name,
            "execution_cancelled": False,
        }
        if child.execution.name:
            row.update(cancel_execution(run_id, child.execution.name))
        rows.append(row)
    return rows
