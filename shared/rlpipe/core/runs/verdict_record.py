"""What a verdict on a run changes in its record: the quality gate's, and how its training ended.

Kept apart from the control plane for the reason ``phase_record`` is: the ledger's compare-and-swap
may apply a change again on a newer record, so each is one function of the record being replaced.
"""

from __future__ import annotations

from rlpipe.core import gate as quality_gate
from rlpipe.core.request import Request
from rlpipe.core.runs.record import GateRecord, RunRecord, now
from rlpipe.core.runs.results import as_exported
from rlpipe.core.train_verdict import TrainOutcome

TRAINING_END = "training_end"  # in a run's results: how training ended, when not at max_steps


def evaluate_gate(record: RunRecord, req: Request) -> tuple[GateRecord, quality_gate.GateVerdict | None]:
    """The gate's record for this run: an override stands; no gate passes; else the verdict."""
    if record.gate is not None and record.gate.override is not None:
        return record.gate, None
    if req.gate is None:
        return GateRecord(passed=True, reasons=["no gate requested"], evaluated_at=now()), None
    # the exported step's evaluation, when export.step chose one before the gate (control/stage/exported_step.py)
    judged = as_exported(record.results, record.lineage.exported_step, record.lineage.final_step)
    verdict = quality_gate.evaluate(req.gate, judged)
    return GateRecord(passed=verdict.passed, reasons=list(verdict.reasons), evaluated_at=now()), verdict


def judge_gate(r: RunRecord, req: Request) -> tuple[str | None, tuple[GateRecord, bool]]:
    """The gate's verdict on the run as this record holds it (a person's override stands); → (the
    event, (the gate recorded, whether it was judged now)). A repeat changes nothing."""
    recorded, verdict = evaluate_gate(r, req)
    judged = verdict is not None
    if r.gate == recorded or (not judged and r.gate is not None):
        return None, (recorded, judged)
    r.gate = recorded
    return "gate", (recorded, judged)


def record_train_end(r: RunRecord, outcome: TrainOutcome, attempt: int) -> None:
    """A clean end of training: ``lineage.final_step`` becomes the step training actually ended at
    (export and every later done rule read it), and the results keep, in words, why that is not
    max_steps (``status`` prints it)."""
    if outcome.final is None:
        return
    a = r.attempt_record("train", attempt)
    if a is None or a.phase != "succeeded":
        return
    r.lineage.final_step = outcome.final
    if outcome.explanation:
        r.results[TRAINING_END] = {
            "attempt": attempt,
            "final_step": outcome.final,
            "expected_final_step": outcome.expected,
            "explanation": outcome.explanation,
        }
    else:
        r.results.pop(TRAINING_END, None)
