"""The workflow's side of its contract with ``stage``, read from ``workflows/pipeline.yaml`` itself.

Every call the workflow makes to ``stage`` (a ``call_stage`` step with a literal ``op``) must send
only fields its call model declares, with the ones it requires; every field the workflow reads of
an answer (``${plan.stages}``, ``plan.timeouts[stage]``, ``map.get(status, "failure")``,
``"tags" in gate``) must be one the answer model declares, at every level. The answer's type
follows it through the YAML: the step's ``result`` variable, a subworkflow's parameter it is
passed as, a subworkflow's ``return``, and a variable assigned one of its fields.

``stage_http`` holds the other side at run time (core.workflow_contract). So a field renamed on
either side fails here or in every test that drives a run, not in a live run.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter

from rlpipe.core import workflow_contract as contract

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "workflows" / "pipeline.yaml"
MAP_GET = re.compile(r"map\.get\(\s*([A-Za-z_]\w*)\s*,\s*\"(\w+)\"\s*\)")
IN_MAP = re.compile(r"\"(\w+)\"\s+in\s+([A-Za-z_]\w*)\b")
ACCESS = re.compile(r"(?<![\w.\"])([A-Za-z_]\w*)((?:\.\w+|\[[^\]]+\])+)")
# The caller's fields call_stage merges into every body (its `caller` map).
MERGED_BY_CALL_STAGE = {"execution_id"}

Type = Any  # a model class, a typing form, or ANY for a field typed dict[str, Any]
ANY = object()


def _strip_optional(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _strip_optional(args[0])
    if get_origin(tp) is typing.Annotated:
        return _strip_optional(get_args(tp)[0])
    return tp


def _member(tp: Type, name: str, *, indexed: bool) -> Type | str:
    """The type of ``tp``'s field or key ``name``; a string saying why not when there is none."""
    tp = _strip_optional(tp)
    if tp is ANY or tp is Any:
        return ANY
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if indexed:
            return f"{tp.__name__} is an object with named fields, not a map indexed by a variable"
        field = tp.model_fields.get(name)
        if field is None:
            return f"{tp.__name__} has no field {name!r} (it has {sorted(tp.model_fields)})"
        return field.annotation
    if get_origin(tp) is dict:
        key, value = get_args(tp)
        if not indexed and get_origin(key) is Literal and name not in get_args(key):
            return f"the map's keys are {get_args(key)}, not {name!r}"
        return ANY if value is Any else value
    if get_origin(tp) is list:
        return get_args(tp)[0] if indexed else f"a list has no field {name!r}"
    return f"{tp!r} is a value, it has no field {name!r}"


def _walk(tp: Type, path: str) -> Type | str:
    """``path`` as written after a variable (``.backoff.multiplier``, ``.timeouts[stage]``)."""
    for part in re.findall(r"\.\w+|\[[^\]]+\]", path):
        if part.startswith("["):
            index = part[1:-1].strip()
            literal = re.fullmatch(r"\"(\w+)\"", index)
            found = _member(tp, literal.group(1) if literal else index, indexed=literal is None)
        else:
            found = _member(tp, part[1:], indexed=False)
        if isinstance(found, str):
            return found
        tp = found
    return tp


