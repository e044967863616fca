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

_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}|ya29\.[A-Za-z0-9._-]{20,}|(?i:bearer\s+)[A-Za-z0-9._-]{16,}")
_SECRET_FIELD = re.compile(r"(^|[_-])(token|secret|password|authorization)($|[_-])", re.IGNORECASE)
REDACTED = "[REDACTED]"


def redact(value: Any) -> Any:
    if isinstance(value, str):
        return _TOKEN.sub(REDACTED, value)
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and _SECRET_FIELD.search(k) and v else redact(v))
                for k, v in value.items()}
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
