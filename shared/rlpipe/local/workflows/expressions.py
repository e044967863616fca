"""Parse and evaluate Workflows expressions (the text inside ``${...}``).

Parsing uses a real grammar (``expr_grammar.GRAMMAR``, LALR via lark) so that a
``}`` inside a string literal, ``null``/``true``/``false``, or a keyword-like
identifier behave as in Workflows, not as in Python.  Parsing happens once at
load time; the resulting tree is evaluated many times.

Operator semantics follow https://cloud.google.com/workflows/docs/reference/syntax/datatypes
and https://cloud.google.com/workflows/docs/reference/syntax/expressions:
``/`` is float division, ``//`` floor division, ``+`` concatenates when either
side is a string (ints, doubles and bools are converted), logical operators take
booleans only and short-circuit, ``in`` tests list membership or map keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError, VisitError

from .errors import INDEX_ERROR, KEY_ERROR, TYPE_ERROR, ZERO_DIVISION_ERROR, raise_error
from .expr_grammar import GRAMMAR
from .values import equal, is_int, is_number, to_string, type_name


class EvalContext(Protocol):
    """What an expression needs from the running workflow."""

    def lookup(self, name: str) -> Any: ...

    def call_function(self, name: str, args: list[Any]) -> Any: ...


class ExpressionSyntaxError(ValueError):
    """The text inside ``${...}`` is not a valid expression."""


class Node:
    """An expression tree node."""

    def evaluate(self, ctx: EvalContext) -> Any:
        raise NotImplementedError

    def children(self) -> list[Node]:
        return []

    def walk(self) -> list[Node]:
        nodes: list[Node] = [self]
        for child in self.children():
            nodes.extend(child.walk())
        return nodes


@dataclass
class Literal(Node):
    value: Any

    def evaluate(self, ctx: EvalContext) -> Any:
        return self.value


@dataclass
class Var(Node):
    name: str

    def evaluate(self, ctx: EvalContext) -> Any:
        return ctx.lookup(self.name)


@dataclass
class Attr(Node):
    target: Node
    name: str

    def evaluate(self, ctx: EvalContext) -> Any:
        return get_key(self.target.evaluate(ctx), self.name)

    def children(self) -> list[Node]:
        return [self.target]

    def dotted_name(self) -> str | None:
        """``a.b.c`` as text if the chain is made only of names (a function name)."""
        if isinstance(self.target, Var):
            return f"{self.target.name}.{self.name}"
        if isinstance(self.target, Attr):
            head = self.target.dotted_name()
            return f"{head}.{self.name}" if head else None
        return None


@dataclass
class Index(Node):
    target: Node
    index: Node

    def evaluate(self, ctx: EvalContext) -> Any:
        return get_item(self.target.evaluate(ctx), self.index.evaluate(ctx))

    def children(self) -> list[Node]:
        return [self.target, self.index]


@dataclass
class Call(Node):
    name: str
    args: list[Node]

    def evaluate(self, ctx: EvalContext) -> Any:
        return ctx.call_function(self.name, [arg.evaluate(ctx) for arg in self.args])

    def children(self) -> list[Node]:
        return list(self.args)


@dataclass
class ListLit(Node):
    items: list[Node]

    def evaluate(self, ctx: EvalContext) -> Any:
        return [item.evaluate(ctx) for item in self.items]

    def children(self) -> list[Node]:
        return list(self.items)


@dataclass
class MapLit(Node):
    items: list[tuple[Node, Node]]

    def evaluate(self, ctx: EvalContext) -> Any:
        result: dict[str, Any] = {}
        for key_node, value_node in self.items:
            key = key_node.evaluate(ctx)
            if not isinstance(key, str):
                raise raise_error(TYPE_ERROR, f"map keys must be strings, got {type_name(key)}")
            result[key] = value_node.evaluate(ctx)
        return result

    def children(self) -> list[Node]:
        return [node for pair in self.items for node in pair]


@dataclass
class Unary(Node):
    op: str
    operand: Node

    def evaluate(self, ctx: EvalContext) -> Any:
        value = self.operand.evaluate(ctx)
        if self.op == "not":
            return not _require_bool(value, "not")
        if not is_number(value):
            raise raise_error(TYPE_ERROR, f"unary minus needs a number, got {type_name(value)}")
        return -value

    def children(self) -> list[Node]:
        return [self.operand]


@dataclass
class Logical(Node):
    op: str  # "and" | "or"
    left: Node
    right: Node

    def evaluate(self, ctx: EvalContext) -> Any:
        left = _require_bool(self.left.evaluate(ctx), self.op)
        if self.op == "and" and not left:
            return False
        if self.op == "or" and left:
            return True
        return _require_bool(self.right.evaluate(ctx), self.op)

    def children(self) -> list[Node]:
        return [self.left, self.right]


@dataclass
class Binary(Node):
    op: str
    left: Node
    right: Node

    def evaluate(self, ctx: EvalContext) -> Any:
        return apply_binary(self.op, self.left.evaluate(ctx), self.right.evaluate(ctx))

    def children(self) -> list[Node]:
        return [self.left, self.right]


@dataclass
class Expression:
    """A parsed ``${...}`` expression."""

    source: str
    root: Node

    def evaluate(self, ctx: EvalContext) -> Any:
        return self.root.evaluate(ctx)


# --- operators --------------------------------------------------------------


def _require_bool(value: Any, op: str) -> bool:
    if not isinstance(value, bool):
        raise raise_error(TYPE_ERROR, f"operator {op!r} needs booleans, got {type_name(value)}")
    return value


def _add(left: Any, right: Any) -> Any:
    if isinstance(left, str) or isinstance(right, str):
        # datatypes page, "+ operator" table: string + int/double/bool/string is a string.
        if (
            left is None
            or right is None
            or isinstance(left, (list, dict, bytes))
            or isinstance(right, (list, dict, bytes))
        ):
            raise raise_error(TYPE_ERROR, f"cannot add {type_name(left)} and {type_name(right)}")
        return to_string(left) + to_string(right)
    _require_numbers("+", left, right)
    return left + right


def _require_numbers(op: str, left: Any, right: Any) -> None:
    if not (is_number(left) and is_number(right)):
        raise raise_error(
            TYPE_ERROR, f"operator {op!r} is not defined for {type_name(left)} and {type_name(right)}"
        )


def _divide(op: str, left: Any, right: Any) -> Any:
    _require_numbers(op, left, right)
    if right == 0:
        raise raise_error(ZERO_DIVISION_ERROR, f"division by zero in {op!r}")
    if op == "/":
        return float(left) / float(right)
    if op == "//":
        result = left // right
        return result if is_int(left) and is_int(right) else float(math.floor(left / right))
    return left % right


def _compare_order(op: str, left: Any, right: Any) -> bool:
    same_kind = (is_number(left) and is_number(right)) or (isinstance(left, str) and isinstance(right, str))
    if not same_kind:
        raise raise_error(TYPE_ERROR, f"cannot compare {type_name(left)} and {type_name(right)} with {op!r}")
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _contains(needle: Any, haystack: Any) -> bool:
    if isinstance(haystack, list):
        return any(equal(needle, item) for item in haystack)
    if isinstance(haystack, dict):
        if not isinstance(needle, str):
            raise raise_error(TYPE_ERROR, f"map keys are strings; 'in' got a {type_name(needle)}")
        return needle in haystack
    raise raise_error(TYPE_ERROR, f"'in' needs a list or a map on the right, got {type_name(haystack)}")


def apply_binary(op: str, left: Any, right: Any) -> Any:
    if op == "+":
        return _add(left, right)
    if op in ("-", "*"):
        _require_numbers(op, left, right)
        return left - right if op == "-" else left * right
    if op in ("/", "//", "%"):
        return _divide(op, left, right)
    if op == "==":
        return equal(left, right)
    if op == "!=":
        return not equal(left, right)
    if op in ("<", "<=", ">", ">="):
        return _compare_order(op, left, right)
    if op == "in":
        return _contains(left, right)
    raise AssertionError(f"unknown operator {op}")


def get_key(container: Any, key: str) -> Any:
    """``m.key``: a missing key is a KeyError (not null) in Workflows."""
    if not isinstance(container, dict):
        raise raise_error(TYPE_ERROR, f"cannot read key {key!r} of a {type_name(container)}")
    if key not in container:
        raise raise_error(KEY_ERROR, f"key not found: {key}")
    return container[key]


def get_item(container: Any, index: Any) -> Any:
    """``x[i]``: list index (non-negative int) or map key (string)."""
    if isinstance(container, list):
        if not is_int(index):
            raise raise_error(TYPE_ERROR, f"list index must be an int, got {type_name(index)}")
        if index < 0 or index >= len(container):
            raise raise_error(INDEX_ERROR, f"list index {index} out of range (length {len(container)})")
        return container[index]
    if isinstance(container, dict):
        if not isinstance(index, str):
            raise raise_error(TYPE_ERROR, f"map key must be a string, got {type_name(index)}")
        return get_key(container, index)
    raise raise_error(TYPE_ERROR, f"cannot index a {type_name(container)}")


# --- parsing ----------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", '"': '"', "'": "'", "/": "/"}


def unescape(body: str) -> str:
    """Decode the escapes of a string literal (``\\n``, ``\\"``, ``\\uXXXX`` ...)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt == "u" and len(body) >= i + 6:
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        else:
            raise ExpressionSyntaxError(f"unknown escape sequence \\{nxt}")
    return "".join(out)


@v_args(inline=True)
class _ToAst(Transformer[Token, Node]):
    def int_lit(self, token: Token) -> Node:
        return Literal(int(token))

    def float_lit(self, token: Token) -> Node:
        return Literal(float(token))

    def dq_string(self, token: Token) -> Node:
        return Literal(unescape(str(token)[1:-1]))

    def sq_string(self, token: Token) -> Node:
        # Parsed only to say this clearly: the documentation lists `""` as the string element of
        # an expression and says "String literals must be enclosed in double quotes"
        # (https://cloud.google.com/workflows/docs/reference/syntax/expressions).
        raise ExpressionSyntaxError(
            f"string literals in expressions must be enclosed in double quotes, not single: {token}"
        )

    def true_lit(self) -> Node:
        return Literal(True)

    def false_lit(self) -> Node:
        return Literal(False)

    def null_lit(self) -> Node:
        return Literal(None)

    def var(self, token: Token) -> Node:
        return Var(str(token))

    def attr(self, target: Node, name: Token) -> Node:
        return Attr(target, str(name))

    def index(self, target: Node, index: Node) -> Node:
        return Index(target, index)

    def call(self, callee: Node, arguments: list[Node] | None) -> Node:
        if isinstance(callee, Var):
            name = callee.name
        elif isinstance(callee, Attr) and callee.dotted_name():
            name = str(callee.dotted_name())
        else:
            raise ExpressionSyntaxError("only named functions can be called")
        return Call(name, arguments or [])

    def arguments(self, *items: Node) -> list[Node]:
        return [item for item in items if item is not None]

    def list_lit(self, items: list[Node] | None) -> Node:
        return ListLit(items or [])

    def map_items(self, *items: tuple[Node, Node] | None) -> list[tuple[Node, Node]]:
        return [item for item in items if item is not None]

    def map_item(self, key: Node, value: Node) -> tuple[Node, Node]:
        return (key, value)

    def map_lit(self, items: list[tuple[Node, Node]] | None) -> Node:
        return MapLit(items or [])

    def neg(self, operand: Node) -> Node:
        if isinstance(operand, Literal) and is_number(operand.value):
            return Literal(-operand.value)
        return Unary("-", operand)

    def not_op(self, operand: Node) -> Node:
        return Unary("not", operand)

    def and_op(self, left: Node, right: Node) -> Node:
        return Logical("and", left, right)

    def or_op(self, left: Node, right: Node) -> Node:
        return Logical("or", left, right)

    def binop(self, left: Node, op: Token, right: Node) -> Node:
        return Binary(str(op), left, right)

    def compare(self, left: Node, op: Token, right: Node) -> Node:
        return Binary(str(op), left, right)

    def in_op(self, left: Node, right: Node) -> Node:
        return Binary("in", left, right)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", maybe_placeholders=True)


def parse_expression(source: str) -> Expression:
    """Parse the inside of ``${...}``; raises ``ExpressionSyntaxError``."""
    if not source.strip():
        raise ExpressionSyntaxError("empty expression")
    try:
        tree = _parser().parse(source)
        root = _ToAst().transform(tree)
    except VisitError as exc:
        raise ExpressionSyntaxError(str(exc.orig_exc)) from exc
    except LarkError as exc:
        raise ExpressionSyntaxError(f"cannot parse {source!r}: {exc}") from exc
    return Expression(source, root)
