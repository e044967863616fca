"""RFC 3339 timestamps from outside (Kubernetes objects and events, the Hub's commit dates).

Why one helper: both sources write ``...Z`` or an offset, sometimes nothing parseable; a value
without a zone is UTC, and an unreadable one is "unknown", never an exception.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse_rfc3339(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
