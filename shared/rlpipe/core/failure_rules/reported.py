"""Which rule ended a run: the name every run failure the ledger records carries (``Failure.rule``).

Most runs end with the failure the workflow reports to ``finish``: the last attempt's, raised
with the tag and message ``stage status`` answered (and recorded on the attempt with its rule's
name), the workflow's own stage deadline, or the quality gate. The workflow's report carries no
rule, so :func:`reported_rule` finds it. The other ends are decided where they happen, and
named here so that every name a ledger can hold is in this package:
"""

from __future__ import annotations

from typing import Protocol

from rlpipe.core.failure_rules.attempt import BUDGET_EXHAUSTED, RETRY_CAP_REACHED, STAGE_DEADLINE

# The workflow's own stage deadline (``deadline_exceeded`` in workflows/pipeline.yaml): no attempt
# launched once the backoff has used up the stage's time, or its wait ran past it.
WORKFLOW_DEADLINE = "workflow-deadline"
WORKFLOW_DEADLINE_MESSAGE = "deadline exceeded"  # the message that step raises (a test reads the YAML)
QUALITY_GATE = "quality-gate"  # the gate held the model back (core.gate; tag ``gated``)
GATED_TAG = "gated"
# Any other error the workflow caught and reported (an HTTP error of a stage call, a refusal).
WORKFLOW_REPORTED = "workflow-reported"
PLAN_REFUSED = "plan-refused"  # plan could not pin the model's revision or the datasets
# plan refused the run before it held a TPU: its reservation would cross its team's monthly
# chip-hour budget (core.team_limits; the message says how much is left)
TEAM_BUDGET_EXCEEDED = "team-budget-exceeded"
# it waited at plan or at its sweep's selection longer than timeouts.waiting (core.runs.admission)
WAIT_BOUND = "wait-bound"
EXECUTION_NOT_STARTED = "execution-not-started"  # intake could not start the workflow execution
OPERATOR_CANCELLED = "operator-cancelled"  # rlpipe cancel (the caller is on the failure)
SWEEP_CANCELLED = "sweep-cancelled"  # a sweep's child or parent, ended with its sweep
SWEEP_NONE_SELECTED = "sweep-none-selected"  # a sweep's selection found no child to publish
SWEEP_CHILDREN_ENDED = "sweep-children-ended"  # a sweep's children all ended without shipping
# The sweep's early-stopping rule stopped a child (core.early_stop).
SWEEP_EARLY_STOPPED = "sweep-early-stopped"
STOPPED_TAG = "stopped"  # its failure's tag, which the workflow reports back and the state it maps to
# Reconciliation (reconcile/rules.py): a run whose execution ended without finishing it.
EXECUTION_MISSING = "execution-missing"
EXECUTION_FAILED = "execution-failed"
EXECUTION_CANCELLED = "execution-cancelled"
EXECUTION_SUCCEEDED_INCOMPLETE = "execution-succeeded-incomplete"

RUN_ENDINGS: frozenset[str] = frozenset(
    {
        WORKFLOW_DEADLINE,
        QUALITY_GATE,
        WORKFLOW_REPORTED,
        PLAN_REFUSED,
        TEAM_BUDGET_EXCEEDED,
        WAIT_BOUND,
        EXECUTION_NOT_STARTED,
        OPERATOR_CANCELLED,
        SWEEP_CANCELLED,
        SWEEP_NONE_SELECTED,
        SWEEP_CHILDREN_ENDED,
        SWEEP_EARLY_STOPPED,
        EXECUTION_MISSING,
        EXECUTION_FAILED,
        EXECUTION_CANCELLED,
        EXECUTION_SUCCEEDED_INCOMPLETE,
    }
)

# Verdicts bound to the round: a new round (``rlpipe retry``) starts with every budget whole and
# every deadline afresh, so it can end differently. Any other permanent failure fails again the
# same way (the request is the same).
ROUND_BOUND: frozenset[str] = frozenset(
    {BUDGET_EXHAUSTED, RETRY_CAP_REACHED, STAGE_DEADLINE, WORKFLOW_DEADLINE, WAIT_BOUND}
)


class RecordedAttempt(Protocol):
    """An attempt as the run's record holds it (``core.runs.record.Attempt``)."""

    @property
    def failure_class(self) -> str | None: ...
    @property
    def failure_rule(self) -> str | None: ...


def reported_rule(tag: str, message: str, named: RecordedAttempt | None, *, otherwise: str) -> str:
    """The rule behind a failure the workflow reported (its ``tag`` and ``message``), read against
    the attempt it names (``named``, from the run's record): its own deadline's message, the gate's
    tag, the attempt's recorded failure when of the same class (the workflow raises what ``stage
    status`` answered and recorded), else ``otherwise``."""
    if tag == "permanent" and message == WORKFLOW_DEADLINE_MESSAGE:
        return WORKFLOW_DEADLINE
    if tag == GATED_TAG:
        return QUALITY_GATE
    if named is not None and named.failure_rule and named.failure_class == tag:
        return named.failure_rule
    return otherwise
