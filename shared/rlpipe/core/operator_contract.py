"""The contract between an operator's client (the CLI, or any caller IAM lets in) and the ``stage``
function's operator operations: cancel, retry and promote (``control.operator_ops``).

The workflow's operations have theirs (``core.workflow_contract``); these answers are read by a
person's client, and were dicts whose keys the CLI spelled on its own. Here is one answer model per
operation: ``stage_http`` hands each answer through its model before it leaves (a field the model
does not declare, or one it needs and the answer lacks, is a bug of ours:
:class:`~rlpipe.core.workflow_contract.ContractBroken`), and the CLI reads the answer as the model,
by its attributes, so a renamed field breaks a test, not an operator's command.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from rlpipe.core.workflow_contract import ContractBroken, StatusMessage


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CancelCheck(_Answer):
    """``cancel`` with ``check_only``: the caller may cancel the run (a refusal is a 403 instead)."""

    run_id: str
    allowed: Literal[True]


class CancelAnswer(StatusMessage):
    """``cancel``: the run's status message after it was ended (or its state, if it had ended),
    with the workloads deleted, and why cleanup failed when it did (the run is finished anyway)."""

    deleted: list[str]
    cleanup_error: str | None = None


class RetryAnswer(_Answer):
    """``retry``: the round opened (``started``), or the one a repeated call with the same key
    opened (``duplicate``); a sweep's also names the children it started again."""

    run_id: str
    outcome: Literal["started", "duplicate"]
    round: int
    state: str | None
    execution: str | None
    children: list[str] | None = None


class PromoteAnswer(_Answer):
    """``promote``: who overrode the gate, and the run's next execution."""

    run_id: str
    by: str
    state: str
    execution: str | None


OperatorAnswer = CancelCheck | CancelAnswer | RetryAnswer | PromoteAnswer
ANSWERS: dict[str, type[OperatorAnswer]] = {
    "cancel": CancelAnswer,
    "retry": RetryAnswer,
    "promote": PromoteAnswer,
}


def model_of(op: str, body: dict[str, Any]) -> type[OperatorAnswer]:
    """The answer model of operator operation ``op`` (called with ``body``)."""
    if op == "cancel" and body.get("check_only") is True:
        return CancelCheck
    return ANSWERS[op]


def answer(op: str, body: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """The answer to ``body``, held to its model, with exactly the fields it was given."""
    try:
        model = model_of(op, body).model_validate(value)
    except ValidationError as exc:
        raise ContractBroken(f"stage's {op} answer breaks the operator contract: {exc}") from None
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_unset=True)
    return dumped
