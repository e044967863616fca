"""Errors of the local Workflows engine.

Three different things can go wrong, and they must never be confused:

* ``WorkflowError``: an error *inside* the workflow (a failed HTTP call, a
  missing map key, a ``raise`` step).  It carries the Workflows error value (a
  map such as ``{"tags": ["KeyError"], "message": ...}`` or a raised string) and
  can be caught by ``try/except`` in the YAML.
* ``LoadError``: the definition uses something outside the strict subset this
  engine implements.  Raised while loading, so a YAML file cannot drift outside
  what is tested.
* ``ExecutionCancelled``: the execution was cancelled from outside.  It is a
  plain Python exception, never a ``WorkflowError``, because Workflows does not
  run ``except`` blocks on cancellation.
"""

from __future__ import annotations

from typing import Any

# Tags documented on https://cloud.google.com/workflows/docs/reference/syntax/error-types
AUTH_ERROR = "AuthError"
CONNECTION_ERROR = "ConnectionError"
CONNECTION_FAILED_ERROR = "ConnectionFailedError"
HTTP_ERROR = "HttpError"
INDEX_ERROR = "IndexError"
KEY_ERROR = "KeyError"
RECURSION_ERROR = "RecursionError"
RESOURCE_LIMIT_ERROR = "ResourceLimitError"
SYSTEM_ERROR = "SystemError"
TIMEOUT_ERROR = "TimeoutError"
TYPE_ERROR = "TypeError"
VALUE_ERROR = "ValueError"
ZERO_DIVISION_ERROR = "ZeroDivisionError"


class WorkflowError(Exception):
    """An error raised inside a workflow; ``payload`` is what ``except: as: e`` sees.

    ``frames`` records ``(routine, step)`` pairs, innermost first, so a failed
    execution can report where it failed (the Executions API ``error.context``).
    """

    def __init__(self, payload: Any) -> None:
        super().__init__(_describe(payload))
        self.payload = payload
        self.frames: list[tuple[str, str]] = []

    def add_frame(self, routine: str, step: str) -> None:
        self.frames.append((routine, step))


def error_map(tag: str, message: str, **extra: Any) -> dict[str, Any]:
    """Build an error map the way Workflows shapes built-in errors (tags + message)."""
    payload: dict[str, Any] = {"message": message, "tags": [tag]}
    payload.update(extra)
    return payload


def raise_error(tag: str, message: str, **extra: Any) -> WorkflowError:
    """Return (for ``raise``) a ``WorkflowError`` carrying a built-in error map."""
    return WorkflowError(error_map(tag, message, **extra))


class LoadError(ValueError):
    """The definition is outside the supported subset; names the subworkflow and step."""

    def __init__(self, message: str, *, subworkflow: str | None = None, step: str | None = None) -> None:
        where = []
        if subworkflow is not None:
            where.append(f"subworkflow {subworkflow!r}")
        if step is not None:
            where.append(f"step {step!r}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)
        self.subworkflow = subworkflow
        self.step = step


class ExecutionCancelled(Exception):
    """The execution was cancelled; unwinds the interpreter without running ``except``."""


def _describe(payload: Any) -> str:
    if isinstance(payload, dict):
        tags = payload.get("tags")
        message = payload.get("message")
        return f"{tags}: {message}" if tags else str(message if message is not None else payload)
    return str(payload)
