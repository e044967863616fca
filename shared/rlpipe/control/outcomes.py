"""What a run achieved: its evaluations, the chips it held, and the quality gate's verdict.

Kept apart from the stage operations (which decide what is *true* about a workload) because these
are about the *result*: they fold what the head's log printed into the ledger's ``results``, keep
each attempt's chip-hours, evaluate the gate after train, and describe a run's end for the
metrics (``run_metrics``). All of it is written in the same compare-and-swap as the phase, so a
status read never loses an evaluation another read recorded.
"""

from __future__ import annotations

from typing import Any

from rlpipe.control import run_metrics
from rlpipe.control.ledger import Attempt, GateRecord, Ledger, RunRecord, now, parse_time
from rlpipe.control.logs import Logger
from rlpipe.core import cost
from rlpipe.core import gate as quality_gate
from rlpipe.core.request import Request

GATED = "gated"  # the failure tag, and the run's terminal state, when the gate holds a model back


def merge_results(
    recorded: dict[str, Any],
    seen: dict[str, Any] | None,
    final_step: int | None,
    *,
    resumed: bool = False,
    attempt: int | None = None,
) -> dict[str, Any]:
    """Recorded evaluations plus those in the log lines just read; nothing recorded is dropped.

    Every intermediate evaluation is kept with the ``attempt`` that printed it: a resumed attempt
    evaluates again at steps an earlier one reached, and both are facts of the run (the curve is
    drawn per attempt). ``pre`` is the base model's: train_rl prints a ``Pre RL Training`` line
    on every start, but an attempt that ``resumed`` from a checkpoint evaluates the partly trained
    model, which is not the baseline, so only an attempt from step 0 records it."""
    out = dict(recorded)
    seen = seen or {}
    if seen.get("pre") is not None and not resumed:
        out["pre"] = seen["pre"]
    if seen.get("post") is not None:
        out["post"] = seen["post"]
    out.setdefault("pre", None)
    out.setdefault("post", None)
    fresh = [{**e, "attempt": attempt} if attempt is not None else e for e in seen.get("intermediate") or []]
    keyed = {(e.get("attempt"), e["step"]): e for e in [*(recorded.get("intermediate") or []), *fresh]}
    out["intermediate"] = [keyed[k] for k in sorted(keyed, key=lambda k: (k[1], k[0] or 0))]
    if final_step is not None:
        out["final_step"] = final_step
    return out


def newer_progress(recorded: dict[str, Any], read: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's progress after a read of new log lines: each value from the newest line that
    printed it. A read with no ``Train step`` line keeps the step already known, so progress
    never goes back to an older line's."""
    if read is None:
        return None
    return {**recorded, **{k: v for k, v in read.items() if v is not None}}


def with_baseline(progress: dict[str, Any] | None, results: dict[str, Any]) -> dict[str, Any] | None:
    """The live progress with ``pre`` taken from the run's baseline (``results``), not from a
    resumed attempt's own ``Pre RL Training`` line."""
    if not progress:
        return progress
    pre = results.get("pre") or {}
    out = {k: v for k, v in progress.items() if k not in ("pre_mean_reward", "pre_accuracy")}
    if pre:
        out["pre_mean_reward"], out["pre_accuracy"] = pre.get("mean_reward"), pre.get("accuracy")
    return out


def run_price(request: dict[str, Any], prices_json: str) -> tuple[str, cost.Price] | None:
    """The run's provisioning mode and its list price per chip-hour (None without a TPU type).

    A deployment's ``RLPIPE_PRICES`` that cannot be read makes the price unset, with the reason:
    a run must not fail on every status read because of a cost setting, and the list price is
    not what a deployment that overrides it pays (``rlpipe plan`` refuses the setting outright)."""
    tpu = request.get("tpu") or {}
    if not tpu.get("type"):
        return None
    mode = str(tpu.get("provisioning") or "reservation")
    try:
        override = cost.parse_override(prices_json) if prices_json else None
    except cost.PricesInvalid as exc:
        return mode, cost.Price(None, cost.SETTING, "now", f"{cost.SETTING} is invalid: {exc}")
    return mode, cost.price(str(tpu["type"]), mode, override)


def cost_estimate(request: dict[str, Any], chip_hours: float | None, prices_json: str) -> float | None:
    """What ``chip_hours`` cost at the run's provisioning mode's list price (None when unpublished)."""
    priced = run_price(request, prices_json)
    return priced[1].cost(chip_hours) if priced and chip_hours else None


def reward_summary(results: dict[str, Any]) -> tuple[float | None, float | None]:
    """(post mean_reward, post − pre), each None when a number is missing."""
    post = (results.get("post") or {}).get("mean_reward")
    pre = (results.get("pre") or {}).get("mean_reward")
    gain = post - pre if isinstance(post, int | float) and isinstance(pre, int | float) else None
    return (post if isinstance(post, int | float) else None), gain


def evaluate_gate(record: RunRecord, req: Request) -> tuple[GateRecord, quality_gate.GateVerdict | None]:
    """The gate's record for this run: an override stands; no gate passes; else the verdict."""
    if record.gate is not None and record.gate.override is not None:
        return record.gate, None
    if req.gate is None:
        return GateRecord(passed=True, reasons=["no gate requested"], evaluated_at=now()), None
    verdict = quality_gate.evaluate(req.gate, record.results)
    return GateRecord(passed=verdict.passed, reasons=list(verdict.reasons), evaluated_at=now()), verdict


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
    verdict: dict[str, Any] = {}

    def change(r: RunRecord) -> str | None:
        recorded, judged = evaluate_gate(r, req)
        verdict.update(judged=judged is not None, record=recorded)
        if r.gate == recorded or (judged is None and r.gate is not None):
            return None
        r.gate = recorded
        return "gate"

    ledger.update(run_id, change, detail=lambda r: r.gate.model_dump() if r.gate else {})
    recorded = verdict["record"]
    if verdict["judged"]:
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


def log_stage_ended(log: Logger, run_id: str, a: Attempt, now_epoch: float) -> None:
    """The ``stage_ended`` line of an attempt that just finished (once: the phase change's writer)."""
    tag = a.failure_class
    run_metrics.stage_ended(
        log,
        run_id=run_id,
        stage=a.stage,
        attempt=a.attempt,
        phase=a.phase,
        failure_class=tag if tag in run_metrics.FAILURE_CLASSES else None,
        duration_seconds=max(0.0, now_epoch - parse_time(a.launched_at).timestamp()),
        chip_hours=a.chip_hours,
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
        round=record.round if ended_before else None,
    )
