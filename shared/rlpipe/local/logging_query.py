"""The part of Cloud Logging's query language that rlpipe's own queries use, parsed and evaluated.

The local Cloud Logging stand-in (``local/cloud_logging.py``) answers ``entries.list`` with the
entries a ``filter`` selects, so the filter must mean here what it means on Google's side
(https://cloud.google.com/logging/docs/view/logging-query-language):

- a query is comparisons joined by ``AND``, ``OR`` and ``NOT`` (or ``-``), with parentheses; two
  comparisons side by side are joined by an implicit ``AND``; ``NOT`` binds tightest, then ``OR``,
  then ``AND`` (the page's own example: ``a OR NOT b AND NOT c OR d`` is
  ``(a OR (NOT b)) AND ((NOT c) OR d)``); the operators are upper case;
- a comparison is ``FIELD OP VALUE``, the value a quoted string (backslash escapes) or a bare word;
  ``=`` and ``!=`` compare whole values, ``:`` ("has") finds the value anywhere inside the field,
  ``=~`` and ``!~`` search with a regular expression (RE2 syntax: an unanchored search, case
  sensitive unless the pattern says ``(?i)``), and ``<``, ``<=``, ``>``, ``>=`` order timestamps
  (RFC 3339) and severities;
- "String comparisons aren't case sensitive" (the same page): ``=``, ``!=`` and ``:`` ignore case.

What it does not play it refuses (``QueryError``, which the stand-in answers with 400), rather than
match nothing: global restrictions (a bare value), value lists, functions, and any field outside
:data:`FIELDS`. A test written against a query the stand-in silently misread would prove nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError

from rlpipe.cluster import log_cursor

GRAMMAR = r"""
?start: conj
?conj: disj (_AND? disj)*
?disj: unary (_OR unary)*
?unary: _NOT unary -> negate
      | "(" conj ")"
      | comparison
comparison: field OP value
field: NAME ("." NAME)*
value: STRING | BARE

