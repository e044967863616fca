"""Which retry budget pays for a failed attempt, and when the budgets are spent (docs/design.md#failure-classes-and-retry-budgets).

A failure class the workflow would retry becomes ``permanent`` once its own budget, or the request's
overall retry cap, is used up for the stage; the message then says which one ran out.

Budgets are per round: a retried run (``control.lifecycle.retry_rounds``) starts its new round with every budget
whole, so only the attempts launched in the record's current round are counted.
"""

from __future__ import annotations

from rlpipe.core.failures import FailureClass
from rlpipe.core.request import Request
from rlpipe.core.runs.record import RunRecord


def classify(
    record: RunRecord, req: Request, stage: str, attempt: int, cls: FailureClass, reason: str
) -> dict[str, str]:
    if cls == FailureClass.PERMANENT:
        return {"tag": cls.value, "message": reason}
    budget = getattr(req.retry.budgets, cls.value)
    earlier = [
        a for a in record.attempts if a.stage == stage and a.attempt != attempt and a.round == record.round
    ]
    used = sum(1 for a in earlier if a.failure_class == cls.value)
    total = sum(1 for a in earlier if a.failure_class)
    if used + 1 > budget:
        return {
            "tag": "permanent",
            "message": f"{cls.value} budget of {budget} exhausted for {stage}: {reason}",
            "exhausted": cls.value,  # the class whose budget ran out (metrics, the report)
        }
    if total + 1 > req.retry.max_retries:
        return {
            "tag": "permanent",
            "message": f"retry cap of {req.retry.max_retries} reached for {stage}: {cls.value}: {reason}",
            "exhausted": cls.value,
        }
    return {"tag": cls.value, "message": reason}
