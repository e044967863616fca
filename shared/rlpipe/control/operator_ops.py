"""An operator's operations on a run: cancel, retry and promote (``rlpipe cancel|retry|promote``).

Each is one function of what it acts through (the stage service, or the ledger and intake's
exactly-once start), the order (which run, and what the operator gave), and the caller: the
identity Google verified on the call (control/adapters/callers.py), recorded with what it did. The order
is read from the call's body here too (:class:`BadOrder` names what to fix); ``stage_http`` maps
the HTTP call to these functions and their answers and refusals back to status codes, and the CLI
reaches them through the stage function.

**Cancel** runs in two places, because two identities are involved. Workflows runs no ``except``
block when an execution is cancelled from outside, so what the workflow would have done on its way
out is done by the stage function (:func:`cancel`): the run's workloads deleted, then the run
finished ``cancelled`` with the caller kept on its failure. The Workflows executions, though, are
cancelled by the CLI with the operator's own credentials (the stage function may not cancel
executions); which ones, and in what order, is decided here (:func:`cancel_from_outside`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle import promotion, retry_rounds
from rlpipe.control.lifecycle.intake_result import IntakeResult
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import CancelExecution, RetryAsked, RunPolicies
from rlpipe.core import identity
from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.operator_contract import CancelAnswer
from rlpipe.core.runs.record import RunRecord

if TYPE_CHECKING:
    from rlpipe.control.stage.service import StageService

CANCELLED = "cancelled by rlpipe cancel"  # the failure message of a run a person cancelled
Start = Callable[[str], IntakeResult]  # intake's exactly-once start of a run's execution


class BadOrder(ValueError):
    """The operator's call is malformed; the message says what to fix (never echoing a value)."""


@dataclass(frozen=True)
class CancelOrder:
    run_id: str


@dataclass(frozen=True)
class PromoteOrder:
    run_id: str
    by: str  # the name the person gave
    reason: str


def run_id_of(body: dict[str, Any]) -> str:
    run_id = body.get("run_id")
    if not identity.is_run_id(run_id):
        raise BadOrder("run_id is missing or not a run id (lowercase letters, digits and -)")
    return str(run_id)


def cancel_order(body: dict[str, Any]) -> CancelOrder:
    return CancelOrder(run_id_of(body))


def promote_order(body: dict[str, Any]) -> PromoteOrder:
    run_id, by, reason = run_id_of(body), body.get("by"), body.get("reason")
    if not isinstance(by, str) or not by.strip() or len(by) > promotion.MAX_BY_CHARS:
        raise BadOrder(f"by must name who decides, in at most {promotion.MAX_BY_CHARS} characters")
    if not isinstance(reason, str) or len(reason) > promotion.MAX_REASON_CHARS:
        raise BadOrder(f"reason must be text of at most {promotion.MAX_REASON_CHARS} characters")
    return PromoteOrder(run_id, by.strip(), reason)


def retry_order(body: dict[str, Any]) -> retry_rounds.RetryOrder:
    try:
        return retry_rounds.parse_order(body)
    except retry_rounds.BadRetry as exc:
        raise BadOrder(str(exc)) from None


# ---- cancel --------------------------------------------------------------------------------------


def cancel(service: StageService, order: CancelOrder, caller: str | None) -> dict[str, Any]:
    """The chip-hours its live attempts' pods held recorded, the run's workloads deleted, their
    pods' chip-hours recorded again up to each pod's own end (``StageService.record_ended``), the
    run finished ``cancelled`` by ``caller``, and then a train attempt's head log read to its pod's
    end (``control.stage.cancel_read``: it only adds to the finished run); the answer is the finish's status message with
    ``deleted`` (and ``cleanup_error`` when cleanup failed, the run's own or a child's).

    A cleanup that fails is reported, not fatal: the run is still finished, an execution left
    running finds it terminal and stops, and reconcile deletes what is left. A sweep's parent ends
    its children that had not ended, each with the same caller. A run that had ended keeps its
    state (the answer's ``state`` says which)."""
    started = time.monotonic()  # a sweep's reads to the end stop in time for the answer
    run_id = order.run_id
    if service.ledger.get(run_id) is None:  # before anything is deleted
        raise PermanentFailure(f"run {run_id} has no ledger")
    log = service.log.bind(run_id=run_id)
    answer: dict[str, Any] = {"deleted": []}
    held = service.record_held(run_id)  # what its pods held up to now, before they go (never raises)
    try:
        answer["deleted"] = service.cleanup(run_id)["deleted"]
    except Exception as exc:  # the cluster or the bucket refused: the run is still finished
        answer["cleanup_error"] = f"{type(exc).__name__}: {exc}".strip()
        log.warning("cancel: cleanup failed (reconcile deletes what is left)", error=answer["cleanup_error"])
    else:  # the pods are ending: counted to their own ends (never raises)
        service.record_ended(run_id, held)
    failure = {"tag": "cancelled", "message": CANCELLED, "rule": reported.OPERATOR_CANCELLED}
    refused: dict[str, str] = {}  # a child whose workloads the cluster would not delete, and why
    members = service.end_group(run_id, "cancelled", caller, refused)  # a sweep's children first
    # Each child is finished still, as the run is; the answer says what was left behind, and why.
    own_cleanup_failed = "cleanup_error" in answer
    errors = [answer["cleanup_error"]] if own_cleanup_failed else []
    errors += [f"child {child}: {error}" for child, error in refused.items()]
    if errors:
        answer["cleanup_error"] = "; ".join(errors)
    ended = service.finish(run_id, "cancelled", failure, caller=caller)
    from rlpipe.control.stage.cancel_read import read_members_to_end, read_to_end

    if not own_cleanup_failed:  # its pods are ending; the run is finished first: this read only adds
        read_to_end(service, run_id, held)
    read_members_to_end(service, members, started)  # each child as a run's cancel reads it
    log.info("cancel asked", caller=caller, state=ended.get("state"))
    return {**ended, **answer}


