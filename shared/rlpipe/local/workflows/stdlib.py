"""Non-blocking standard-library functions (usable in expressions and in ``call:`` steps): the
ones ``workflows/pipeline.yaml`` calls, and no more.

Each one follows its page under https://cloud.google.com/workflows/docs/reference/stdlib/
(expression helpers ``default``, ``if``, ``len``, ``string``; ``map.get``, ``map.merge``,
``list.concat``, ``json.encode_to_string``, ``sys.now``, ``sys.get_env``; the blocking ones, such
as ``sys.sleep`` and ``http.post``, are in ``blocking.py``). Errors are Workflows error maps with
the tags the pages list (TypeError for wrong types, ValueError for bad values). Why no more: the
engine plays what the pipeline uses, and a definition that calls any other function is refused when
it is loaded, naming it (``functions.STANDARD_LIBRARY``), rather than run by a stand-in nothing
holds to the real service.
"""

from __future__ import annotations

from typing import Any

from .errors import TYPE_ERROR, raise_error
from .functions import REGISTRY
from .services import ExecutionServices
from .values import clone, to_json, to_string, type_name

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


@register("len", "value")
def _len(_: ExecutionServices, args: list[Any]) -> Any:
    value = args[0]
    if isinstance(value, (str, list, dict)):
        return len(value)
    raise raise_error(TYPE_ERROR, f"len: cannot take the length of a {type_name(value)}")


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


@register("list.concat", "objs val")
def _list_concat(_: ExecutionServices, args: list[Any]) -> Any:
    return [*clone(_need(args[0], list, "list.concat", "objs")), clone(args[1])]


# --- json / base64 ------------------------------------------------------------


def _indent(args: list[Any], fn: str) -> int | None:
    if len(args) < 2 or args[1] is None:
        return None
    indent: int = _need(args[1], int, fn, "indent")
    return indent


@register("json.encode_to_string", "data indent", optional=1)
def _json_encode_to_string(_: ExecutionServices, args: list[Any]) -> Any:
    return to_json(args[0], indent=_indent(args, "json.encode_to_string"))


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
