"""What a local stack leaves behind for `rlpipe local status|down` and every CLI command that talks
to it: kept apart from the stack's supervisor (``local/stack.py``), which imports every stand-in,
so that a command finds the stack without loading them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class StackState:
    """What `up` leaves behind for `status`, `down` and the CLI: endpoints, processes, environment."""

    root: str
    pids: dict[str, int]
    endpoints: dict[str, str]
    env: dict[str, str]
    events: str
    events_note: str
    cluster: str = "double"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> StackState:
        return cls(**json.loads(path.read_text()))


def state_path(root: Path) -> Path:
    return root / "state.json"
