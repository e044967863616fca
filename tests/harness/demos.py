"""`rlpipe demo` run inside a test's own process, as a user's terminal would run it."""

from __future__ import annotations

import os
from typing import Any

import pytest

from rlpipe.cli.demo import run_demo


def run_demo_here(capsys: pytest.CaptureFixture[str], **options: Any) -> tuple[int, str]:
    """The demo's exit code and what it printed. The demo exports its stack's settings into the
    process environment (its functions and CLI read them there), so the environment is put back
    afterwards: the next test in this worker must not find a stopped stack's endpoints."""
    saved = dict(os.environ)
    try:
        code = run_demo(**options)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, capsys.readouterr().out
