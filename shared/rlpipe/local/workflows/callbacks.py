"""Callback endpoints: ``events.create_callback_endpoint`` and ``events.await_callback``.

From https://cloud.google.com/workflows/docs/creating-callback-endpoints and
https://cloud.google.com/workflows/docs/reference/stdlib/events/await_callback:

* an endpoint accepts one HTTP method (default POST) and its URL is in the
  result's ``url``;
* ``await_callback`` returns ``{"http_request": {body, headers, method, query,
  url}, "received_time", "type"}`` and raises ``TimeoutError`` after ``timeout``
  seconds (default 43200);
* requests that arrive while nobody waits are kept: the Executions API's
  ``Callback.availablePayloads`` lists "payloads received by the callback that
  have not been processed by a waiting execution step", so a callback sent
  before the ``await_callback`` step is delivered to it, not lost;
* an endpoint can only be awaited in the execution that created it.

URLs mirror the real ones (``.../v1/projects/P/locations/L/workflows/W/
executions/E/callbacks/ID``) with the local server's base URL.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .clock import Clock
from .errors import TIMEOUT_ERROR, TYPE_ERROR, VALUE_ERROR, raise_error
from .values import is_number, type_name

DEFAULT_AWAIT_TIMEOUT = 43200.0
CALLBACK_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")


@dataclass
class _Endpoint:
    callback_id: str
    execution_name: str
    method: str
    path: str
    pending: deque[dict[str, Any]] = field(default_factory=deque)


@dataclass(frozen=True)
class Delivery:
    """The answer the callback HTTP server gives to a request."""

    status: int
    message: str


class CallbackRegistry:
    """All callback endpoints of all executions; shared by the engine and the HTTP server."""

    def __init__(self, base_url: str = "http://127.0.0.1:0") -> None:
        self.base_url = base_url.rstrip("/")
        self._condition = threading.Condition()
        self._endpoints: dict[str, _Endpoint] = {}
        self._finished: set[str] = set()

    def create(self, execution_name: str, method: Any) -> dict[str, Any]:
        method = "POST" if method is None else method
        if not isinstance(method, str):
            raise raise_error(TYPE_ERROR, f"http_callback_method must be a string, got {type_name(method)}")
        if method.upper() not in CALLBACK_METHODS:
            raise raise_error(
                VALUE_ERROR, f"http_callback_method must be one of {CALLBACK_METHODS}, got {method!r}"
            )
        callback_id = uuid.uuid4().hex
        path = f"/v1/{execution_name}/callbacks/{callback_id}"
        with self._condition:
            self._endpoints[callback_id] = _Endpoint(callback_id, execution_name, method.upper(), path)
        return {"url": self.base_url + path}

    def finish_execution(self, execution_name: str) -> None:
        """After an execution ends its endpoints answer 404 and queued payloads are dropped."""
        with self._condition:
            self._finished.add(execution_name)
            for callback_id in [k for k, e in self._endpoints.items() if e.execution_name == execution_name]:
                del self._endpoints[callback_id]
            self._condition.notify_all()

    def deliver(
        self, path: str, method: str, headers: dict[str, str], query: str, body: bytes, received: float
    ) -> Delivery:
        """Queue an incoming request for its endpoint; 200 if some await will receive it."""
        callback_id = path.rstrip("/").rsplit("/", 1)[-1]
        with self._condition:
            endpoint = self._endpoints.get(callback_id)
            if endpoint is None or endpoint.path != path.rstrip("/"):
                return Delivery(404, "callback not found (unknown, or its execution has finished)")
            if method.upper() != endpoint.method:
                return Delivery(405, f"this callback accepts {endpoint.method}, not {method.upper()}")
            endpoint.pending.append(
                {
                    "http_request": {
                        "body": _decode_body(headers, body),
                        "headers": dict(headers),
                        "method": method.upper(),
                        "query": urllib.parse.parse_qs(query, keep_blank_values=True),
                        "url": endpoint.path + (f"?{query}" if query else ""),
                    },
                    "received_time": datetime.fromtimestamp(received, tz=UTC)
                    .isoformat()
                    .replace("+00:00", "Z"),
                    "type": "HTTP",
                }
            )
            self._condition.notify_all()
        return Delivery(200, "callback received")

    def await_callback(
        self, execution_name: str, callback: Any, timeout: Any, clock: Clock, cancel: threading.Event
    ) -> dict[str, Any]:
        endpoint = self._endpoint_for(execution_name, callback)
        seconds = _timeout_seconds(timeout)
        arrived = clock.wait_for(self._condition, lambda: bool(endpoint.pending), seconds, cancel)
        if not arrived:
            raise raise_error(TIMEOUT_ERROR, f"timed out after {seconds:g} s waiting for a callback")
        with self._condition:
            return endpoint.pending.popleft()

    def _endpoint_for(self, execution_name: str, callback: Any) -> _Endpoint:
        if not isinstance(callback, dict) or not isinstance(callback.get("url"), str):
            raise raise_error(
                TYPE_ERROR, "callback must be the map returned by events.create_callback_endpoint"
            )
        url = urllib.parse.urlsplit(callback["url"])
        callback_id = url.path.rstrip("/").rsplit("/", 1)[-1]
        with self._condition:
            endpoint = self._endpoints.get(callback_id)
        if endpoint is None or endpoint.execution_name != execution_name:
            raise raise_error(VALUE_ERROR, "a callback can only be awaited in the execution that created it")
        return endpoint


def _timeout_seconds(timeout: Any) -> float:
    if timeout is None:
        return DEFAULT_AWAIT_TIMEOUT
    if not is_number(timeout):
        raise raise_error(TYPE_ERROR, f"timeout must be a number, got {type_name(timeout)}")
    if timeout < 0:
        raise raise_error(VALUE_ERROR, f"timeout must not be negative, got {timeout}")
    return float(timeout)


def _decode_body(headers: dict[str, str], body: bytes) -> Any:
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        try:
            return json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return body.decode("utf-8", errors="replace")
    if not body:
        return None
    if media.startswith("text/") or not media:
        return body.decode("utf-8", errors="replace")
    return body
