"""The `rlpipe` command as a user runs it: its own process, with the environment given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness.patience import ceiling

ROOT = Path(__file__).resolve().parents[2]


def run_rlpipe(
    args: list[str], env: dict[str, str], cwd: Path = ROOT, expected_seconds: float = 3
) -> subprocess.CompletedProcess[str]:
    """Run ``rlpipe ARGS`` (this interpreter's install) and capture what it prints."""
    return subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        check=False,
        timeout=ceiling(expected_seconds),
    )
