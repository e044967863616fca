"""The `rlpipe` command as a user runs it: its own process, with the environment given."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlpipe.core.runs.record import RunRecord
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


def run_main(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``rlpipe ARGS`` through its ``main`` in this process: the same exit code and the same stdout
    and stderr a process would give, without an interpreter started per call. ``env`` is the whole
    environment for the call and is put back after (``main`` adds a local stack's settings to it).
    An exception ``main`` lets through propagates, as a traceback would reach a user."""
    import contextlib
    import io
    import os

    from rlpipe.cli.main import main

    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def compare_over(records: Iterable[RunRecord], args: list[str], settings: Any) -> int:
    """``rlpipe compare ARGS`` in this process over these records (a ledger that is only them), with
    the deployment ``settings`` given: what its subcommand returns, its output on stdout."""
    import argparse

    from rlpipe.cli import compare_command

    by_id = {r.run_id: r for r in records}

    class RecordsLedger:
        def get(self, run_id: str) -> RunRecord | None:
            return by_id.get(run_id)

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    compare_command.register(sub, settings=lambda: settings, ledger=lambda _settings: RecordsLedger())
    parsed = parser.parse_args(["compare", *args])
    code: int = parsed.func(parsed)
    return code
