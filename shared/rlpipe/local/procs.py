"""Child processes of the local stack: started in their own process group, killed as a group.

Killing only a wrapper (``gcloud``) orphans its Java child, which keeps the port; so every child
gets a new session and is stopped with ``killpg``. Readiness is polled, never assumed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path


def http_ready(url: str, expect: Callable[[int, bytes], bool] | None = None) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                body = resp.read()
                return expect(resp.status, body) if expect else resp.status < 500
        except urllib.error.HTTPError as exc:  # the server answered: it is up, even if it dislikes GET /
            return expect(exc.code, b"") if expect else exc.code < 500
        except Exception:
            return False

    return check


# Sets the parent-death signal, then execs the real command (PR_SET_PDEATHSIG survives exec, and
# the emulator launcher execs java). Done in a launcher rather than a preexec_fn: a preexec_fn
# runs Python in the forked child of a multi-threaded parent (gRPC servers in tests), where
# gRPC's fork handlers abort it.
_PDEATHSIG_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)\n"
    "except OSError:\n"
    "    pass\n"
    "if os.getppid() == int(sys.argv[1]):\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def with_parent_death_signal(argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped so the process gets SIGTERM when this process dies (Linux), so a killed
    test run or CI job never leaves emulators holding ports."""
    return [sys.executable, "-S", "-c", _PDEATHSIG_LAUNCHER, str(os.getpid()), *argv]


class Child:
    """One managed process with its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        die_with_parent: bool = True,
    ):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        argv = with_parent_death_signal(self.argv) if self.die_with_parent else self.argv
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd, start_new_session=True
        )
        log.close()
        return self

    def wait_ready(self, check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}; see {self.log_path}:\n{self.tail()}"
                )
            if check():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout:.0f}s; see {self.log_path}:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 5.0) -> None:
        stop_all([self], grace)

    def _signal_group(self, signum: int) -> None:
        """Signal this child's own process group; never one that could include the caller."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the child leads its own group
        if pgid == os.getpgrp():
            raise RuntimeError(f"{self.name} shares this process's group; refusing to signal it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signum)


def stop_all(children: Sequence[Child], grace: float = 5.0) -> None:
    """SIGTERM every child's group at once, then SIGKILL whatever outlives ``grace``: stopping a
    stack of nine processes costs one grace period at most, not nine."""
    running = [c for c in children if c.proc is not None and c.proc.poll() is None]
    for child in running:
        child._signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in running:
        assert child.proc is not None
        try:
            child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child._signal_group(signal.SIGKILL)
            child.proc.wait(timeout=grace)
