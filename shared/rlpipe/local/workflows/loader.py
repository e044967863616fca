"""Load a workflow definition and reject, at load time, anything outside the supported subset.

The subset and its shapes come from https://cloud.google.com/workflows/docs/reference/syntax
(subworkflows, variables/assign, conditions, iteration, jumps, catching-errors,
retrying, raising-errors).  Everything else (``parallel``, connectors such as
``googleapis.*``, ``gke.*``, unknown keys or functions, a ``next`` to a step
that does not exist, a call to an undefined subworkflow) is a ``LoadError``
naming the subworkflow and the step, so a YAML file cannot silently drift
outside what this engine (and its tests) cover.

Stricter than Workflows in two deliberate ways: step names must be unique
within a subworkflow (so jumps are unambiguous), and ``next`` cannot leave a
``for`` loop body except through ``break``/``continue``/``end``. As strict as
Workflows where a definition would not deploy or would fail there: ``for``
directly under ``try`` (a documented known issue), and a variable created in a
loop used after it (``scoping``). Never looser than Google's published schema of
the syntax (SchemaStore's ``workflows.json``, checked against every definition
the engine's tests load: docs/workflow.md, Testing): a value the schema types
(a call argument, a raised code, a range, main's parameter) is refused when it
has another shape (``call_args``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from . import blocking, stdlib  # noqa: F401 - importing registers the functions
from .call_args import argument_problem
from .errors import LoadError
from .expressions import (
    Attr,
    Call,
    Expression,
    ExpressionSyntaxError,
    Index,
    ListLit,
    Node,
    Var,
    parse_expression,
)
from .functions import REGISTRY, FunctionSpec, missing_function
from .model import (
    AssignStep,
    AssignTarget,
    CallStep,
    ExceptClause,
    ForStep,
    JumpStep,
    Param,
    RaiseStep,
    ReturnStep,
    Step,
    StepList,
    StepsStep,
    Subworkflow,
    SwitchCase,
    SwitchStep,
    TryStep,
    Workflow,
)
from .retry_loader import RetryLoading
from .scoping import check_loop_scopes
from .templates import (
    ExprT,
    LiteralT,
    Template,
    TemplateError,
    compile_value,
    is_expression,
    literal_value,
)
from .values import is_int, is_number
from .yaml_source import load_yaml

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_TARGETS = {"end", "break", "continue"}  # values of next, so never step names
_MAX_ASSIGNMENTS = 50
_MAX_CONDITIONS = 50
_STEP_KINDS = {
    "assign": {"assign", "next"},
    "call": {"call", "args", "result", "next"},
    "switch": {"switch", "next"},
    "for": {"for", "next"},
    "try": {"try", "retry", "except", "next"},
    "steps": {"steps", "next"},
    "return": {"return"},
    "raise": {"raise"},
}
_UNSUPPORTED_STEPS = {
    "parallel": "parallel steps are not supported by the local engine",
}
_UNSUPPORTED_CALLS = {
    "googleapis.": "connector calls (googleapis.*) are not supported by the local engine; use http.* to a local service",
    "gke.": "gke.* calls are not supported by the local engine",
    "experimental.": "experimental.* calls are not supported by the local engine",
}


def load_workflow(text: str) -> Workflow:
    """Parse and validate a definition (YAML or JSON text)."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise LoadError(f"invalid YAML: {exc}") from None
    if isinstance(data, list):
        raw_subworkflows: dict[Any, Any] = {"main": {"steps": data}}
    elif isinstance(data, dict):
        raw_subworkflows = data
    else:
        raise LoadError("a definition is a map of subworkflows or a list of steps")
    if "main" not in raw_subworkflows:
        raise LoadError("the definition has no 'main' workflow")
    signatures: dict[str, list[Param]] = {}
    for name, raw in raw_subworkflows.items():
        if not isinstance(name, str) or not _IDENT.match(name):
            raise LoadError(f"invalid subworkflow name {name!r}")
        if not isinstance(raw, dict):
            raise LoadError("a subworkflow is a map with 'params' and 'steps'", subworkflow=name)
        unknown = set(raw) - {"params", "steps"}
        if unknown:
            raise LoadError(f"unknown keys {sorted(map(str, unknown))}", subworkflow=name)
        signatures[name] = _params(name, raw.get("params"))
    if len(signatures["main"]) > 1:
        raise LoadError("main takes at most one parameter (the execution argument)", subworkflow="main")
    if any(param.has_default for param in signatures["main"]):
        # https://cloud.google.com/workflows/docs/passing-runtime-arguments: main's params is [NAME]
        raise LoadError(
            "main's parameter is a name without a default (params: [args]); defaults are for subworkflows",
            subworkflow="main",
        )
    loaded = {
        name: _SubworkflowLoader(name, signatures).load(raw.get("steps", None))
        for name, raw in raw_subworkflows.items()
    }
    return Workflow(loaded)


