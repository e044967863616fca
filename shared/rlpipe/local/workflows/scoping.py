"""Load-time check: a variable created inside a ``for`` loop is not used after the loop.

Workflows documents that "any variable created in a loop does not exist outside of that loop"
(https://cloud.google.com/workflows/docs/samples/workflows-loop-scope: the loop's own value
variable and anything first assigned in its body are "not allowed" after it, while a variable
assigned before the loop stays visible and keeps writes made in it). The engine's scopes already
behave so at run time; this check refuses such a definition when it is loaded, so a branch that
tests never reach cannot hide the mistake.

A name counts as created by a loop when it is that loop's ``value``/``index``, or is assigned
(``assign``, call ``result``, ``except as``) in the loop's body and never at the subworkflow's top
level (outside every loop). A use of it anywhere outside that loop is refused.

A loop's own ``value``/``index`` name is stricter still: the iteration reference says it "must not
be used in assignments or expressions outside of the loop" and "can be used in multiple loops, as
long as they are not nested" (ITERATION_DOC). So a loop variable named like a variable assigned
outside every loop (before or after it), or like a parameter, or like the variable of a loop around
it, is refused when the definition loads. The documentation does not say what the service does
with such a definition; refusing it is the stricter reading.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from .errors import LoadError
from .expressions import Var
from .model import (
    AssignStep,
    AssignTarget,
    CallStep,
    ForStep,
    RaiseStep,
    ReturnStep,
    Step,
    StepList,
    StepsStep,
    Subworkflow,
    SwitchStep,
    TryStep,
)
from .templates import Template

DOC = "https://cloud.google.com/workflows/docs/samples/workflows-loop-scope"
ITERATION_DOC = "https://cloud.google.com/workflows/docs/reference/syntax/iteration"


@dataclass
class _Use:
    name: str
    step: str
    loops: tuple[str, ...]  # enclosing for steps, outermost first


@dataclass
class _Scan:
    top_level: set[str] = field(default_factory=set)  # defined outside every loop
    by_loop: dict[str, set[str]] = field(default_factory=dict)  # for step → names it creates
    uses: list[_Use] = field(default_factory=list)
    loop_vars: list[_Use] = field(default_factory=list)  # each loop's value/index, with its loops

    def define(self, name: str, loops: tuple[str, ...]) -> None:
        if loops:
            self.by_loop.setdefault(loops[-1], set()).add(name)
        else:
            self.top_level.add(name)

    def use(self, template: Template | None, step: str, loops: tuple[str, ...]) -> None:
        if template is None:
            return
        for expression in template.expressions():
            for node in expression.root.walk():
                if isinstance(node, Var):
                    self.uses.append(_Use(node.name, step, loops))

    def target(self, target: AssignTarget, step: str, loops: tuple[str, ...]) -> None:
        self.define(target.root, loops)
        if target.path:  # a.b[x] = … reads a (it must exist) and the index expressions
            self.uses.append(_Use(target.root, step, loops))
        for part in target.path:
            if not isinstance(part, str):
                self.uses.extend(_Use(n.name, step, loops) for n in part.walk() if isinstance(n, Var))


def check_loop_scopes(subworkflow: Subworkflow) -> None:
    scan = _Scan(top_level={p.name for p in subworkflow.params})
    _walk(subworkflow.body, scan, ())
    for var in scan.loop_vars:
        outer = [v for v in scan.loop_vars if v.name == var.name and v.step in var.loops[:-1]]
        if var.name in scan.top_level or outer:
            where = f"the loop {outer[0].step!r} around it" if outer else "a variable outside every loop"
            raise LoadError(
                f"the loop variable {var.name!r} has the name of {where}; a loop's value and index "
                f"must not be used outside it, and nested loops need their own names ({ITERATION_DOC})",
                subworkflow=subworkflow.name,
                step=var.step,
            )
    for use in scan.uses:
        if use.name in scan.top_level or any(use.name in scan.by_loop.get(loop, ()) for loop in use.loops):
            continue
        owners = sorted(loop for loop, names in scan.by_loop.items() if use.name in names)
        if owners:
            raise LoadError(
                f"variable {use.name!r} is created in the for loop {owners[0]!r} and does not exist "
                f"outside it ({DOC}); assign it before the loop to keep its value",
                subworkflow=subworkflow.name,
                step=use.step,
            )


def _steps(body: StepList | None) -> Iterator[Step]:
    yield from (body.steps if body is not None else [])


def _walk(body: StepList | None, scan: _Scan, loops: tuple[str, ...]) -> None:
    for step in _steps(body):
        if isinstance(step, AssignStep):
            for target, value in step.assignments:
                scan.use(value, step.name, loops)
                scan.target(target, step.name, loops)
        elif isinstance(step, CallStep):
            scan.use(step.args, step.name, loops)
            if step.result:
                scan.define(step.result, loops)
        elif isinstance(step, (ReturnStep, RaiseStep)):
            scan.use(step.value, step.name, loops)
        elif isinstance(step, SwitchStep):
            for case in step.cases:
                scan.use(case.condition, step.name, loops)
                for target, value in case.assignments or []:
                    scan.use(value, step.name, loops)
                    scan.target(target, step.name, loops)
                scan.use(case.returns, step.name, loops)
                scan.use(case.raises, step.name, loops)
                _walk(case.steps, scan, loops)
        elif isinstance(step, ForStep):
            scan.use(step.items, step.name, loops)  # evaluated before the loop, outside it
            for bound in step.range or ():
                scan.use(bound, step.name, loops)
            inner = (*loops, step.name)
            for name in (step.value, step.index):
                if name:
                    scan.define(name, inner)
                    scan.loop_vars.append(_Use(name, step.name, inner))
            _walk(step.body, scan, inner)
        elif isinstance(step, StepsStep):
            _walk(step.body, scan, loops)
        elif isinstance(step, TryStep):
            _walk(step.body, scan, loops)
            if step.retry is not None:
                for template in (step.retry.max_retries, step.retry.initial_delay, step.retry.max_delay):
                    scan.use(template, step.name, loops)
                scan.use(step.retry.multiplier, step.name, loops)
            if step.handler is not None:
                if step.handler.as_name:
                    scan.define(step.handler.as_name, loops)
                _walk(step.handler.body, scan, loops)
