"""Reading a pod's log incrementally, so that every line is seen once, however fast it scrolls.

Why a cursor and not the last N lines: with the tutorials' ``debug=true`` the head prints far more
than any tail between two status polls, and an evaluation line that scrolled out before it was
read was lost for good. The kubelet's log API has no offset, but it has ``timestamps=true`` (each
line starts with its RFC3339Nano time) and ``sinceTime`` (lines stamped at or after it, on the
node's own clock, so no clock of ours enters). ``sinceTime`` has whole seconds, so each read asks
from the second of the newest line already seen, keeps only lines newer than the cursor, and
moves the cursor to the newest line kept. ``limitBytes`` bounds one read; a read cut short drops
its partial last line, which the next read starts from (a read that brings nothing new because one
second holds more than the limit is asked again with a larger one: ``ClusterClient.read_log``).
Lines stamped with the same nanosecond are told apart by how many of them were already taken.

The cursor belongs to one pod: a read of another pod (a new attempt's) starts from its beginning.
Pure: text in, lines and cursor out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

READ_LIMIT_BYTES = 4 * 1024 * 1024  # one read's bound; the rest comes on the next read
MAX_READ_LIMIT_BYTES = 64 * 1024 * 1024  # what one second of log may take before it is skipped
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2}) (.*)$")


@dataclass(frozen=True)
class LogCursor:
    pod: str  # the pod's uid (a recreated pod of the same name is another log)
    nanos: int  # the newest line taken, in nanoseconds since the epoch
    at_nanos: int  # how many lines stamped exactly ``nanos`` were taken

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "nanos": self.nanos, "at_nanos": self.at_nanos}

    @classmethod
    def from_json(cls, data: Any) -> LogCursor | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(str(data["pod"]), int(data["nanos"]), int(data["at_nanos"]))
        except (KeyError, TypeError, ValueError):
            return None


def stamp_nanos(stamp: str, fraction: str | None, zone: str) -> int:
    """An RFC3339(Nano) time in nanoseconds since the epoch, without losing the nanoseconds."""
    whole = datetime.fromisoformat(stamp + ("+00:00" if zone == "Z" else zone)).astimezone(UTC)
    return int(whole.timestamp()) * 1_000_000_000 + int((fraction or "").ljust(9, "0"))


def since_time(cursor: LogCursor | None, pod: str) -> str | None:
    """The ``sinceTime`` of the next read of ``pod`` (RFC3339, whole seconds: the API's
    precision): the second of the cursor's line; None (from the start) without a cursor for it."""
    if cursor is None or cursor.pod != pod:
        return None
    return datetime.fromtimestamp(cursor.nanos // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def take_new(
    body: str, cursor: LogCursor | None, pod: str, *, cut_short: bool
) -> tuple[list[str], LogCursor | None]:
    """The lines of a ``timestamps=true`` read that are newer than ``cursor``, and the cursor after
    them. ``cut_short``: the read hit its byte limit, so its last line may be partial."""
    raw = body.split("\n")
    complete = raw[:-1]  # the text after the last newline is partial (or empty)
    if not cut_short and raw[-1]:
        complete.append(raw[-1])
    mine = cursor if cursor is not None and cursor.pod == pod else None
    nanos, at = (mine.nanos, mine.at_nanos) if mine else (-1, 0)
    seen_at: dict[int, int] = {}
    kept: list[str] = []
    for line in complete:
        match = _STAMP.match(line)
        if match is None:
            continue  # not a timestamped line: nothing the kubelet sends with timestamps=true
        when = stamp_nanos(match.group(1), match.group(2), match.group(3))
        seen_at[when] = seen_at.get(when, 0) + 1
        if when < nanos or (when == nanos and seen_at[when] <= at):
            continue
        kept.append(match.group(4))
        nanos, at = when, seen_at[when]
    if not kept:
        return [], mine
    return kept, LogCursor(pod, nanos, at)
