"""Run a loaded workflow: steps, jumps, scopes, subworkflow calls, try/retry/except.

Semantics (each from https://cloud.google.com/workflows/docs/reference/syntax):

* steps run in order; ``next`` jumps, ``next: end`` ends the (sub)workflow with
  null, ``break``/``continue`` control the innermost ``for`` (jumps page);
* a ``switch`` runs the first true condition's ``assign``/``steps``/``return``/
  ``raise``, then follows that condition's ``next``, else the step's ``next``,
  else the following step; conditions must be booleans (conditions page);
* variables created inside a ``for`` body or an ``except`` block exist only
  there, while assignments to outer variables stick (iteration, catching-errors);
* ``for ... range: [a, b]`` includes both ends (iteration page);
* a failing ``try`` body is re-run while the predicate says so and
  ``max_retries`` allows, sleeping ``initial_delay * multiplier**n`` capped at
  ``max_delay``; then ``except`` sees the error (retrying page);
* values are copied on assignment, as Workflows has value semantics.

Cancellation is checked at every step boundary and inside sleeps and waits; it
raises ``ExecutionCancelled``, which ``except`` never sees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import (
    KEY_ERROR,
    RECURSION_ERROR,
    RESOURCE_LIMIT_ERROR,
    TYPE_ERROR,
    VALUE_ERROR,
    ExecutionCancelled,
    WorkflowError,
    raise_error,
)
from .expressions import Node, get_item
from .functions import REGISTRY, missing_function
from .model import (
    AssignStep,
    AssignTarget,
    CallStep,
    ForStep,
    JumpStep,
    RaiseStep,
    RetryPolicy,
    ReturnStep,
    Step,
    StepList,
    StepsStep,
    SwitchStep,
    TryStep,
    Workflow,
)
from .retry_policies import BUILTIN_PREDICATES, backoff_delay
from .services import ExecutionServices
from .templates import Template
from .values import clone, is_int, is_number, type_name

MAX_CALL_DEPTH = 20
MAX_STEPS = 100_000

StepHook = Callable[[str, str], None]


class _Jump(Exception):
    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _End(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__("return")
        self.value = value


class Scope:
    """Variables of one block; lookups and updates walk outwards, new names stay local."""

    def __init__(self, interpreter: Interpreter, parent: Scope | None = None) -> None:
        self.interpreter = interpreter
        self.parent = parent
        self.vars: dict[str, Any] = {}

    def child(self) -> Scope:
        return Scope(self.interpreter, self)

    def owner(self, name: str) -> Scope | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.vars:
                return scope
            scope = scope.parent
        return None

    def lookup(self, name: str) -> Any:
        scope = self.owner(name)
        if scope is None:
            raise raise_error(KEY_ERROR, f"variable {name!r} is not defined")
        return scope.vars[name]

    def assign(self, name: str, value: Any) -> None:
        (self.owner(name) or self).vars[name] = value

    def define(self, name: str, value: Any) -> None:
        self.vars[name] = value

    def call_function(self, name: str, args: list[Any]) -> Any:
        return self.interpreter.call_function(name, args)


class Interpreter:
    """Executes one workflow run; not reusable across executions."""

    def __init__(self, workflow: Workflow, services: ExecutionServices, on_step: StepHook) -> None:
        self.workflow = workflow
        self.services = services
        self.on_step = on_step
        self.steps_run = 0

    # --- entry points -----------------------------------------------------------

    def run(self, argument: Any) -> Any:
        """Run ``main``; its only parameter (if any) receives the execution argument."""
        main = self.workflow.main
        args: dict[str, Any] = {}
        if main.params and (argument is not None or not main.params[0].has_default):
            args[main.params[0].name] = argument
        return self.call_subworkflow("main", args, depth=1)

    def call_subworkflow(self, name: str, args: dict[str, Any], depth: int) -> Any:
        if depth > MAX_CALL_DEPTH:
            raise raise_error(
                RECURSION_ERROR, f"maximum call depth {MAX_CALL_DEPTH} exceeded calling {name!r}"
            )
        subworkflow = self.workflow.subworkflows[name]
        scope = Scope(self)
        for param in subworkflow.params:
            if param.name in args:
                scope.define(param.name, clone(args[param.name]))
            elif param.has_default and param.default is not None:
                scope.define(param.name, param.default.evaluate(scope))
            else:
                raise raise_error(TYPE_ERROR, f"subworkflow {name!r} is missing parameter {param.name!r}")
        try:
            self.run_steps(subworkflow.body, scope, name, depth)
        except _Return as done:
            return done.value
        except _End:
            return None
        return None

    def call_function(self, name: str, args: list[Any]) -> Any:
        spec = REGISTRY.get(name)
        if spec is None:
            raise raise_error(TYPE_ERROR, missing_function(name))
        problem = spec.check_arity(len(args))
        if problem:
            raise raise_error(TYPE_ERROR, problem)
        return spec.impl(self.services, args)

    # --- steps ----------------------------------------------------------------

    def run_steps(self, steps: StepList, scope: Scope, routine: str, depth: int) -> None:
        position = 0
        while position < len(steps.steps):
            step = steps.steps[position]
            try:
                target = self.run_step(step, scope, routine, depth)
            except _Jump as jump:
                if jump.target not in steps.index:
                    raise
                position = steps.index[jump.target]
                continue
            if target is None:
                position += 1
            elif target == "end":
                raise _End()
            elif target == "break":
                raise _Break()
            elif target == "continue":
                raise _Continue()
            elif target in steps.index:
                position = steps.index[target]
            else:
                raise _Jump(target)

    def run_step(self, step: Step, scope: Scope, routine: str, depth: int) -> str | None:
        if self.services.cancel.is_set():
            raise ExecutionCancelled()
        self.steps_run += 1
        if self.steps_run > MAX_STEPS:
            raise raise_error(RESOURCE_LIMIT_ERROR, f"more than {MAX_STEPS} steps executed")
        self.on_step(routine, step.name)
        try:
            return self.execute(step, scope, routine, depth)
        except WorkflowError as error:
            if not error.frames:
                error.add_frame(routine, step.name)
            raise

    def execute(self, step: Step, scope: Scope, routine: str, depth: int) -> str | None:
        if isinstance(step, AssignStep):
            for target, value in step.assignments:
                self.assign(target, value, scope)
        elif isinstance(step, CallStep):
            self.execute_call(step, scope, routine, depth)
        elif isinstance(step, SwitchStep):
            return self.execute_switch(step, scope, routine, depth)
        elif isinstance(step, ForStep):
            self.execute_for(step, scope, routine, depth)
        elif isinstance(step, StepsStep):
            self.run_steps(step.body, scope, routine, depth)
        elif isinstance(step, TryStep):
            self.execute_try(step, scope, routine, depth)
        elif isinstance(step, ReturnStep):
            raise _Return(clone(self.evaluate(step.value, scope)))
        elif isinstance(step, RaiseStep):
            raise self.raised(self.evaluate(step.value, scope))
        elif not isinstance(step, JumpStep):
            raise AssertionError(f"unknown step type {type(step).__name__}")
        return step.next

    def evaluate(self, template: Template | None, scope: Scope) -> Any:
        return None if template is None else template.evaluate(scope)

    @staticmethod
    def raised(value: Any) -> WorkflowError:
        if not isinstance(value, (str, dict)):
            return raise_error(TYPE_ERROR, f"raise takes a string or a map, got {type_name(value)}")
        return WorkflowError(clone(value))

    # --- assign ---------------------------------------------------------------

    def assign(self, target: AssignTarget, template: Template, scope: Scope) -> None:
        value = clone(template.evaluate(scope))
        if not target.path:
            scope.assign(target.root, value)
            return
        container = scope.lookup(target.root)
        keys = [self.path_key(part, scope) for part in target.path]
        for key in keys[:-1]:
            if isinstance(container, dict) and isinstance(key, str) and key not in container:
                container[key] = {}  # intermediate maps are created
            container = get_item(container, key)
        self.store(container, keys[-1], value, target.text)

    @staticmethod
    def path_key(part: str | Node, scope: Scope) -> Any:
        return part if isinstance(part, str) else part.evaluate(scope)

    @staticmethod
    def store(container: Any, key: Any, value: Any, text: str) -> None:
        if isinstance(container, dict):
            if not isinstance(key, str):
                raise raise_error(TYPE_ERROR, f"{text}: map keys must be strings, got {type_name(key)}")
            container[key] = value
        elif isinstance(container, list):
            get_item(container, key)  # raises IndexError / TypeError like a read would
            container[key] = value
        else:
            raise raise_error(TYPE_ERROR, f"{text}: cannot assign into a {type_name(container)}")

    # --- call -------------------------------------------------------------------

    def execute_call(self, step: CallStep, scope: Scope, routine: str, depth: int) -> None:
        raw_args = self.evaluate(step.args, scope)
        if step.is_subworkflow:
            try:
                result = self.call_subworkflow(step.target, raw_args or {}, depth + 1)
            except WorkflowError as error:
                error.add_frame(routine, step.name)
                raise
        else:
            spec = REGISTRY.get(step.target)
            assert spec is not None  # the loader checked it
            args = spec.bind_named(raw_args) if isinstance(raw_args, dict) else list(raw_args or [])
            result = self.call_function(step.target, args)
        if step.result is not None:
            scope.assign(step.result, clone(result))

    # --- switch / for -------------------------------------------------------------

    def execute_switch(self, step: SwitchStep, scope: Scope, routine: str, depth: int) -> str | None:
        for case in step.cases:
            matched = case.condition.evaluate(scope)
            if not isinstance(matched, bool):
                raise raise_error(TYPE_ERROR, f"a switch condition must be a bool, got {type_name(matched)}")
            if not matched:
                continue
            for target, value in case.assignments or []:
                self.assign(target, value, scope)
            if case.steps is not None:
                self.run_steps(case.steps, scope, routine, depth)
            if case.has_return:
                raise _Return(clone(self.evaluate(case.returns, scope)))
            if case.raises is not None:
                raise self.raised(case.raises.evaluate(scope))
            return case.next or step.next
        return step.next

    def execute_for(self, step: ForStep, scope: Scope, routine: str, depth: int) -> None:
        loop_scope = scope.child()
        for index, value in enumerate(self.loop_values(step, scope)):
            loop_scope.define(step.value, clone(value))
            if step.index is not None:
                loop_scope.define(step.index, index)
            try:
                self.run_steps(step.body, loop_scope, routine, depth)
            except _Break:
                break
            except _Continue:
                continue

    def loop_values(self, step: ForStep, scope: Scope) -> list[Any]:
        if step.items is not None:
            items = step.items.evaluate(scope)
            if not isinstance(items, list):
                raise raise_error(TYPE_ERROR, f"for 'in' needs a list, got {type_name(items)}")
            return list(items)
        assert step.range is not None
        start, end = (bound.evaluate(scope) for bound in step.range)
        if not (is_number(start) and is_number(end)):
            raise raise_error(TYPE_ERROR, "for 'range' bounds must be numbers")
        values: list[Any] = []
        current = start
        while current <= end:  # both ends included
            values.append(current)
            current += 1
        return values

    # --- try / retry / except -----------------------------------------------------

    def execute_try(self, step: TryStep, scope: Scope, routine: str, depth: int) -> None:
        retries = 0
        while True:
            try:
                self.run_steps(step.body, scope, routine, depth)
                return
            except WorkflowError as error:
                if step.retry is not None and self.should_retry(step.retry, error, retries, scope, depth):
                    self.services.clock.sleep(
                        self.retry_delay(step.retry, retries, scope), self.services.cancel
                    )
                    retries += 1
                    continue
                if step.handler is None:
                    raise
                handler_scope = scope.child()
                if step.handler.as_name is not None:
                    handler_scope.define(step.handler.as_name, clone(error.payload))
                if step.handler.body.steps:
                    self.run_steps(step.handler.body, handler_scope, routine, depth)
                return

    def should_retry(
        self, policy: RetryPolicy, error: WorkflowError, retries: int, scope: Scope, depth: int
    ) -> bool:
        max_retries = policy.max_retries.evaluate(scope)
        if not is_int(max_retries) or max_retries < 0:
            raise raise_error(VALUE_ERROR, f"max_retries must be a non-negative int, got {max_retries!r}")
        if retries >= max_retries:
            return False
        if policy.predicate_is_builtin:
            return BUILTIN_PREDICATES[policy.predicate](error.payload)
        subworkflow = self.workflow.subworkflows[policy.predicate]
        verdict = self.call_subworkflow(
            policy.predicate, {subworkflow.params[0].name: error.payload}, depth + 1
        )
        if not isinstance(verdict, bool):
            raise raise_error(
                TYPE_ERROR, f"retry predicate {policy.predicate!r} returned a {type_name(verdict)}"
            )
        return verdict

    @staticmethod
    def retry_delay(policy: RetryPolicy, retries: int, scope: Scope) -> float:
        values = [t.evaluate(scope) for t in (policy.initial_delay, policy.max_delay, policy.multiplier)]
        if not all(is_number(v) and v >= 0 for v in values):
            raise raise_error(VALUE_ERROR, f"backoff values must be non-negative numbers, got {values}")
        initial, maximum, multiplier = values
        return backoff_delay(retries, initial, maximum, multiplier)
