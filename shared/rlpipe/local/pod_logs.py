"""A container's log as the kubelet serves it: timestamped lines and the log options.

Both local clusters answer ``GET pods/{name}/log`` (the API double itself, and the real plane's
played kubelet), and the stage function reads the training log incrementally through them with
``timestamps``, ``sinceSeconds`` and ``limitBytes``. So both keep each line's time and apply the
options as the kubelet does (k8s pkg/kubelet/kuberuntime/logs/logs.go ReadLogs, and the
PodLogOptions validation in pkg/apis/core/validation):

- ``timestamps=true`` puts the line's time first, in Go's RFC3339Nano (trailing zeros dropped);
- ``sinceSeconds`` keeps the lines written at or after now minus that many seconds (at least 1);
- ``sinceTime`` (RFC3339) keeps the lines written at or after that time;
- ``tailLines`` keeps the last N of those (0 or more);
- ``limitBytes`` stops after that many bytes (at least 1), even inside a line.

A value that is not a whole number in range is refused with 400, as the API server refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class LogLine:
    time: datetime
    text: str


class BadLogOptions(ValueError):
    """A log option the API server would refuse (HTTP 400)."""


def rfc3339nano(time: datetime) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: up to nine fraction digits, trailing zeros dropped."""
    utc = time.astimezone(UTC)
    fraction = f"{utc.microsecond:06d}000".rstrip("0")
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _option(query: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadLogOptions(f"{name} must be a whole number") from None
    if value < minimum:
        raise BadLogOptions(f"{name} must be at least {minimum}")
    return value


def render(lines: Iterable[LogLine], query: Mapping[str, str], now: datetime | None = None) -> bytes:
    """The response body for ``query`` (single values: ``timestamps``, ``sinceSeconds``,
    ``tailLines``, ``limitBytes``) over ``lines``, oldest first."""
    since = _option(query, "sinceSeconds", 1)
    tail = _option(query, "tailLines", 0)
    limit = _option(query, "limitBytes", 1)
    stamped = query.get("timestamps", "").lower() in ("true", "1")
    kept = list(lines)
    if since is not None and "sinceTime" in query:
        raise BadLogOptions("at most one of sinceSeconds or sinceTime may be specified")
    if since is not None:
        cut = (now or datetime.now(UTC)) - timedelta(seconds=since)
        kept = [line for line in kept if line.time >= cut]
    if "sinceTime" in query:
        try:
            after = datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
        except ValueError:
            raise BadLogOptions("sinceTime must be an RFC3339 time") from None
        kept = [line for line in kept if line.time >= after]
    if tail is not None:
        kept = kept[len(kept) - tail :] if tail < len(kept) else kept
    body = "".join(
        f"{rfc3339nano(line.time)} {line.text}\n" if stamped else f"{line.text}\n" for line in kept
    )
    data = body.encode()
    return data[:limit] if limit is not None else data
