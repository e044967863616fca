"""Workflows values in Python, and the rules that keep their types honest.

Workflows has int, double, string, bool, bytes, null, list and map
(https://cloud.google.com/workflows/docs/reference/syntax/datatypes).  In Python
``bool`` is a subclass of ``int`` and ``1 == True``; every helper here keeps the
two apart so that ``true == 1`` is false and ``len(true)`` is a TypeError, as in
Workflows.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from .errors import TYPE_ERROR, VALUE_ERROR, raise_error


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_double(value: Any) -> bool:
    return isinstance(value, float)


def is_number(value: Any) -> bool:
    return is_int(value) or is_double(value)


def type_name(value: Any) -> str:
    """The name ``get_type`` returns for a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if is_int(value):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    raise TypeError(f"not a Workflows value: {type(value).__name__}")


def format_double(value: float) -> str:
    """Render a double the way ``string()`` does: always with a decimal point."""
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    text = repr(value)
    return text if any(c in text for c in ".en") else text + ".0"


def to_string(value: Any) -> str:
    """``string()``: accepts int, double, bool (and string); anything else is a TypeError."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if is_int(value):
        return str(value)
    if isinstance(value, float):
        return format_double(value)
    raise raise_error(TYPE_ERROR, f"string() does not accept a {type_name(value)}")


def equal(left: Any, right: Any) -> bool:
    """Workflows ``==``: ints and doubles compare numerically, other types never equal."""
    if is_number(left) and is_number(right):
        return bool(left == right)
    if type_name(left) != type_name(right):
        return False
    if isinstance(left, list):
        return len(left) == len(right) and all(equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(equal(left[k], right[k]) for k in left)
    return bool(left == right)


def clone(value: Any) -> Any:
    """Workflows has value semantics: assigning a map copies it, so later edits don't alias."""
    if isinstance(value, (list, dict)):
        return copy.deepcopy(value)
    return value


def check_json_compatible(value: Any, what: str) -> None:
    """Bytes cannot leave a workflow (they are not JSON); the docs say so for results."""
    if isinstance(value, bytes):
        raise raise_error(TYPE_ERROR, f"{what} contains bytes, which cannot be JSON-encoded")
    if isinstance(value, list):
        for item in value:
            check_json_compatible(item, what)
    elif isinstance(value, dict):
        for item in value.values():
            check_json_compatible(item, what)


def to_json(value: Any, *, indent: int | None = None) -> str:
    check_json_compatible(value, "value")
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise raise_error(VALUE_ERROR, f"cannot JSON-encode value: {exc}") from exc


def from_json(text: str | bytes) -> Any:
    """Decode JSON into Workflows values (JSON numbers with a point or exponent are doubles)."""
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise raise_error(VALUE_ERROR, f"invalid JSON: {exc}") from exc
