"""Structured JSON log lines with run_id, stage and attempt, and never a secret.

Cloud Logging parses one JSON object per line on stdout (``severity``, ``message``); anything
that looks like a token is masked before the line is written, whatever the caller passed.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any, TextIO

from rlpipe.control.adapters.redaction import REDACTED, TOKEN

_SECRET_FIELD = re.compile(r"(^|[_-])(token|secret|password|authorization)($|[_-])", re.IGNORECASE)


def redact(value: Any) -> Any:
    """Tokens masked (``redaction.TOKEN``), and any value under a secret-named field."""
    if isinstance(value, str):
        return TOKEN.sub(REDACTED, value)
    if isinstance(value, dict):
        return {
            (TOKEN.sub(REDACTED, k) if isinstance(k, str) else k): (
                REDACTED if isinstance(k, str) and _SECRET_FIELD.search(k) and v else redact(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


class Logger:
    def __init__(self, component: str, stream: TextIO | None = None, **context: Any):
        self.component = component
        self.stream = stream
        self.context = context

    def bind(self, **context: Any) -> Logger:
        return Logger(self.component, self.stream, **{**self.context, **context})

    def log(self, severity: str, message: str, **fields: Any) -> None:
        record = {
            "severity": severity,
            "message": message,
            "component": self.component,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **{k: self.context.get(k) for k in ("run_id", "stage", "attempt")},
            **{k: v for k, v in self.context.items() if k not in ("run_id", "stage", "attempt")},
            **fields,
        }
        line = json.dumps(redact(record), default=str, sort_keys=False)
        stream = self.stream or sys.stdout
        stream.write(line + "\n")
        stream.flush()

    def info(self, message: str, **fields: Any) -> None:
        self.log("INFO", message, **fields)

    def warning(self, message: str, **fields: Any) -> None:
        self.log("WARNING", message, **fields)

    def error(self, message: str, **fields: Any) -> None:
        self.log("ERROR", message, **fields)


class JsonFormatter:
    """Routes stdlib ``logging`` records (from library modules) into the same JSON line format."""

    def format(self, record: Any) -> str:
        message = record.getMessage()
        if record.exc_info:
            import traceback

            message += "\n" + "".join(traceback.format_exception(*record.exc_info))
        body = {
            "severity": record.levelname if record.levelname != "WARN" else "WARNING",
            "message": message,
            "component": record.name,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
            "run_id": getattr(record, "run_id", None),
            "stage": getattr(record, "stage", None),
            "attempt": getattr(record, "attempt", None),
        }
        return json.dumps(redact(body), default=str)


def configure_stdlib_logging(level: int = 20) -> None:
    """One JSON line per stdlib log record on stdout; idempotent."""
    import logging

    root = logging.getLogger()
    if any(getattr(h, "_rlpipe", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())  # type: ignore[arg-type]
    handler._rlpipe = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
