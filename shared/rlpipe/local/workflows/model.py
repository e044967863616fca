"""The loaded, validated form of a workflow definition.

The loader turns YAML into these objects once; the interpreter only walks them.
Keeping the two apart means every check that can be made before running is made
by the loader, and the interpreter never meets an unexpected shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .expressions import Node
from .templates import Template


@dataclass
class Step:
    name: str
    next: str | None = None


@dataclass
class StepList:
    steps: list[Step]
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {step.name: position for position, step in enumerate(self.steps)}


@dataclass
class AssignTarget:
    """Left side of an assignment: ``root`` then ``.key`` (str) or ``[expr]`` (Node) parts."""

    text: str
    root: str
    path: list[str | Node]


@dataclass
class AssignStep(Step):
    assignments: list[tuple[AssignTarget, Template]] = field(default_factory=list)


@dataclass
class CallStep(Step):
    target: str = ""
    is_subworkflow: bool = False
    args: Template | None = None
    result: str | None = None


@dataclass
class SwitchCase:
    condition: Template
    next: str | None = None
    assignments: list[tuple[AssignTarget, Template]] | None = None
    steps: StepList | None = None
    returns: Template | None = None
    has_return: bool = False
    raises: Template | None = None


@dataclass
class SwitchStep(Step):
    cases: list[SwitchCase] = field(default_factory=list)


@dataclass
class ForStep(Step):
    value: str = ""
    index: str | None = None
    items: Template | None = None
    range: tuple[Template, Template] | None = None
    body: StepList = field(default_factory=lambda: StepList([]))


@dataclass
class StepsStep(Step):
    body: StepList = field(default_factory=lambda: StepList([]))


@dataclass
class RetryPolicy:
    """``predicate`` is a subworkflow name or a built-in predicate name."""

    predicate: str
    predicate_is_builtin: bool
    max_retries: Template
    initial_delay: Template
    max_delay: Template
    multiplier: Template


@dataclass
class ExceptClause:
    as_name: str | None
    body: StepList


@dataclass
class TryStep(Step):
    body: StepList = field(default_factory=lambda: StepList([]))
    retry: RetryPolicy | None = None
    handler: ExceptClause | None = None


@dataclass
class ReturnStep(Step):
    value: Template | None = None


@dataclass
class RaiseStep(Step):
    value: Template | None = None


@dataclass
class JumpStep(Step):
    """A step that only has ``next``."""


@dataclass
class Param:
    name: str
    default: Template | None = None
    has_default: bool = False


@dataclass
class Subworkflow:
    name: str
    params: list[Param]
    body: StepList


@dataclass
class Workflow:
    subworkflows: dict[str, Subworkflow]

    @property
    def main(self) -> Subworkflow:
        return self.subworkflows["main"]
