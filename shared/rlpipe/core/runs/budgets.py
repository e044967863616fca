"""What a stage's attempts have used of the retry budgets in the record's current round (docs/design.md, "Failure classes and retry budgets").

The evidence the budget rules judge (``core.failure_rules.attempt``: a class the workflow would
retry becomes ``permanent`` once its own budget, or the request's overall retry cap, is used up for
the stage; the message then says which one ran out).

Budgets are per round: a retried run (``control.lifecycle.retry_rounds``) starts its new round with every budget
whole, so only the attempts launched in the record's current round are counted.
"""

from __future__ import annotations

from rlpipe.core.failure_rules.attempt import decide_attempt
from rlpipe.core.failure_rules.evidence import AttemptEvidence, BudgetUse
from rlpipe.core.failures import RETRYABLE, FailureClass
from rlpipe.core.request import Request
from rlpipe.core.runs.record import RunRecord


def use(record: RunRecord, req: Request, stage: str, attempt: int, cls: FailureClass) -> BudgetUse | None:
    """The budget ``cls`` draws on and what the stage's other attempts of this round used of it
    and of the retry cap; None for a class never retried (``permanent``)."""
    if cls not in RETRYABLE:
        return None
    earlier = [
        a for a in record.attempts if a.stage == stage and a.attempt != attempt and a.round == record.round
    ]
    return BudgetUse(
        budget=getattr(req.retry.budgets, cls.value),
        used=sum(1 for a in earlier if a.failure_class == cls.value),
        failed=sum(1 for a in earlier if a.failure_class),
        max_retries=req.retry.max_retries,
    )


def classify(
    record: RunRecord,
    req: Request,
    stage: str,
    attempt: int,
    cls: FailureClass,
    reason: str,
    rule: str | None = None,
) -> dict[str, str]:
    """The failure of an attempt that failed with ``cls`` (``rule``: the workload rule that said
    so), after the budget rules: ``{tag, message, [exhausted], [rule]}``."""
    evidence = AttemptEvidence(
        stage=stage,
        workload="",
        phase="failed",
        failure_class=cls,
        message=reason,
        rule=rule,
        budget=use(record, req, stage, attempt, cls),
    )
    failure = decide_attempt(evidence).failure()
    assert failure is not None  # a failed phase stays failed
    return failure