_AND.2: "AND"
_OR.2: "OR"
_NOT.2: "NOT" | "-"
OP: "=~" | "!~" | "!=" | ">=" | "<=" | "=" | ":" | ">" | "<"
NAME: /[A-Za-z_][A-Za-z0-9_]*/
STRING: /"(\\.|[^"\\])*"/
BARE: /[^\s()"<>=!:~]+/
%import common.WS
%ignore WS
"""

# The LogEntry fields a query may name here, and how their values compare.
TEXT, TIME, SEVERITY = "text", "time", "severity"
FIELDS: Mapping[str, str] = {
    "resource.type": TEXT,
    **{
        f"resource.labels.{label}": TEXT
        # k8s_container's labels (https://cloud.google.com/logging/docs/api/v2/resource-list)
        for label in (
            "project_id",
            "location",
            "cluster_name",
            "namespace_name",
            "pod_name",
            "container_name",
        )
    },
    "logName": TEXT,
    "textPayload": TEXT,
    "insertId": TEXT,
    "timestamp": TIME,
    "receiveTimestamp": TIME,
    "severity": SEVERITY,
}
# LogSeverity's values (https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry#logseverity).
SEVERITIES = {
    "DEFAULT": 0,
    "DEBUG": 100,
    "INFO": 200,
    "NOTICE": 300,
    "WARNING": 400,
    "ERROR": 500,
    "CRITICAL": 600,
    "ALERT": 700,
    "EMERGENCY": 800,
}
_OPS = {TEXT: {"=", "!=", ":", "=~", "!~"}, TIME: {"=", "!=", "<", "<=", ">", ">="}}
_OPS[SEVERITY] = _OPS[TIME] | {"="}
_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")


class QueryError(ValueError):
    """A query this stand-in cannot read (malformed, or outside what it plays): 400."""


class _Unknown:
    """A field whose value is not known yet (a file's entries before its lines are read)."""


UNKNOWN = _Unknown()
Lookup = Callable[[str], Any]  # a field's value in one entry: str, int (nanoseconds) or UNKNOWN


@dataclass(frozen=True)
class Comparison:
    field: str
    op: str
    value: Any  # str; int nanoseconds for a timestamp; int level for a severity; re.Pattern for =~


@dataclass(frozen=True)
class Not:
    term: Any


@dataclass(frozen=True)
class All:
    terms: tuple[Any, ...]


@dataclass(frozen=True)
class AnyOf:
    terms: tuple[Any, ...]


Query = Comparison | Not | All | AnyOf | None  # None: the empty filter, which matches everything


def rfc3339_nanos(text: str) -> int:
    """An RFC 3339 time in nanoseconds since the epoch (``QueryError`` if it is not one)."""
    match = _RFC3339.match(text)
    if match is None:
        raise QueryError(f"{text!r} is not an RFC 3339 timestamp")
    return log_cursor.stamp_nanos(match.group(1), match.group(2), match.group(3))


def _comparison(field: str, op: str, raw: str) -> Comparison:
    kind = FIELDS.get(field)
    if kind is None:
        raise QueryError(
            f"the local Cloud Logging does not play the field {field!r} (it plays {sorted(FIELDS)})"
        )
    if op not in _OPS[kind]:
        raise QueryError(f"the local Cloud Logging does not play {field} {op} …")
    if kind == TIME:
        return Comparison(field, op, rfc3339_nanos(raw))
    if kind == SEVERITY:
        level = SEVERITIES.get(raw.upper())
        if level is None:
            raise QueryError(f"{raw!r} is not a severity ({', '.join(SEVERITIES)})")
        return Comparison(field, op, level)
    if op in ("=~", "!~"):
        try:
            return Comparison(field, op, re.compile(raw))
        except re.error as exc:
            raise QueryError(f"invalid regular expression {raw!r}: {exc}") from None
    return Comparison(field, op, raw.casefold())


@v_args(inline=True)
class _Build(Transformer[Token, Query]):
    def conj(self, *terms: Any) -> All:
        return All(tuple(terms))

    def disj(self, *terms: Any) -> AnyOf:
        return AnyOf(tuple(terms))

    def negate(self, term: Any) -> Not:
        return Not(term)

    def field(self, *names: Token) -> str:
        return ".".join(str(n) for n in names)

    def value(self, token: Token) -> str:
        text = str(token)
        if token.type == "STRING":
            return re.sub(r"\\(.)", r"\1", text[1:-1])
        return text

    def comparison(self, field: str, op: Token, value: str) -> Comparison:
        return _comparison(field, str(op), value)


@cache
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr")


def parse(text: str) -> Query:
    """The query ``text`` says; None for an empty one."""
    if not text.strip():
        return None
    try:
        tree = _parser().parse(text)
    except LarkError as exc:
        raise QueryError(f"the filter is not a query the local Cloud Logging reads: {exc}") from None
    try:
        built = _Build().transform(tree)
    except LarkError as exc:  # a QueryError raised inside the transformer comes wrapped
        cause = exc.__context__
        raise (cause if isinstance(cause, QueryError) else QueryError(str(exc))) from None
    return built  # type: ignore[no-any-return]


def _compare(c: Comparison, actual: Any) -> bool | None:
    if actual is UNKNOWN:
        return None
    if actual is None:  # the entry has no such field: only "not equal" holds
        return c.op in ("!=", "!~")
    op, want = c.op, c.value
    if op in ("=~", "!~"):
        return (want.search(actual) is not None) == (op == "=~")
    if isinstance(want, str):
        have = str(actual).casefold()
        if op == ":":
            return want in have
        return (have == want) == (op == "=")
    return {
        "=": actual == want,
        "!=": actual != want,
        "<": actual < want,
        "<=": actual <= want,
        ">": actual > want,
        ">=": actual >= want,
    }[op]


def matches(query: Query, lookup: Lookup) -> bool | None:
    """Whether an entry matches: True, False, or None when that depends on a field ``lookup``
    answers ``UNKNOWN`` for (so a whole file can be skipped on its resource labels alone)."""
    if query is None:
        return True
    if isinstance(query, Comparison):
        return _compare(query, lookup(query.field))
    if isinstance(query, Not):
        inner = matches(query.term, lookup)
        return None if inner is None else not inner
    results = [matches(term, lookup) for term in query.terms]
    if isinstance(query, All):
        if False in results:
            return False
        return None if None in results else True
    if True in results:
        return True
    return None if None in results else False
