"""What a run achieved: the quality gate's verdict, and a run's end described for the metrics.

Kept apart from the stage operations (which decide what is *true* about a workload) because these
are about the *result*: they evaluate the gate after train and describe how a stage or a run ended
(``run_metrics``). Folding the head's evaluations into the record is the core's
(``core.runs.results``), applied in the same compare-and-swap as the phase (``core.runs.phase_record``).
"""

from __future__ import annotations

from typing import Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle import run_metrics
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.request import Request
from rlpipe.core.runs import verdict_record
from rlpipe.core.runs.record import Attempt, GateRecord, RunRecord, parse_time
from rlpipe.core.runs.results import reward_summary

GATED = "gated"  # the failure tag, and the run's terminal state, when the gate holds a model back


def gate_answer(gate: GateRecord) -> dict[str, Any]:
    """What the workflow reads: pass, or the failure to raise (``gated``, or ``permanent`` when the
    gate could not be evaluated, since a missing number must never pass silently)."""
    if gate.override is not None:
        o = gate.override
        return {"passed": True, "reason": f"gate overridden by {o.by} at {o.at}: {o.reason}", "tags": []}
    if gate.passed:
        return {"passed": True, "reason": "; ".join(gate.reasons), "tags": []}
    if gate.passed is None:
        return {
            "passed": False,
            "tags": ["permanent"],
            "reason": "gate not evaluated: " + "; ".join(gate.reasons),
        }
    missed = [r for r in gate.reasons if " below " in r] or gate.reasons
    return {"passed": False, "tags": [GATED], "reason": "gate failed: " + "; ".join(missed)}


def gate(ledger: Ledger, log: Logger, run_id: str, req: Request) -> dict[str, Any]:
    """The gate op: record the verdict (or keep a person's override) in the ledger, and answer."""

    _, (recorded, judged) = ledger.update(
        run_id,
        lambda r: verdict_record.judge_gate(r, req),
        detail=lambda r: r.gate.model_dump() if r.gate else {},
    )
    if judged:
        run_metrics.gate_evaluated(log, run_id=run_id, passed=recorded.passed, reasons=recorded.reasons)
    return gate_answer(recorded)


def gate_label(record: RunRecord) -> str:
    """The gate as the metrics name it: passed, failed, overridden, or none (not evaluated)."""
    gate = record.gate
    if gate is None or gate.reasons == ["no gate requested"]:
        return "none"
    if gate.override is not None:
        return "overridden"
    return {True: "passed", False: "failed"}.get(gate.passed, "none")  # type: ignore[arg-type]


def log_stage_ended(log: Logger, record: RunRecord, a: Attempt, now_epoch: float) -> None:
    """The ``stage_ended`` line of an attempt of ``record``'s run that just finished (once: the
    phase change's writer)."""
    tag = a.failure_class
    run_metrics.stage_ended(
        log,
        run_id=record.run_id,
        stage=a.stage,
        attempt=a.attempt,
        phase=a.phase,
        failure_class=tag if tag in run_metrics.FAILURE_CLASSES else None,
        duration_seconds=max(0.0, now_epoch - parse_time(a.launched_at).timestamp()),
        chip_hours=a.chip_hours,
        team=record.team,
    )


def log_run_ended(log: Logger, record: RunRecord) -> None:
    """The end line of a run (called only by the call that ended it): ``run_ended`` the first
    time, ``round_ended`` when it had ended before (a retried round, or a promoted run that was
    ``gated``), so that counts of ended runs hold one end per run."""
    failure = record.failure
    tag = failure.tag if failure else None
    failed = (
        record.attempt_record(failure.stage, failure.attempt)
        if failure and failure.stage and failure.attempt
        else None
    )
    exhausted = failed.budget_exhausted if failed else None
    post, gain = reward_summary(record.results)
    ended_before = record.round > 1 or record.lineage.promoted is not None
    run_metrics.run_ended(
        log,
        run_id=record.run_id,
        outcome=record.state,
        failure_class=exhausted or (tag if tag in run_metrics.FAILURE_CLASSES else None),
        budget_exhausted=exhausted is not None,
        stage=failure.stage if failure else record.stage,
        post_mean_reward=post,
        reward_gain=gain,
        gate=gate_label(record),
        team=record.team,
        round=record.round if ended_before else None,
    )
