"""Non-blocking standard-library functions (usable in expressions and in ``call:`` steps).

Each one follows its page under https://cloud.google.com/workflows/docs/reference/stdlib/
(expression helpers: ``default``, ``if``, ``keys``, ``len``, ``int``, ``double``,
``string``, ``get_type``; modules ``map``, ``list``, ``text``, ``json``,
``base64``, ``time``, ``sys``).  Errors are Workflows error maps with the tags
the pages list (TypeError for wrong types, ValueError for bad values).

Known difference: regular expressions use Python's ``re``, not RE2.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import TYPE_ERROR, VALUE_ERROR, raise_error
from .functions import REGISTRY
from .services import ExecutionServices
from .values import clone, from_json, is_int, is_number, to_json, to_string, type_name

register = REGISTRY.register


def _need(value: Any, kind: type | tuple[type, ...], fn: str, arg: str) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise raise_error(TYPE_ERROR, f"{fn}: {arg} must not be a bool")
    if not isinstance(value, kind):
        raise raise_error(TYPE_ERROR, f"{fn}: {arg} has the wrong type ({type_name(value)})")
    return value


# --- expression helpers -----------------------------------------------------


@register("default", "val defaultVal")
def _default(_: ExecutionServices, args: list[Any]) -> Any:
    # Only null is replaced: default(0, 5) == 0, default("", "x") == "".
    return args[1] if args[0] is None else args[0]


@register("if", "condition ifTrue ifFalse")
def _if(_: ExecutionServices, args: list[Any]) -> Any:
    condition = args[0]
    if condition is not None and not isinstance(condition, bool):
        raise raise_error(TYPE_ERROR, f"if: condition must be a bool, got {type_name(condition)}")
    return args[1] if condition else args[2]


@register("keys", "map")
def _keys(_: ExecutionServices, args: list[Any]) -> Any:
    return list(_need(args[0], dict, "keys", "map"))


@register("len", "value")
def _len(_: ExecutionServices, args: list[Any]) -> Any:
    value = args[0]
    if isinstance(value, (str, list, dict)):
        return len(value)
    raise raise_error(TYPE_ERROR, f"len: cannot take the length of a {type_name(value)}")


@register("int", "value")
def _int(_: ExecutionServices, args: list[Any]) -> Any:
    value = args[0]
    if is_int(value):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise raise_error(VALUE_ERROR, f"int: cannot convert {value}")
        return int(value)  # truncates toward zero
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            raise raise_error(VALUE_ERROR, f"int: cannot parse {value!r}") from None
    raise raise_error(TYPE_ERROR, f"int: expects a string or a double, got {type_name(value)}")


@register("double", "value")
def _double(_: ExecutionServices, args: list[Any]) -> Any:
    value = args[0]
    if is_number(value):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise raise_error(VALUE_ERROR, f"double: cannot parse {value!r}") from None
    raise raise_error(TYPE_ERROR, f"double: expects a string or an int, got {type_name(value)}")


@register("string", "value")
def _string(_: ExecutionServices, args: list[Any]) -> Any:
    # expression-helpers: "string() Accepts an attribute of type integer, double, or boolean and
    # returns a string." A string is not among them, so the engine refuses it rather than pass it
    # through: a definition that works here must not fail on the real service.
    if isinstance(args[0], str):
        raise raise_error(
            TYPE_ERROR, "string: expects an int, a double or a boolean, got string (it is already one)"
        )
    return to_string(args[0])


@register("get_type", "value")
def _get_type(_: ExecutionServices, args: list[Any]) -> Any:
    return type_name(args[0])


# --- map / list -------------------------------------------------------------


@register("map.get", "map keys")
def _map_get(_: ExecutionServices, args: list[Any]) -> Any:
    current, keys = args
    if isinstance(keys, str):
        path = [keys]
    elif isinstance(keys, list) and all(isinstance(k, str) for k in keys):
        path = keys
    else:
        raise raise_error(TYPE_ERROR, "map.get: keys must be a string or a list of strings")
    for key in path:
        if not isinstance(current, dict) or key not in current:
            return None
        current = current[key]
    return current


@register("map.merge", "first second")
def _map_merge(_: ExecutionServices, args: list[Any]) -> Any:
    first = _need(args[0], dict, "map.merge", "first")
    second = _need(args[1], dict, "map.merge", "second")
    return {**clone(first), **clone(second)}


@register("map.delete", "map key")
def _map_delete(_: ExecutionServices, args: list[Any]) -> Any:
    source = clone(_need(args[0], dict, "map.delete", "map"))
    source.pop(_need(args[1], str, "map.delete", "key"), None)
    return source


@register("list.concat", "objs val")
def _list_concat(_: ExecutionServices, args: list[Any]) -> Any:
    return [*clone(_need(args[0], list, "list.concat", "objs")), clone(args[1])]


@register("list.prepend", "objs val")
def _list_prepend(_: ExecutionServices, args: list[Any]) -> Any:
    return [clone(args[1]), *clone(_need(args[0], list, "list.prepend", "objs"))]


# --- text -------------------------------------------------------------------


def _regex(pattern: Any, fn: str) -> re.Pattern[str]:
    try:
        return re.compile(_need(pattern, str, fn, "regexp"))
    except re.error as exc:
        raise raise_error(VALUE_ERROR, f"{fn}: invalid regular expression: {exc}") from None


@register("text.split", "source separator")
def _text_split(_: ExecutionServices, args: list[Any]) -> Any:
    source = _need(args[0], str, "text.split", "source")
    separator = _need(args[1], str, "text.split", "separator")
    if separator == "":
        return list(source)
    return source.split(separator)


@register("text.replace_all", "source substr repl")
def _text_replace_all(_: ExecutionServices, args: list[Any]) -> Any:
    source = _need(args[0], str, "text.replace_all", "source")
    return source.replace(
        _need(args[1], str, "text.replace_all", "substr"), _need(args[2], str, "text.replace_all", "repl")
    )


@register("text.replace_all_regex", "source regexp repl")
def _text_replace_all_regex(_: ExecutionServices, args: list[Any]) -> Any:
    source = _need(args[0], str, "text.replace_all_regex", "source")
    repl = _need(args[2], str, "text.replace_all_regex", "repl")
    return _regex(args[1], "text.replace_all_regex").sub(repl.replace("\\0", "\\g<0>"), source)


@register("text.to_upper", "source")
def _text_to_upper(_: ExecutionServices, args: list[Any]) -> Any:
    return _need(args[0], str, "text.to_upper", "source").upper()


@register("text.to_lower", "source")
def _text_to_lower(_: ExecutionServices, args: list[Any]) -> Any:
    return _need(args[0], str, "text.to_lower", "source").lower()


@register("text.find_all", "source substr")
def _text_find_all(_: ExecutionServices, args: list[Any]) -> Any:
    source = _need(args[0], str, "text.find_all", "source")
    substr = _need(args[1], str, "text.find_all", "substr")
    if substr == "":
        raise raise_error(VALUE_ERROR, "text.find_all: substr must not be empty")
    found = []
    start = source.find(substr)
    while start != -1:
        found.append({"index": start, "match": substr})
        start = source.find(substr, start + len(substr))
    return found


@register("text.find_all_regex", "source regexp")
def _text_find_all_regex(_: ExecutionServices, args: list[Any]) -> Any:
    source = _need(args[0], str, "text.find_all_regex", "source")
    return [
        {"index": m.start(), "match": m.group(0)}
        for m in _regex(args[1], "text.find_all_regex").finditer(source)
    ]


@register("text.match_regex", "source regexp")
def _text_match_regex(_: ExecutionServices, args: list[Any]) -> Any:
    # "True if regexp matches a substring in source" (stdlib/text/match_regex).
    source = _need(args[0], str, "text.match_regex", "source")
    return _regex(args[1], "text.match_regex").search(source) is not None


@register("text.substring", "source start end")
def _text_substring(_: ExecutionServices, args: list[Any]) -> Any:
    source = _need(args[0], str, "text.substring", "source")
    start = _need(args[1], int, "text.substring", "start")
    end = _need(args[2], int, "text.substring", "end")
    start, end = max(0, start), min(len(source), end)
    return source[start:end] if start < end else ""


@register("text.encode", "text charset", optional=1)
def _text_encode(_: ExecutionServices, args: list[Any]) -> Any:
    charset = args[1] if len(args) > 1 and args[1] is not None else "UTF-8"
    try:
        return _need(args[0], str, "text.encode", "text").encode(charset)
    except LookupError:
        raise raise_error(VALUE_ERROR, f"text.encode: unknown charset {charset!r}") from None


@register("text.decode", "data charset", optional=1)
def _text_decode(_: ExecutionServices, args: list[Any]) -> Any:
    charset = args[1] if len(args) > 1 and args[1] is not None else "UTF-8"
    try:
        return _need(args[0], bytes, "text.decode", "data").decode(charset)
    except (LookupError, UnicodeDecodeError) as exc:
        raise raise_error(VALUE_ERROR, f"text.decode: {exc}") from None


# --- json / base64 ------------------------------------------------------------


@register("json.decode", "data")
def _json_decode(_: ExecutionServices, args: list[Any]) -> Any:
    return from_json(_need(args[0], (str, bytes), "json.decode", "data"))


def _indent(args: list[Any], fn: str) -> int | None:
    if len(args) < 2 or args[1] is None:
        return None
    indent: int = _need(args[1], int, fn, "indent")
    return indent


@register("json.encode", "data indent", optional=1)
def _json_encode(_: ExecutionServices, args: list[Any]) -> Any:
    return to_json(args[0], indent=_indent(args, "json.encode")).encode("utf-8")


@register("json.encode_to_string", "data indent", optional=1)
def _json_encode_to_string(_: ExecutionServices, args: list[Any]) -> Any:
    return to_json(args[0], indent=_indent(args, "json.encode_to_string"))


@register("base64.encode", "data padding", optional=1)
def _base64_encode(_: ExecutionServices, args: list[Any]) -> Any:
    text = base64.b64encode(_need(args[0], bytes, "base64.encode", "data")).decode("ascii")
    return text if len(args) < 2 or args[1] is not False else text.rstrip("=")


@register("base64.decode", "data padding", optional=1)
def _base64_decode(_: ExecutionServices, args: list[Any]) -> Any:
    text = _need(args[0], str, "base64.decode", "data")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error as exc:
        raise raise_error(VALUE_ERROR, f"base64.decode: {exc}") from None


# --- time / sys ---------------------------------------------------------------


@register("time.format", "seconds timezone", optional=1)
def _time_format(_: ExecutionServices, args: list[Any]) -> Any:
    seconds = _need(args[0], (int, float), "time.format", "seconds")
    zone: Any = UTC
    if len(args) > 1 and args[1] is not None:
        try:
            zone = ZoneInfo(_need(args[1], str, "time.format", "timezone"))
        except ZoneInfoNotFoundError:
            raise raise_error(VALUE_ERROR, f"time.format: unknown timezone {args[1]!r}") from None
    stamp = datetime.fromtimestamp(seconds, tz=zone).isoformat()
    return stamp.replace("+00:00", "Z")


@register("time.parse", "value")
def _time_parse(_: ExecutionServices, args: list[Any]) -> Any:
    text = _need(args[0], str, "time.parse", "value")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise raise_error(VALUE_ERROR, f"time.parse: not an RFC 3339 timestamp: {text!r}") from None


@register("sys.now")
def _sys_now(services: ExecutionServices, _: list[Any]) -> Any:
    return float(services.clock.now())


@register("sys.get_env", "name default", optional=1)
def _sys_get_env(services: ExecutionServices, args: list[Any]) -> Any:
    # "If the specified variable is not set, returns the default value instead" (stdlib/sys/get_env).
    name = _need(args[0], str, "sys.get_env", "name")
    default = args[1] if len(args) > 1 else None
    if default is not None and not isinstance(default, str):
        raise raise_error(TYPE_ERROR, "sys.get_env: default must be a string")
    return services.env.get(name, default)