def _expressions(node: Any) -> set[str]:
    """Every ``${...}`` in a node, at any depth (a value that is one whole expression)."""
    if isinstance(node, str):
        inner = _only_expression(node)
        return {inner} if inner is not None else set()
    if isinstance(node, dict):
        return set().union(*(_expressions(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_expressions(v) for v in node)) if node else set()
    return set()


def _steps(steps: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every step, nested ones included (try/except/retry, for, switch branches, parallel), with
    the name of the step it is in: a ``try`` that is one call is a step of its own here."""
    found: list[tuple[str, dict[str, Any]]] = []

    def visit(node: Any, name: str) -> None:
        if isinstance(node, list):
            for item in node:
                if isinstance(item, dict) and len(item) == 1 and isinstance(next(iter(item.values())), dict):
                    ((inner, body),) = item.items()
                    visit(body, str(inner))
                else:
                    visit(item, name)
        elif isinstance(node, dict):
            if {"call", "assign", "return"} & set(node):
                found.append((name, node))
            for value in node.values():
                visit(value, name)

    visit(steps, "")
    return found


def _only_expression(value: Any) -> str | None:
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        return value[2:-1].strip()
    return None


def _typed_expression(expr: str | None, known: dict[str, Type]) -> Type | None:
    """The type of an expression that is a variable, a field of one, or ``map.get`` of one."""
    if expr is None:
        return None
    got = MAP_GET.fullmatch(expr)
    if got and got.group(1) in known:
        found = _member(known[got.group(1)], got.group(2), indexed=False)
        return None if isinstance(found, str) else found
    got = re.fullmatch(r"([A-Za-z_]\w*)((?:\.\w+)*)", expr)
    if got and got.group(1) in known:
        found = _walk(known[got.group(1)], got.group(2))
        return None if isinstance(found, str) else found
    return None


def _workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(PIPELINE.read_text())
    return loaded


def _calls() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(subworkflow, step, op, body) of every call_stage step."""
    found = []
    for name, sub in _workflow().items():
        for step, body in _steps(sub["steps"]):
            if body.get("call") == "call_stage":
                sent = body["args"]["body"]
                found.append((name, step, sent["op"], sent))
    return found


def _typed_variables() -> dict[str, dict[str, Type]]:
    """Per subworkflow, the variables that hold a contract type. Repeated to a fixed point: a
    subworkflow's parameter is typed by its callers, its return by its own variables."""
    workflow = _workflow()
    typed: dict[str, dict[str, Type]] = {name: {} for name in workflow}
    returns: dict[str, Type] = {}
    for _ in range(len(workflow) + 2):
        for name, sub in workflow.items():
            known = typed[name]
            for _step, body in _steps(sub["steps"]):
                call = body.get("call")
                if call == "call_stage" and "result" in body:
                    known[body["result"]] = contract.WORKFLOW_OPERATIONS[body["args"]["body"]["op"]].answer
                elif call in workflow:
                    for param, value in (body.get("args") or {}).items():
                        tp = _typed_expression(_only_expression(value), known)
                        if tp is not None:
                            typed[call][param] = tp
                    if "result" in body and call in returns:
                        known[body["result"]] = returns[call]
                for assignment in body.get("assign", []):
                    for var, value in assignment.items():
                        tp = _typed_expression(_only_expression(value), known)
                        if tp is not None:
                            known[var] = tp
                if "return" in body:
                    tp = _typed_expression(_only_expression(body["return"]), known)
                    if tp is not None:
                        returns[name] = tp
    return typed


def _read_problems() -> tuple[list[str], int]:
    typed = _typed_variables()
    problems: list[str] = []
    checked = 0
    for name, sub in _workflow().items():
        known = typed[name]
        for expr in sorted(_expressions(sub["steps"])):
            where = f"{name}: ${{{expr}}}"
            reads = [(var, f".{field}") for var, field in MAP_GET.findall(expr)]
            reads += [(var, f".{field}") for field, var in IN_MAP.findall(expr)]
            reads += [(var, path) for var, path in ACCESS.findall(expr) if var != "map"]
            for var, path in reads:
                if var in known:
                    checked += 1
                    found = _walk(known[var], path)
                    if isinstance(found, str):
                        problems.append(f"{where}: {var}{path}: {found}")
    return problems, checked


def test_every_call_the_workflow_makes_names_an_operation_of_the_contract() -> None:
    calls = _calls()
    ops = {op for _, _, op, _ in calls}
    assert ops == set(contract.WORKFLOW_OPERATIONS), "an operation on one side only"


@pytest.mark.parametrize("call", _calls(), ids=lambda c: f"{c[0]}.{c[1]}")
def test_every_body_sends_the_fields_its_call_declares_and_requires(
    call: tuple[str, str, str, dict[str, Any]],
) -> None:
    _, _, op, body = call
    model = contract.WORKFLOW_OPERATIONS[op].call
    sent = set(body) | MERGED_BY_CALL_STAGE
    undeclared = sorted(sent - set(model.model_fields))
    missing = sorted(n for n, f in model.model_fields.items() if f.is_required() and n not in sent)
    assert not undeclared, f"{op} sends {undeclared}, which {model.__name__} does not declare"
    assert not missing, f"{op} omits {missing}, which {model.__name__} requires"
    for key, value in body.items():  # a literal value is held to its field's type too
        if _only_expression(value) is None:
            TypeAdapter(model.model_fields[key].annotation).validate_python(value)


def test_every_field_the_workflow_reads_of_an_answer_is_one_the_contract_declares() -> None:
    problems, checked = _read_problems()
    assert not problems, "\n".join(problems)
    assert checked >= 25, f"only {checked} reads found: the YAML walk lost its way"


def test_the_answers_reach_every_subworkflow_that_reads_them() -> None:
    typed = _typed_variables()
    assert typed["main"]["plan"] is contract.PlanAnswer
    assert typed["run_stage"]["plan"] is contract.PlanAnswer  # a parameter, typed by its caller
    assert typed["main"]["selection"] is contract.SelectAnswer  # select_in_sweep's return
    assert typed["run_stage"]["status"] is contract.StatusAnswer
    assert _strip_optional(typed["run_stage"]["failure"]) is contract.StageFailure  # assigned a field


def test_the_header_names_every_step_a_plan_can_list_in_its_order() -> None:
    """The header once said "convert -> train -> export" while the workflow ran six steps."""
    header = PIPELINE.read_text().split("\n#\n", 1)[0]
    chain = re.search(r"^# (\w+(?: -> \w+)+)", header, re.M)
    assert chain is not None, f"the header names no chain of steps:\n{header}"
    assert chain.group(1).split(" -> ") == list(typing.get_args(contract.PlanStep))


@pytest.mark.parametrize(("attempt", "read"), [(2, 2), (2.0, 2)])
def test_an_attempt_workflows_arithmetic_made_a_double_is_still_the_integer(attempt: Any, read: int) -> None:
    call = contract.read_call(
        "status", {"op": "status", "run_id": "r1", "stage": "train", "attempt": attempt}
    )
    assert isinstance(call, contract.StatusCall) and call.attempt == read and type(call.attempt) is int


@pytest.mark.parametrize("attempt", [2.5, True, "2", 0, None])
def test_an_attempt_that_is_no_whole_number_from_one_is_refused_naming_the_field(attempt: Any) -> None:
    with pytest.raises(contract.BadCallBody, match=r"^attempt: "):
        contract.read_call("launch", {"op": "launch", "run_id": "r1", "stage": "train", "attempt": attempt})


def test_an_answer_with_a_field_the_workflow_does_not_know_is_our_bug_not_sent() -> None:
    launched = {"workload": "w", "uid": "u", "resume_step": None}
    assert contract.answer("launch", launched) == launched
    with pytest.raises(contract.ContractBroken, match="resume"):
        contract.answer("launch", {"workload": "w", "uid": "u", "resume": 30})


def test_an_answer_keeps_exactly_the_fields_it_was_given() -> None:
    """A skip answer stays two fields: the workflow reads the others with map.get and defaults."""
    assert contract.answer("plan", {"skip": True, "skip_reason": "ended"}) == {
        "skip": True,
        "skip_reason": "ended",
    }
