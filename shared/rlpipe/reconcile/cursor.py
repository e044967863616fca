"""Where the reconciler stopped: one small JSON object in the state bucket, written with CAS.

A pass stops at its time budget and the next tick (another process, minutes later) must resume
where it stopped, so the position lives in the bucket, not in memory. It is written with the
generation it was read at: two passes that overlap (a redelivered tick, the CLI beside the
function) cannot move it backwards; the slower one finds the generation changed and leaves the
other's position alone. Losing the cursor costs one re-scan, never correctness, because every
action of a pass is idempotent.

Format (``version`` 1)::

    {"version": 1,
     "after": "rk3x...",            # last run id handled in this round; "" = start of a round
     "round": 7,                    # rounds completed so far + 1
     "round_started_at": "...Z",    # when this round's first pass began
     "updated_at": "...Z",
     "last_pass": {"examined": 640, "actions": 3, "errors": 0, "stopped": "budget", "seconds": 240.0}}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rlpipe.control.adapters import blobstore
from rlpipe.core import layout

CURSOR_OBJECT = layout.RECONCILE_CURSOR
VERSION = 1


@dataclass(frozen=True)
class Cursor:
    after: str = ""
    round: int = 1
    round_started_at: str | None = None
    updated_at: str | None = None
    last_pass: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return blobstore.dumps({"version": VERSION, **asdict(self)})

    @classmethod
    def from_json(cls, data: Any) -> Cursor:
        """A cursor this code does not understand starts a new round rather than failing every tick."""
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return cls()
        after, rnd, last_pass = data.get("after"), data.get("round"), data.get("last_pass")
        return cls(
            after=after if isinstance(after, str) else "",
            round=rnd if isinstance(rnd, int) and rnd >= 1 else 1,
            round_started_at=data.get("round_started_at")
            if isinstance(data.get("round_started_at"), str)
            else None,
            updated_at=data.get("updated_at") if isinstance(data.get("updated_at"), str) else None,
            last_pass=last_pass if isinstance(last_pass, dict) else {},
        )


class CursorStore:
    def __init__(self, store: blobstore.BlobStore, name: str = CURSOR_OBJECT):
        self.store = store
        self.name = name

    def load(self) -> tuple[Cursor, int | None]:
        """The cursor and the generation to write back against (None: there is none yet)."""
        try:
            blob = self.store.read(self.name)
        except blobstore.NotFound:
            return Cursor(), None
        try:
            return Cursor.from_json(blob.json()), blob.generation
        except ValueError:
            return Cursor(), blob.generation

    def save(self, cursor: Cursor, generation: int | None) -> bool:
        """Compare-and-swap; False when another pass moved the cursor since we read it."""
        if generation is None:
            return self.store.create(self.name, cursor.to_json()) is not None
        try:
            self.store.replace(self.name, cursor.to_json(), generation)
        except blobstore.PreconditionFailed:
            return False
        return True


def describe(cursor: Cursor) -> str:
    where = f"after {cursor.after}" if cursor.after else "from the start"
    return f"round {cursor.round}, {where}"