def _params(subworkflow: str, raw: Any) -> list[Param]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise LoadError("params must be a list", subworkflow=subworkflow)
    params: list[Param] = []
    for item in raw:
        if isinstance(item, str):
            param = Param(item)
        elif isinstance(item, dict) and len(item) == 1:
            ((name, default),) = item.items()
            try:
                param = Param(str(name), compile_value(default), True)
            except TemplateError as exc:
                raise LoadError(f"parameter {name!r}: {exc}", subworkflow=subworkflow) from None
        else:
            raise LoadError(f"invalid parameter {item!r}", subworkflow=subworkflow)
        if not _IDENT.match(param.name) or any(p.name == param.name for p in params):
            raise LoadError(f"invalid or duplicate parameter {param.name!r}", subworkflow=subworkflow)
        params.append(param)
    return params


@dataclass
class _Jump:
    step: str
    target: str
    visible: list[StepList]
    in_loop: bool


class _SubworkflowLoader(RetryLoading):
    """Builds one subworkflow, checking every step, expression and jump."""

    def __init__(self, name: str, signatures: dict[str, list[Param]]) -> None:
        self.name = name
        self.signatures = signatures
        self.step_names: set[str] = set()
        self.jumps: list[_Jump] = []

    def error(self, message: str, step: str | None = None) -> LoadError:
        return LoadError(message, subworkflow=self.name, step=step)

    def load(self, raw_steps: Any) -> Subworkflow:
        body = self.step_list(raw_steps, [], in_loop=False, owner=None)
        for jump in self.jumps:
            self.check_jump(jump)
        subworkflow = Subworkflow(self.name, self.signatures[self.name], body)
        check_loop_scopes(subworkflow)
        return subworkflow

    # --- structure ---------------------------------------------------------

    def step_list(self, raw: Any, chain: list[StepList], *, in_loop: bool, owner: str | None) -> StepList:
        if not isinstance(raw, list) or not raw:
            raise self.error("'steps' must be a non-empty list of steps", owner)
        steps = StepList([])
        visible = [*chain, steps]
        for item in raw:
            if not isinstance(item, dict) or len(item) != 1:
                raise self.error(f"each step is a map with exactly one key (its name), got {item!r}", owner)
            ((name, body),) = item.items()
            if not isinstance(name, str) or not _IDENT.match(name) or name in _RESERVED_TARGETS:
                raise self.error(f"invalid step name {name!r}", owner)
            if name in self.step_names:
                raise self.error("duplicate step name in this subworkflow", name)
            self.step_names.add(name)
            steps.steps.append(self.step(name, body, visible, in_loop=in_loop))
        steps.index = {step.name: position for position, step in enumerate(steps.steps)}
        return steps

    def step(self, name: str, body: Any, visible: list[StepList], *, in_loop: bool) -> Step:
        if not isinstance(body, dict) or not body:
            raise self.error("a step body must be a non-empty map", name)
        for key, reason in _UNSUPPORTED_STEPS.items():
            if key in body:
                raise self.error(reason, name)
        kinds = [kind for kind in _STEP_KINDS if kind in body]
        if len(kinds) > 1:
            raise self.error(f"a step can only be one of {kinds}", name)
        if not kinds:
            if set(body) == {"next"}:
                step: Step = JumpStep(name)
                self.set_next(step, body, visible, in_loop)
                return step
            raise self.error(f"unknown step type with keys {sorted(map(str, body))}", name)
        kind = kinds[0]
        unknown = set(body) - _STEP_KINDS[kind]
        if unknown:
            raise self.error(f"unknown keys {sorted(map(str, unknown))} in a {kind} step", name)
        builder = getattr(self, f"build_{kind}")
        step = builder(name, body, visible, in_loop)
        self.set_next(step, body, visible, in_loop)
        return step

    def set_next(self, step: Step, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> None:
        if "next" not in body:
            return
        target = body["next"]
        if not isinstance(target, str):
            raise self.error(f"next must be a step name, got {target!r}", step.name)
        step.next = target
        self.jumps.append(_Jump(step.name, target, visible, in_loop))

    def check_jump(self, jump: _Jump) -> None:
        if jump.target == "end":
            return
        if jump.target in ("break", "continue"):
            if not jump.in_loop:
                raise self.error(f"next: {jump.target} is only allowed inside a for loop", jump.step)
            return
        if not any(jump.target in steps.index for steps in jump.visible):
            raise self.error(
                f"next target {jump.target!r} is not a step of this block or an enclosing one", jump.step
            )

    # --- values and expressions --------------------------------------------

    def compile(self, raw: Any, step: str) -> Template:
        try:
            template = compile_value(raw)
        except TemplateError as exc:
            raise self.error(str(exc), step) from None
        for expression in template.expressions():
            for node in expression.root.walk():
                if isinstance(node, Call):
                    self.check_function(node, step)
        return template

    def check_function(self, node: Call, step: str) -> None:
        if node.name in self.signatures:
            raise self.error(f"calling subworkflow {node.name!r} inside an expression is not supported", step)
        spec = REGISTRY.get(node.name)
        if spec is None:
            raise self.error(f"{missing_function(node.name)} (in an expression)", step)
        if spec.blocking:
            raise self.error(f"{node.name} blocks and may only be used in a call step", step)
        problem = spec.check_arity(len(node.args))
        if problem:
            raise self.error(problem, step)

    def identifier(self, raw: Any, what: str, step: str) -> str:
        if not isinstance(raw, str) or not _IDENT.match(raw):
            raise self.error(f"{what} must be a variable name, got {raw!r}", step)
        return raw

    def assignments(self, raw: Any, step: str) -> list[tuple[AssignTarget, Template]]:
        if not isinstance(raw, list) or not raw:
            raise self.error("assign must be a non-empty list", step)
        if len(raw) > _MAX_ASSIGNMENTS:
            raise self.error(f"at most {_MAX_ASSIGNMENTS} assignments per step", step)
        result = []
        for item in raw:
            if not isinstance(item, dict) or len(item) != 1:
                raise self.error(f"each assignment is a one-key map, got {item!r}", step)
            ((target, value),) = item.items()
            result.append((self.assign_target(target, step), self.compile(value, step)))
        return result

    def assign_target(self, text: Any, step: str) -> AssignTarget:
        if not isinstance(text, str):
            raise self.error(f"invalid assignment target {text!r}", step)
        try:
            node = parse_expression(text).root
        except ExpressionSyntaxError:
            raise self.error(f"invalid assignment target {text!r}", step) from None
        path: list[str | Node] = []
        while isinstance(node, (Attr, Index)):
            if isinstance(node, Attr):
                path.insert(0, node.name)
            else:
                for inner in node.index.walk():
                    if isinstance(inner, Call):
                        self.check_function(inner, step)
                path.insert(0, node.index)
            node = node.target
        if not isinstance(node, Var):
            raise self.error(f"invalid assignment target {text!r}", step)
        return AssignTarget(text, node.name, path)

    # --- step kinds -----------------------------------------------------------

    def build_assign(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        return AssignStep(name, assignments=self.assignments(body["assign"], name))

    def build_return(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        return ReturnStep(name, value=self.compile(body["return"], name))

    def build_raise(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        value = self.compile(body["raise"], name)
        if value.is_literal and not isinstance(literal_value(value), (str, dict)):
            raise self.error("raise takes a string or a map", name)
        raw = body["raise"]
        if isinstance(raw, dict):
            # https://cloud.google.com/workflows/docs/reference/syntax/raising-errors: an error map's
            # code is an integer and its message a string (either may be an expression).
            code, message = raw.get("code"), raw.get("message")
            if "code" in raw and not (is_int(code) or is_expression(code)):
                raise self.error(f"raise: code must be an integer or an expression, got {code!r}", name)
            if "message" in raw and not isinstance(message, str):
                raise self.error(f"raise: message must be a string or an expression, got {message!r}", name)
        return RaiseStep(name, value=value)

    def build_steps(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        return StepsStep(name, body=self.step_list(body["steps"], visible, in_loop=in_loop, owner=name))

    def build_call(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        target = body["call"]
        if not isinstance(target, str):
            raise self.error(f"call target must be a name, got {target!r}", name)
        raw_args = body.get("args")
        problem = argument_problem(raw_args) if isinstance(raw_args, dict) else None
        if problem:
            raise self.error(problem, name)
        result = self.identifier(body["result"], "result", name) if "result" in body else None
        if target in self.signatures:
            self.check_subworkflow_args(target, raw_args, name)
            args = self.compile(raw_args, name) if raw_args is not None else None
            return CallStep(name, target=target, is_subworkflow=True, args=args, result=result)
        spec = REGISTRY.get(target)
        if spec is None:
            for prefix, reason in _UNSUPPORTED_CALLS.items():
                if target.startswith(prefix):
                    raise self.error(f"{reason} (call: {target})", name)
            raise self.error(f"call to unknown subworkflow or function {target!r}", name)
        self.check_function_args(spec, raw_args, name)
        args = self.compile(raw_args, name) if raw_args is not None else None
        return CallStep(name, target=target, args=args, result=result)

    def check_subworkflow_args(self, target: str, raw_args: Any, step: str) -> None:
        if raw_args is not None and not isinstance(raw_args, dict):
            raise self.error(f"args of a subworkflow call must be a map, got {raw_args!r}", step)
        given = set(raw_args or {})
        params = self.signatures[target]
        unknown = given - {p.name for p in params}
        if unknown:
            raise self.error(f"subworkflow {target!r} has no parameters {sorted(unknown)}", step)
        missing = [p.name for p in params if not p.has_default and p.name not in given]
        if missing:
            raise self.error(f"call to subworkflow {target!r} misses parameters {missing}", step)

    def check_function_args(self, spec: FunctionSpec, raw_args: Any, step: str) -> None:
        if raw_args is None:
            problem = spec.check_arity(0)
            if problem:
                raise self.error(problem, step)
            return
        if not isinstance(raw_args, dict):
            # https://cloud.google.com/workflows/docs/reference/syntax/calls: args is a map of names.
            raise self.error(
                f"args must be a map of argument names, such as args: {{seconds: 1}}, got {raw_args!r}", step
            )
        unknown = set(raw_args) - set(spec.params)
        if unknown:
            raise self.error(f"{spec.name} has no arguments {sorted(map(str, unknown))}", step)
        missing = [p for p in spec.params[: spec.required] if p not in raw_args]
        if missing:
            raise self.error(f"{spec.name} misses arguments {missing}", step)

    def build_switch(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        raw_cases = body["switch"]
        if not isinstance(raw_cases, list) or not raw_cases:
            raise self.error("switch must be a non-empty list of conditions", name)
        if len(raw_cases) > _MAX_CONDITIONS:
            raise self.error(f"at most {_MAX_CONDITIONS} conditions per switch", name)
        cases = []
        for raw in raw_cases:
            if not isinstance(raw, dict) or "condition" not in raw:
                raise self.error(f"each switch entry needs a condition, got {raw!r}", name)
            unknown = set(raw) - {"condition", "next", "steps", "assign", "return", "raise"}
            if unknown:
                raise self.error(f"unknown keys {sorted(map(str, unknown))} in a switch condition", name)
            if ("return" in raw or "raise" in raw) and len(set(raw) - {"condition"}) > 1:
                raise self.error("a condition with return or raise can have nothing else", name)
            condition = self.compile(raw["condition"], name)
            if isinstance(condition, LiteralT) and not isinstance(condition.value, bool):
                raise self.error(f"a condition must be a boolean, got {condition.value!r}", name)
            case = SwitchCase(condition)
            if "assign" in raw:
                case.assignments = self.assignments(raw["assign"], name)
            if "steps" in raw:
                case.steps = self.step_list(raw["steps"], visible, in_loop=in_loop, owner=name)
            if "return" in raw:
                case.returns, case.has_return = self.compile(raw["return"], name), True
            if "raise" in raw:
                case.raises = self.compile(raw["raise"], name)
            if "next" in raw:
                if not isinstance(raw["next"], str):
                    raise self.error(f"next must be a step name, got {raw['next']!r}", name)
                case.next = raw["next"]
                self.jumps.append(_Jump(name, raw["next"], visible, in_loop))
            cases.append(case)
        return SwitchStep(name, cases=cases)

    def build_for(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        spec = body["for"]
        if not isinstance(spec, dict):
            raise self.error("for must be a map", name)
        unknown = set(spec) - {"value", "index", "in", "range", "steps"}
        if unknown:
            raise self.error(f"unknown keys {sorted(map(str, unknown))} in for", name)
        if ("in" in spec) == ("range" in spec):
            raise self.error("for needs exactly one of 'in' and 'range'", name)
        step = ForStep(name, value=self.identifier(spec.get("value"), "for.value", name))
        if "index" in spec:
            step.index = self.identifier(spec["index"], "for.index", name)
        if "in" in spec:
            if not isinstance(spec["in"], list) and not is_expression(spec["in"]):
                raise self.error(f"for.in must be a list or an expression, got {spec['in']!r}", name)
            step.items = self.compile(spec["in"], name)
        else:
            step.range = self.range_bounds(spec["range"], name)
        # A loop body is its own jump scope: leave it with break/continue/end only.
        step.body = self.step_list(spec.get("steps"), [], in_loop=True, owner=name)
        return step

    def range_bounds(self, raw: Any, step: str) -> tuple[Template, Template]:
        """``[1, 10]``, or one expression of a two-item list, ``${[start, end]}``
        (https://cloud.google.com/workflows/docs/reference/syntax/iteration). The published syntax
        schema (definitions.for.range) warns against two expressions inside a list, ``[${a}, ${b}]``."""
        fix = "write range: [start, end] with numbers, or range: ${[start, end]} with expressions"
        if isinstance(raw, list):
            if len(raw) != 2 or not all(is_number(bound) for bound in raw):
                raise self.error(f"range must be two numbers, got {raw!r}: {fix}", step)
            return LiteralT(raw[0]), LiteralT(raw[1])
        template = self.compile(raw, step) if is_expression(raw) else None
        if not isinstance(template, ExprT):
            raise self.error(f"range must be a list of two bounds, got {raw!r}: {fix}", step)
        bounds = template.expression.root
        if not isinstance(bounds, ListLit) or len(bounds.items) != 2:
            raise self.error(f"range must be a list of two bounds, got {raw!r}: {fix}", step)
        start, end = (ExprT(Expression(template.expression.source, bound)) for bound in bounds.items)
        return start, end

    def build_try(self, name: str, body: dict[str, Any], visible: list[StepList], in_loop: bool) -> Step:
        if "retry" not in body and "except" not in body:
            raise self.error("try needs retry and/or except", name)
        raw_try = body["try"]
        if isinstance(raw_try, dict) and "for" in raw_try:
            # Known issue (https://cloud.google.com/workflows/docs/issues, "Placement of for
            # directly after try"): such a workflow does not deploy, with this message.
            raise self.error(
                f"failed to build: error in step {name}: loop step name should not be empty "
                "(for directly under try does not deploy; put it in a named step under try: steps:)",
                name,
            )
        if isinstance(raw_try, dict) and set(raw_try) == {"steps"}:
            try_body = self.step_list(raw_try["steps"], visible, in_loop=in_loop, owner=name)
        else:
            inner_visible = [*visible, StepList([])]
            inner = self.step(name, raw_try, inner_visible, in_loop=in_loop)
            try_body = StepList([inner])
        step = TryStep(name, body=try_body)
        if "retry" in body:
            step.retry = self.retry_policy(body["retry"], name)
        if "except" in body:
            step.handler = self.except_clause(body["except"], visible, in_loop, name)
        return step

    def except_clause(self, raw: Any, visible: list[StepList], in_loop: bool, name: str) -> ExceptClause:
        if not isinstance(raw, dict) or set(raw) - {"as", "steps"}:
            raise self.error("except is a map with 'as' and 'steps'", name)
        as_name = self.identifier(raw["as"], "except.as", name) if "as" in raw else None
        handler_body = (
            self.step_list(raw["steps"], visible, in_loop=in_loop, owner=name)
            if "steps" in raw
            else StepList([])
        )
        return ExceptClause(as_name, handler_body)
