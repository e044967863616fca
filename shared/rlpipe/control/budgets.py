"""Which retry budget pays for a failed attempt, and when the budgets are spent (DESIGN §6).

A failure class the workflow would retry becomes ``permanent`` once its own budget, or the request's
overall retry cap, is used up for the stage; the message then says which one ran out.
"""

from __future__ import annotations

from rlpipe.control.ledger import RunRecord
from rlpipe.core.failures import FailureClass
from rlpipe.core.request import Request


def classify(
    record: RunRecord, req: Request, stage: str, attempt: int, cls: FailureClass, reason: str
) -> dict[str, str]:
    if cls == FailureClass.PERMANENT:
        return {"tag": cls.value, "message": reason}
    budget = getattr(req.retry.budgets, cls.value)
    used = sum(
        1
        for a in record.attempts
        if a.stage == stage and a.failure_class == cls.value and a.attempt != attempt
    )
    total = sum(1 for a in record.attempts if a.stage == stage and a.failure_class and a.attempt != attempt)
    if used + 1 > budget:
        return {
            "tag": "permanent",
            "message": f"{cls.value} budget of {budget} exhausted for {stage}: {reason}",
        }
    if total + 1 > req.retry.max_retries:
        return {
            "tag": "permanent",
            "message": f"retry cap of {req.retry.max_retries} reached for {stage}: {cls.value}: {reason}",
        }
    return {"tag": cls.value, "message": reason}
