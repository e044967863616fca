"""The attempt rules: what ``stage status`` answers the workflow, from the workload's verdict (the
workload rules) and what the stage knows beside the cluster (docs/design.md, "Failure classes and retry budgets").

Two independent facts decide whether a stage is done: what the cluster says of its workload and
what the bucket holds. A Job that succeeded without its artifact is a failure; a class the workflow
would retry is ``permanent`` once its budget, or the stage's retry cap, is spent in this round; a
stage past its deadline fails. In order (the first that holds decides; when none does, the
workload's verdict stands, with its own rule's name):

1. ``train-ended-unfinished``: train_rl exited 0, but not the way it ends a training (no
   checkpoint, no end line, a commit that is not the last step reported) → ``permanent``;
2. ``output-incomplete``: the workload succeeded, its output is incomplete → ``permanent``;
3. ``budget-exhausted``: a retryable class whose budget the round has spent → ``permanent``;
4. ``retry-cap-reached``: the stage's retries in this round are used up → ``permanent``;
5. ``stage-deadline``: queued or running past the stage's deadline, counted from its first launch
   in this round (a retry starts afresh) → ``permanent``.

Budgets are per round: a retried run (``control.lifecycle.retry_rounds``) starts its new round with every budget
whole, which is why rules 3 to 5 are bound to the round (``reported.ROUND_BOUND``).
"""

from __future__ import annotations

from rlpipe.core.failure_rules.evidence import AttemptEvidence
from rlpipe.core.failure_rules.verdict import Decision, Rule, Verdict, first_match
from rlpipe.core.failures import RETRYABLE, FailureClass


def _train_ended_unfinished(ev: AttemptEvidence) -> Decision | None:
    ended = ev.train_end
    if ended is None or ended.final is not None:
        return None
    return Decision("failed", f"{ev.workload}: {ended.reason}", FailureClass.PERMANENT)


def _output_incomplete(ev: AttemptEvidence) -> Decision | None:
    # Train's own end is judged by its verdict (rule 1): a clean end at an earlier step than the
    # config's is done, whatever the done rule of the config's final step says.
    if ev.phase != "succeeded" or ev.train_end is not None or ev.output is None or ev.output.complete:
        return None
    message = f"{ev.workload} succeeded but its output is incomplete: {ev.output.reason}"
    return Decision("failed", message, FailureClass.PERMANENT)


def _retryable_failure(ev: AttemptEvidence) -> FailureClass | None:
    cls = ev.failure_class
    return cls if ev.phase == "failed" and cls in RETRYABLE and ev.budget is not None else None


def _budget_exhausted(ev: AttemptEvidence) -> Decision | None:
    cls = _retryable_failure(ev)
    if cls is None or ev.budget is None or ev.budget.used + 1 <= ev.budget.budget:
        return None
    message = f"{cls.value} budget of {ev.budget.budget} exhausted for {ev.stage}: {ev.message}"
    return Decision("failed", message, FailureClass.PERMANENT, exhausted=cls)


def _retry_cap_reached(ev: AttemptEvidence) -> Decision | None:
    cls = _retryable_failure(ev)
    if cls is None or ev.budget is None or ev.budget.failed + 1 <= ev.budget.max_retries:
        return None
    message = f"retry cap of {ev.budget.max_retries} reached for {ev.stage}: {cls.value}: {ev.message}"
    return Decision("failed", message, FailureClass.PERMANENT, exhausted=cls)


def _stage_deadline(ev: AttemptEvidence) -> Decision | None:
    if ev.phase not in ("queued", "running") or ev.age_seconds is None or ev.timeout_seconds is None:
        return None
    if ev.age_seconds <= ev.timeout_seconds:
        return None
    timeout = int(ev.timeout_seconds)
    message = f"{ev.stage} deadline exceeded ({timeout} s since its first launch)"
    return Decision("failed", message, FailureClass.PERMANENT)


BUDGET_EXHAUSTED = "budget-exhausted"
RETRY_CAP_REACHED = "retry-cap-reached"
STAGE_DEADLINE = "stage-deadline"
ATTEMPT_RULES: tuple[Rule[AttemptEvidence], ...] = (
    Rule("train-ended-unfinished", _train_ended_unfinished),
    Rule("output-incomplete", _output_incomplete),
    Rule(BUDGET_EXHAUSTED, _budget_exhausted),
    Rule(RETRY_CAP_REACHED, _retry_cap_reached),
    Rule(STAGE_DEADLINE, _stage_deadline),
)


def decide_attempt(ev: AttemptEvidence) -> Verdict:
    """The attempt's verdict: the first of :data:`ATTEMPT_RULES` that holds, else the workload's."""
    return first_match(ATTEMPT_RULES, ev) or Verdict(ev.phase, ev.rule, ev.message, ev.failure_class)
