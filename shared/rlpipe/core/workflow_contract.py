"""The contract between the workflow (``workflows/pipeline.yaml``) and the ``stage`` function.

The workflow only sequences; every decision is an HTTP call to ``stage`` whose body names an
operation (``op``) and whose answer the workflow reads as ``${plan.stages}``,
``map.get(status, "failure")`` and so on. Both sides used to spell the fields on their own: the
function in dict literals, the workflow in expressions, and a rename broke only a live run. Here is
one request model and one answer model per operation:

- ``stage_http`` reads every call's body through its request model, and hands every answer
  through its answer model before it leaves (a field the model does not declare, or one it needs
  and the answer lacks, is a bug of ours: :class:`ContractBroken`);
- ``tests/core/test_workflow_contract.py`` reads every body the workflow sends and every field it reads
  of an answer and checks them against these models.

Numbers arrive as Workflows writes them: an integer that went through arithmetic may come as a
double (``2.0``); such a value is an integer, a fractional one or a boolean is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, ValidationError

from rlpipe.core.identity import Stage
from rlpipe.core.request.model import Backoff, Budgets

Phase = Literal["queued", "running", "succeeded", "failed"]
# The plan's steps, in the order a plan lists them: the workloads, and two steps that are calls,
# not workloads (the quality gate after train; a sweep child's wait for its siblings' selection
# before publish).
PlanStep = Literal["convert", "train", "gate", "export", "select", "publish"]
Outcome = Literal["succeeded", "failed", "cancelled", "gated", "stopped"]


def _whole_number(value: Any) -> Any:
    """A double with no fraction (Workflows arithmetic) is the integer it equals."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WholeNumber = Annotated[StrictInt, BeforeValidator(_whole_number)]
Attempt = Annotated[WholeNumber, Field(ge=1)]


class ContractBroken(RuntimeError):
    """An answer of ours does not fit its model: a bug in ``stage``, never the caller's fault."""


# ---- calls: what the workflow sends --------------------------------------------------------------


class _Call(BaseModel):
    # Extra fields are ignored at run time (an older workflow revision in flight keeps working);
    # the contract test refuses any the workflow sends that a model does not declare.
    model_config = ConfigDict(extra="ignore")

    run_id: str
    execution_id: str | None = None  # call_stage merges the execution's id into every body


class PlanCall(_Call):
    op: Literal["plan"]


class LaunchCall(_Call):
    op: Literal["launch"]
    stage: Stage
    attempt: Attempt
    callback_url: str | None = None


class StatusCall(_Call):
    op: Literal["status"]
    stage: Stage
    attempt: Attempt


class GateCall(_Call):
    op: Literal["gate"]


class SelectCall(_Call):
    op: Literal["select"]


class CleanupCall(_Call):
    op: Literal["cleanup"]


class FailureReport(BaseModel):
    """The failure the workflow reports with ``finish`` (its ``failure_of`` subworkflow)."""

    model_config = ConfigDict(extra="ignore")

    tag: str | None = None
    message: str | None = None
    stage: str | None = None
    attempt: WholeNumber | None = None


class FinishCall(_Call):
    op: Literal["finish"]
    outcome: str  # checked by finish itself, which names the outcomes it knows
    failure: FailureReport | None = None


# ---- answers: what the workflow reads -------------------------------------------------------------


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanAnswer(_Answer):
    """Three shapes: skip (another execution drives the run, or it ended), wait (a sweep child
    queued for a slot), or the plan itself."""

    skip: bool
    skip_reason: str | None = None
    wait: bool = False
    wait_reason: str | None = None
    wait_seconds: int | None = None
    stages: list[PlanStep] | None = None
    cache_hit: bool | None = None
    timeouts: dict[Stage, int] | None = None
    backoff: Backoff | None = None
    budgets: Budgets | None = None
    max_retries: int | None = None
    poll_seconds: int | None = None
    first_attempt: dict[Stage, int] | None = None  # attempt numbers go on across a run's rounds


class LaunchAnswer(_Answer):
    workload: str
    uid: str | None
    resume_step: int | None


class StageFailure(BaseModel):
    """Why an attempt failed, with its class as the tag the workflow's retry predicate reads."""

    model_config = ConfigDict(extra="forbid")

    tag: str
    message: str
    exhausted: str | None = None  # the class whose retry budget ran out
    rule: str | None = None  # the rule that decided it (core.failure_rules); recorded on the attempt


class StatusAnswer(_Answer):
    phase: Phase
    failure: StageFailure | None
    reason: str | None
    artifact: str | None
    progress: dict[str, Any] | None


class GateAnswer(_Answer):
    passed: bool
    reason: str
    tags: list[str]


class SelectAnswer(_Answer):
    wait: bool
    selected: bool | None
    reason: str


class StatusMessage(_Answer):
    """``finish``'s answer: the run's status message, as the status topic's subscribers get it."""

    run_id: str
    state: str
    team: str  # whose run (core.teams; default without teams)
    message: str
    failure: dict[str, Any] | None
    attempts: dict[str, int]
    lineage: dict[str, Any]
    request_id: str | None
    model: str | None
    hf_repo: str | None
    results: dict[str, Any]
    gate: dict[str, Any] | None
    chip_hours: float
    sweep: dict[str, Any] | None


class CleanupAnswer(_Answer):
    deleted: list[str]


@dataclass(frozen=True)
class Operation:
    """One operation of the workflow's: its call and its answer."""

    call: type[_Call]
    answer: type[_Answer]


WORKFLOW_OPERATIONS: dict[str, Operation] = {
    "plan": Operation(call=PlanCall, answer=PlanAnswer),
    "launch": Operation(call=LaunchCall, answer=LaunchAnswer),
    "status": Operation(call=StatusCall, answer=StatusAnswer),
    "gate": Operation(call=GateCall, answer=GateAnswer),
    "select": Operation(call=SelectCall, answer=SelectAnswer),
    "finish": Operation(call=FinishCall, answer=StatusMessage),
    "cleanup": Operation(call=CleanupCall, answer=CleanupAnswer),
}


WorkflowCall = PlanCall | LaunchCall | StatusCall | GateCall | SelectCall | FinishCall | CleanupCall


class BadCallBody(ValueError):
    """A body that does not fit its operation's call model; the message names the field."""


def read_call(op: str, body: dict[str, Any]) -> WorkflowCall:
    """The body as its operation's call model, or :class:`BadCallBody` naming the first field."""
    try:
        return cast(WorkflowCall, WORKFLOW_OPERATIONS[op].call.model_validate(body))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadCallBody(f"{where}: {first['msg']}") from None


def answer(op: str, value: dict[str, Any]) -> dict[str, Any]:
    """An answer, held to its operation's model, with exactly the fields it was given."""
    try:
        model = WORKFLOW_OPERATIONS[op].answer.model_validate(value)
    except ValidationError as exc:
        raise ContractBroken(f"stage's {op} answer breaks the workflow contract: {exc}") from None
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_unset=True)
    return dumped
