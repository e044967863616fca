"""Blocking standard-library functions: only allowed in ``call:`` steps.

``http.*`` (https://cloud.google.com/workflows/docs/reference/stdlib/http/post),
``sys.sleep``, ``sys.log`` (https://cloud.google.com/workflows/docs/reference/stdlib/sys/log)
and ``events.*`` (https://cloud.google.com/workflows/docs/reference/stdlib/events/await_callback).
Arguments the real functions accept but this engine cannot honour locally
(``private_service_name``, ``ca_certificate``) are deliberately not declared, so
the loader rejects them.
"""

from __future__ import annotations

from typing import Any

from .errors import TYPE_ERROR, VALUE_ERROR, raise_error
from .functions import REGISTRY
from .services import ExecutionServices
from .values import is_number, type_name

register = REGISTRY.register

_REQUEST_PARAMS = "url headers body query auth timeout"
SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")


def _named(params: str, args: list[Any]) -> dict[str, Any]:
    return {name: value for name, value in zip(params.split(), args, strict=False) if value is not None}


def _http(method: str, params: str) -> None:
    @register(f"http.{method.lower()}", params, optional=len(params.split()) - 1, blocking=True)
    def _call(services: ExecutionServices, args: list[Any]) -> Any:
        return services.http.request(method, _named(params, args))


_http("GET", "url headers query auth timeout")
for _method in ("POST", "PUT", "PATCH", "DELETE"):
    _http(_method, _REQUEST_PARAMS)


@register("http.request", "method " + _REQUEST_PARAMS, optional=5, blocking=True)
def _http_request(services: ExecutionServices, args: list[Any]) -> Any:
    method = args[0]
    if not isinstance(method, str):
        raise raise_error(TYPE_ERROR, f"method must be a string, got {type_name(method)}")
    return services.http.request(method, _named(_REQUEST_PARAMS, args[1:]))


@register("sys.sleep", "seconds", blocking=True)
def _sys_sleep(services: ExecutionServices, args: list[Any]) -> Any:
    seconds = args[0]
    if not is_number(seconds):
        raise raise_error(TYPE_ERROR, f"sys.sleep: seconds must be a number, got {type_name(seconds)}")
    if seconds < 0:
        raise raise_error(VALUE_ERROR, f"sys.sleep: seconds must not be negative, got {seconds}")
    services.clock.sleep(float(seconds), services.cancel)
    return None


@register("sys.log", "data severity text json timeout", optional=5, blocking=True)
def _sys_log(services: ExecutionServices, args: list[Any]) -> Any:
    named = dict(zip(("data", "severity", "text", "json", "timeout"), args, strict=False))
    payloads = [key for key in ("data", "text", "json") if named.get(key) is not None]
    if len(payloads) != 1:
        raise raise_error(TYPE_ERROR, "sys.log: exactly one of data, text or json is required")
    severity = named.get("severity") or "DEFAULT"
    if severity not in SEVERITIES:
        raise raise_error(VALUE_ERROR, f"sys.log: severity must be one of {SEVERITIES}, got {severity!r}")
    if payloads[0] == "json" and not isinstance(named["json"], dict):
        raise raise_error(TYPE_ERROR, "sys.log: json must be a map")
    services.log(severity, named[payloads[0]])
    return None


@register("events.create_callback_endpoint", "http_callback_method", optional=1, blocking=True)
def _create_callback_endpoint(services: ExecutionServices, args: list[Any]) -> Any:
    return services.callbacks.create(services.execution_name, args[0] if args else None)


@register("events.await_callback", "callback timeout", optional=1, blocking=True)
def _await_callback(services: ExecutionServices, args: list[Any]) -> Any:
    timeout = args[1] if len(args) > 1 else None
    return services.callbacks.await_callback(
        services.execution_name, args[0], timeout, services.clock, services.cancel
    )
