"""Retry policies: the built-in predicates and the backoff formula.

From https://cloud.google.com/workflows/docs/reference/syntax/retrying and the
stdlib pages:

* ``http.default_retry_predicate`` retries 429, 502, 503, 504 and any
  ConnectionError, ConnectionFailedError and TimeoutError;
* ``http.default_retry_predicate_non_idempotent`` retries 429, 503 and
  ConnectionFailedError;
* ``http.default_retry`` / ``http.default_retry_non_idempotent`` use those
  predicates with ``max_retries: 5`` and ``retry.default_backoff`` (initial
  delay 1 s, max delay 60 s, multiplier 1.25);
* the delay before retry *n* (0-based) is ``initial_delay * multiplier**n``
  capped at ``max_delay`` (the page's example: 1, 2, 4, 8, 16, 32, 60, 60).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import CONNECTION_ERROR, CONNECTION_FAILED_ERROR, HTTP_ERROR, TIMEOUT_ERROR

DEFAULT_MAX_RETRIES = 5
DEFAULT_BACKOFF = (1.0, 60.0, 1.25)  # initial_delay, max_delay, multiplier


def _tags(error: Any) -> list[Any]:
    if isinstance(error, dict) and isinstance(error.get("tags"), list):
        tags: list[Any] = error["tags"]
        return tags
    return []


def _http_code(error: Any) -> Any:
    return error.get("code") if isinstance(error, dict) and HTTP_ERROR in _tags(error) else None


def default_retry_predicate(error: Any) -> bool:
    tags = _tags(error)
    if any(tag in tags for tag in (CONNECTION_ERROR, CONNECTION_FAILED_ERROR, TIMEOUT_ERROR)):
        return True
    return _http_code(error) in (429, 502, 503, 504)


def default_retry_predicate_non_idempotent(error: Any) -> bool:
    if CONNECTION_FAILED_ERROR in _tags(error):
        return True
    return _http_code(error) in (429, 503)


BUILTIN_PREDICATES: dict[str, Callable[[Any], bool]] = {
    "http.default_retry_predicate": default_retry_predicate,
    "http.default_retry_predicate_non_idempotent": default_retry_predicate_non_idempotent,
}

# Policy objects usable as ``retry: ${...}`` -> the predicate they use.
DEFAULT_POLICIES = {
    "http.default_retry": "http.default_retry_predicate",
    "http.default_retry_non_idempotent": "http.default_retry_predicate_non_idempotent",
}


def backoff_delay(retry_number: int, initial_delay: float, max_delay: float, multiplier: float) -> float:
    """Seconds to wait before the retry with 0-based number ``retry_number``."""
    return float(min(initial_delay * multiplier**retry_number, max_delay))
