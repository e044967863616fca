"""Values in a definition that may contain expressions (``args``, ``assign``, ``return``...).

Rule from https://cloud.google.com/workflows/docs/reference/syntax/expressions:
an expression is a value that *is* ``${...}``.  A string that merely contains
``${`` somewhere (``"objects/${name}"``) is a literal string; Workflows does not
interpolate.  Maps and lists are walked so nested ``${...}`` values are evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .expressions import EvalContext, Expression, ExpressionSyntaxError, parse_expression


class TemplateError(ValueError):
    """A value in the definition is malformed (bad expression, non-string map key)."""


class Template:
    def evaluate(self, ctx: EvalContext) -> Any:
        raise NotImplementedError

    def expressions(self) -> list[Expression]:
        return []

    @property
    def is_literal(self) -> bool:
        return not self.expressions()


@dataclass
class LiteralT(Template):
    value: Any

    def evaluate(self, ctx: EvalContext) -> Any:
        return self.value


@dataclass
class ExprT(Template):
    expression: Expression

    def evaluate(self, ctx: EvalContext) -> Any:
        return self.expression.evaluate(ctx)

    def expressions(self) -> list[Expression]:
        return [self.expression]


@dataclass
class ListT(Template):
    items: list[Template]

    def evaluate(self, ctx: EvalContext) -> Any:
        return [item.evaluate(ctx) for item in self.items]

    def expressions(self) -> list[Expression]:
        return [e for item in self.items for e in item.expressions()]


@dataclass
class MapT(Template):
    items: dict[str, Template]

    def evaluate(self, ctx: EvalContext) -> Any:
        return {key: value.evaluate(ctx) for key, value in self.items.items()}

    def expressions(self) -> list[Expression]:
        return [e for value in self.items.values() for e in value.expressions()]


class _NoContext:
    """Evaluation context for literal templates, which never look anything up."""

    def lookup(self, name: str) -> Any:
        raise AssertionError("a literal template looked up a variable")

    def call_function(self, name: str, args: list[Any]) -> Any:
        raise AssertionError("a literal template called a function")


def literal_value(template: Template) -> Any:
    """The value of a template without expressions (for load-time checks)."""
    if not template.is_literal:
        raise ValueError("template contains expressions")
    return template.evaluate(_NoContext())


def whole_expression(text: str) -> str | None:
    """The inside of ``${...}`` if ``text`` is exactly one expression, else ``None``."""
    stripped = text.strip()
    if stripped.startswith("${") and stripped.endswith("}"):
        return stripped[2:-1]
    return None


def is_expression(value: Any) -> bool:
    """Whether a value of the definition, as written, is one whole ``${...}`` expression."""
    return isinstance(value, str) and whole_expression(value) is not None


def compile_value(raw: Any) -> Template:
    """Turn a YAML value into a template; raises ``TemplateError`` on a bad expression."""
    if isinstance(raw, str):
        inner = whole_expression(raw)
        if inner is None:
            return LiteralT(raw)
        try:
            return ExprT(parse_expression(inner))
        except ExpressionSyntaxError as exc:
            raise TemplateError(f"invalid expression {raw!r}: {exc}") from exc
    if isinstance(raw, list):
        return ListT([compile_value(item) for item in raw])
    if isinstance(raw, dict):
        items: dict[str, Template] = {}
        for key, value in raw.items():
            if not isinstance(key, str):
                raise TemplateError(f"map keys must be strings, got {key!r}")
            items[key] = compile_value(value)
        return MapT(items)
    if raw is None or isinstance(raw, (bool, int, float)):
        return LiteralT(raw)
    raise TemplateError(f"unsupported value {raw!r} of type {type(raw).__name__}")
