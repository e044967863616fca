"""The shapes Workflows' syntax gives call arguments by name, checked at load time (a part of the loader).

Google's published schema of the Workflows syntax (SchemaStore's ``workflows.json``, checked
against every definition the engine's tests load: docs/workflow.md, Testing) gives seven argument
names one shape whatever the call: ``url``, ``method``, ``headers``, ``body``, ``query``, ``auth``
and ``timeout``, following the HTTP requests reference
(https://cloud.google.com/workflows/docs/reference/stdlib/http/request). A value the schema refuses
is refused here, before anything runs, instead of failing at run time or, for an ``auth`` computed by
an expression, being accepted by this engine and refused by Workflows. Where the schema accepts
an expression (``${...}``), the function checks the value when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .http_client import METHODS, auth_problem
from .templates import is_expression

# The methods the schema names for http.request; the engine sends only METHODS.
SCHEMA_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


def _url(value: Any) -> str | None:
    return None if isinstance(value, str) else "url must be a string: a URL or an expression"


def _method(value: Any) -> str | None:
    if value in METHODS:
        return None
    if value in SCHEMA_METHODS:
        return f"method {value} is not supported by the local engine (it sends {', '.join(METHODS)})"
    return f"method must be written as one of {', '.join(SCHEMA_METHODS)} (not an expression), got {value!r}"


def _headers(value: Any) -> str | None:
    if isinstance(value, dict) and value:
        return None
    if isinstance(value, dict):
        return "headers is an empty map: leave headers out"
    return "headers must be a map written in the definition (its values may be expressions)"


def _body(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, str)):
        return None
    return f"body must be a map, a string, null or an expression, got {value!r}"


def _query(value: Any) -> str | None:
    if isinstance(value, dict) or is_expression(value):
        return None
    return f"query must be a map or an expression, got {value!r}"


def _auth(value: Any) -> str | None:
    if not isinstance(value, dict):
        return (
            "auth must be a map written in the definition, such as auth: {type: OIDC}, "
            f"not an expression, got {value!r}"
        )
    return auth_problem(value)


def _timeout(value: Any) -> str | None:
    if (isinstance(value, (int, float)) and not isinstance(value, bool)) or is_expression(value):
        return None
    return f"timeout must be a number of seconds or an expression, got {value!r}"


_SHAPES: dict[str, Callable[[Any], str | None]] = {
    "url": _url,
    "method": _method,
    "headers": _headers,
    "body": _body,
    "query": _query,
    "auth": _auth,
    "timeout": _timeout,
}


def argument_problem(args: dict[str, Any]) -> str | None:
    """Why one of ``args`` (a call's ``args`` map, as written) has a shape Workflows refuses, or ``None``."""
    for name, check in _SHAPES.items():
        if name in args:
            problem = check(args[name])
            if problem:
                return f"args.{problem}"  # each problem starts with the argument's name
    return None
