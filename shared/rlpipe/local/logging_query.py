"""The Cloud Logging queries rlpipe sends, parsed and evaluated as Google's side reads them.

The local Cloud Logging stand-in (``local/cloud_logging.py``) answers ``entries.list`` with the
entries a ``filter`` selects. Production sends two filters (``control.adapters.workload_logs.
workload_filter`` and ``control.adapters.cloud_logs.head_filter``) of one shape: clauses joined by
``AND``, each a comparison of a resource label, the line or the timestamp with a quoted value, or a
parenthesised group of such comparisons joined by ``OR``. That shape is what is played here, with
the meaning the reference gives it (https://cloud.google.com/logging/docs/view/logging-query-language):

- ``=`` compares whole values, ``:`` ("has") finds the value anywhere in the field, and "string
  comparisons aren't case sensitive";
- ``=~`` searches with a regular expression (RE2: unanchored, case sensitive unless the pattern
  says ``(?i)``);
- ``>=`` orders timestamps (RFC 3339, to the nanosecond);
- an empty filter matches every entry.

Anything else (``NOT``, an ``OR`` outside a group, another field, a bare value) is refused with
``QueryError``, which the stand-in answers with 400, rather than matched wrongly: a test written
against a query the stand-in silently misread would prove nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlpipe.cluster import log_cursor

# The fields production's filter names (k8s_container's resource labels and the entry's time), and
# the comparisons it makes of each.
TEXT_FIELDS = (
    "resource.type",
    "resource.labels.namespace_name",
    "resource.labels.pod_name",
    "resource.labels.container_name",
    "textPayload",
)
OPS: dict[str, tuple[str, ...]] = {**{f: ("=", "=~", ":") for f in TEXT_FIELDS}, "timestamp": (">=",)}
_CLAUSE = re.compile(r'\s*(?P<field>[A-Za-z_.]+)\s*(?P<op>=~|>=|=|:)\s*"(?P<value>(?:\\.|[^"\\])*)"\s*')
_AND = re.compile(r"AND(?=\s)")
_OR = re.compile(r"OR(?=\s)")
_OPEN, _CLOSE = re.compile(r"\s*\("), re.compile(r"\s*\)\s*")
_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")


class QueryError(ValueError):
    """A query this stand-in cannot read (malformed, or not the shape production sends): 400."""


class _Unknown:
    """A field whose value is not known yet (a file's entries before its lines are read)."""


UNKNOWN = _Unknown()
Lookup = Callable[[str], Any]  # a field's value in one entry: str, int (nanoseconds) or UNKNOWN


@dataclass(frozen=True)
class Comparison:
    field: str
    op: str
    value: Any  # str (case-folded) for = and :; re.Pattern for =~; int nanoseconds for a timestamp


# Every clause must hold, and a clause holds when one of its comparisons does (a group's OR); the
# empty filter has no clause.
Query = tuple[tuple[Comparison, ...], ...]


def rfc3339_nanos(text: str) -> int:
    """An RFC 3339 time in nanoseconds since the epoch (``QueryError`` if it is not one)."""
    match = _RFC3339.match(text)
    if match is None:
        raise QueryError(f"{text!r} is not an RFC 3339 timestamp")
    return log_cursor.stamp_nanos(match.group(1), match.group(2), match.group(3))


def _comparison(field: str, op: str, raw: str) -> Comparison:
    if field not in OPS:
        raise QueryError(
            f"the local Cloud Logging plays the fields production's filter names ({', '.join(OPS)}), not {field!r}"
        )
    if op not in OPS[field]:
        raise QueryError(f"the local Cloud Logging does not play {field} {op} …")
    if field == "timestamp":
        return Comparison(field, op, rfc3339_nanos(raw))
    if op == "=~":
        try:
            return Comparison(field, op, re.compile(raw))
        except re.error as exc:
            raise QueryError(f"invalid regular expression {raw!r}: {exc}") from None
    return Comparison(field, op, raw.casefold())


def _unreadable(text: str, at: int, why: str = "") -> QueryError:
    return QueryError(f"the filter is not a query the local Cloud Logging reads{why}, at {text[at:][:40]!r}")


def _one(text: str, at: int) -> tuple[Comparison, int]:
    clause = _CLAUSE.match(text, at)
    if clause is None:
        raise _unreadable(text, at)
    value = re.sub(r"\\(.)", r"\1", clause["value"])
    return _comparison(clause["field"], clause["op"], value), clause.end()


def parse(text: str) -> Query:
    """The clauses ``text`` joins with ``AND``, each its comparisons (none for an empty filter)."""
    clauses: list[tuple[Comparison, ...]] = []
    at = 0
    while text[at:].strip():
        if clauses:
            joined = _AND.match(text, at)
            if joined is None:
                raise _unreadable(text, at, ": clauses are joined by AND")
            at = joined.end()
        group = _OPEN.match(text, at)
        if group is None:
            comparison, at = _one(text, at)
            clauses.append((comparison,))
            continue
        anyof, at = [], group.end()
        while True:
            comparison, at = _one(text, at)
            anyof.append(comparison)
            if (closed := _CLOSE.match(text, at)) is not None:
                at = closed.end()
                break
            if (alternative := _OR.match(text, at)) is None:
                raise _unreadable(text, at, ": a group's comparisons are joined by OR")
            at = alternative.end()
        clauses.append(tuple(anyof))
    return tuple(clauses)


def _holds(c: Comparison, actual: Any) -> bool | None:
    if actual is UNKNOWN:
        return None
    if actual is None:  # the entry has no such field: no comparison of it holds
        return False
    if c.op == "=~":
        return c.value.search(actual) is not None
    if c.op == ":":
        return c.value in str(actual).casefold()
    if c.op == ">=":
        return bool(actual >= c.value)
    return bool(str(actual).casefold() == c.value)


def matches(query: Query, lookup: Lookup) -> bool | None:
    """Whether an entry matches: True, False, or None when that depends on a field ``lookup``
    answers ``UNKNOWN`` for (so a whole file can be skipped on its resource labels alone)."""
    results = []
    for anyof in query:
        held = [_holds(c, lookup(c.field)) for c in anyof]
        results.append(True if True in held else None if None in held else False)
    if False in results:
        return False
    return None if None in results else True