def operator_refusal(policies: RunPolicies, ledger: Ledger, run_id: str, caller: str | None) -> str | None:
    """Why ``caller`` may not operate on ``run_id`` (cancel, retry, promote), as the run policies
    decide (a team's: only its operators): decided here, where the operation is, so that no client
    (the CLI or a hand-made call) can act on a run that is not theirs. None: allowed, or no such
    run (each operation answers that itself)."""
    record = ledger.get(run_id)
    return None if record is None else policies.operator_refusal(record, caller)


def cancel_from_outside(
    ledger: Ledger,
    run_id: str,
    record: RunRecord,
    *,
    policies: RunPolicies,
    cancel_execution: CancelExecution,
    end_run: Callable[[str], CancelAnswer],
) -> dict[str, Any]:
    """``rlpipe cancel`` from the operator's side: first the Workflows executions, a sweep's children
    that have not ended and then the run's own, each by ``cancel_execution(run_id, execution)``
    (with the operator's credentials; it reports an error in its answer rather than raising), so
    none of them goes on launching; then ``end_run(run_id)`` (the stage function's :func:`cancel`:
    the workloads deleted, the run and a sweep's children finished, with the caller).

    Each step is attempted whatever the one before did: an execution the operator may not cancel
    or a failed cleanup is reported in the result (``execution_error``, ``cleanup_error``); an
    execution left running finds the run terminal and stops, workloads left behind go with
    reconcile. The result: ``execution_cancelled``, ``deleted``, ``state``, and for a sweep
    ``children`` (each child's index, state before and after, and its execution's cancel).
    ``record``: the run's, as the caller read it to learn that the run exists."""
    children = policies.cancel_members(record, cancel_execution)  # None: not a group's run
    result: dict[str, Any] = {"execution_cancelled": False, "deleted": []}
    if record.execution.name:
        result.update(cancel_execution(run_id, record.execution.name))
    ended = end_run(run_id)
    result["deleted"] = list(ended.deleted)
    if ended.cleanup_error:  # the run is still finished; reconcile deletes what is left
        result["cleanup_error"] = ended.cleanup_error
    result["state"] = ended.state
    if children is not None:
        for row in children:  # their states once the stage function's cancel ended them
            child = ledger.get(row["run_id"])
            row["state"] = child.state if child is not None else None
        result["children"] = children
    return result


# ---- retry and promote -----------------------------------------------------------------------------


def retry_run(
    ledger: Ledger,
    policies: RunPolicies,
    start: Start,
    order: retry_rounds.RetryOrder,
    caller: str | None,
    log: Logger,
) -> dict[str, Any]:
    """A new round of a failed or cancelled run, once per caller-made key, and its execution
    started (control/retry_rounds.py); a run that stands for a group is retried by its policy (a
    sweep: a round of it and of each child that can still change its outcome)."""
    by = order.by or caller or "unknown"
    record = ledger.get(order.run_id)
    if record is not None:
        why = policies.refusal(record, "retry")
        if why is not None:
            raise PermanentFailure(why)
        asked = RetryAsked(by, order.reason, order.from_stage, order.key, caller, start)
        grouped = policies.retry(record, asked)
        if grouped is not None:
            return grouped
    decision = retry_rounds.start_round(
        ledger,
        order.run_id,
        by=by,
        reason=order.reason,
        from_stage=order.from_stage,
        key=order.key,
        caller=caller,
    )
    if decision.outcome == "refused":
        raise PermanentFailure(decision.reason)
    if start(order.run_id).outcome == "start-failed":
        raise PermanentFailure(f"round {decision.round} was opened but its execution could not start")
    log.info(
        "retry: new round" if decision.outcome == "started" else "retry repeated: its round exists",
        round=decision.round,
        by=order.by,
        caller=caller,
        from_stage=order.from_stage,
    )
    record = ledger.get(order.run_id)
    return {
        "run_id": order.run_id,
        "outcome": decision.outcome,
        "round": decision.round,
        "state": record.state if record else None,
        "execution": record.execution.name if record else None,
    }


def promote(
    ledger: Ledger, policies: RunPolicies, start: Start, order: PromoteOrder, caller: str | None, log: Logger
) -> dict[str, Any]:
    """The gate's override recorded (control/lifecycle/promotion.py) and the run's next execution
    started; refused where a policy says it does not apply (a sweep is promoted through a child)."""
    found = ledger.get(order.run_id)
    why = policies.refusal(found, "promote") if found is not None else None
    if why is not None:
        raise PermanentFailure(why)
    try:
        record = promotion.promote(
            ledger, order.run_id, by=order.by, reason=order.reason, caller=caller, start=start
        )
    except promotion.NotPromotable as exc:
        raise PermanentFailure(str(exc)) from None
    log.info("promoted", by=order.by, caller=caller)
    promoted = record.lineage.promoted
    return {
        "run_id": record.run_id,
        "by": promoted.by if promoted else order.by,
        "state": record.state,
        "execution": record.execution.name,
    }
