"""The operator operations' answers (core.operator_contract): what the stage function hands an
operator's client is held to one model per operation, and a field the model lacks, or one it
needs and the answer lacks, is our bug, said as such (the real stage function's answers are read
by the CLI in tests/cli/test_cli_contract.py and the end-to-end promote and retry runs)."""

from __future__ import annotations

from typing import Any

import pytest

from rlpipe.core import operator_contract
from rlpipe.core.workflow_contract import ContractBroken
from tests.harness import operator_answers

RETRY = {"run_id": "r1", "outcome": "started", "round": 2, "state": "accepted", "execution": None}
PROMOTE = {"run_id": "r1", "by": "ana", "state": "training", "execution": "projects/p/executions/e"}


@pytest.mark.parametrize(
    ("op", "body", "value"),
    [
        ("retry", {"op": "retry"}, RETRY),
        ("retry", {"op": "retry"}, {**RETRY, "children": ["r2", "r3"]}),
        ("promote", {"op": "promote"}, PROMOTE),
        ("cancel", {"op": "cancel", "check_only": True}, {"run_id": "r1", "allowed": True}),
        ("cancel", {"op": "cancel"}, operator_answers.cancelled("r1", deleted=["r1-train-a1"]).model_dump()),
    ],
)
def test_an_answer_of_its_model_leaves_as_it_was_given(
    op: str, body: dict[str, Any], value: dict[str, Any]
) -> None:
    assert operator_contract.answer(op, body, value) == value


@pytest.mark.parametrize(
    ("op", "body", "value", "field"),
    [
        ("retry", {}, {k: v for k, v in RETRY.items() if k != "round"}, "round"),
        ("retry", {}, {**RETRY, "outcome": "refused"}, "outcome"),  # a refusal is an error, not an answer
        ("promote", {}, {**PROMOTE, "promoted_by": "ana"}, "promoted_by"),
        ("cancel", {"check_only": True}, {"run_id": "r1", "allowed": False}, "allowed"),
        ("cancel", {}, {"state": "cancelled", "deleted": []}, "run_id"),  # not the run's status message
    ],
)
def test_an_answer_off_its_model_is_our_bug_naming_the_field(
    op: str, body: dict[str, Any], value: dict[str, Any], field: str
) -> None:
    with pytest.raises(ContractBroken, match=f"{op} answer breaks the operator contract") as broken:
        operator_contract.answer(op, body, value)
    assert field in str(broken.value)
