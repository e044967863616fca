"""Ctrl-C at any moment of a command ends with one line and exit 130, never a traceback.

The review found a traceback when Ctrl-C came in the first moments (``rlpipe plan`` within 0.2 s):
the imports of ``cli.main`` and of every command's module ran outside the interrupt handling. The
console script now enters through ``cli.entry``, whose first statement is the guard.

Ctrl-C is typed into a pseudo-terminal, as a person types it: the terminal sends SIGINT to the
command's process group. The moments are fractions of the same command's own uninterrupted
duration, measured first in this test, so they land in the same phases on a quiet or a busy
machine (from the interpreter's start to the command's last line). What the interpreter does
before it runs any of rlpipe's code is Python's, not rlpipe's, and docs/cli.md says so: SIGINT
then ends the process silently, or, inside Python's own start-up (``site``), with Python's own
traceback, which names no module of rlpipe's.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.harness.patience import ceiling

RLPIPE = Path(sys.executable).with_name("rlpipe")
COMMANDS = [
    ["plan", "examples/gemma4-26b-v6e-32.yaml"],  # text
    ["render", "examples/gemma4-26b-v6e-32.yaml"],  # long YAML: a Ctrl-C may land mid-line
]
FRACTIONS = (0.0, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)


def _typed(argv: list[str], delay: float | None) -> tuple[int | None, int | None, str, float]:
    """Run ``argv`` on a pseudo-terminal, type Ctrl-C after ``delay`` seconds (None: never);
    → (exit code, killing signal, what the terminal showed, seconds it took)."""
    started = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own, the terminal its controlling one
        os.chdir(ROOT)
        os.execv(argv[0], argv)
    out = b""
    if delay is not None:
        time.sleep(delay)
        os.write(fd, b"\x03")
    deadline = time.monotonic() + ceiling(30)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    seconds = time.monotonic() - started
    text = out.decode(errors="replace").replace("\r", "")
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status), text, seconds
    return os.WEXITSTATUS(status), None, text, seconds


def _lines(text: str) -> list[str]:
    """The lines printed, without the terminal's own echo of the keystroke (``^C``)."""
    return [line for line in text.replace("^C", "").split("\n") if line.strip()]


def _outcome(code: int | None, killed: int | None, text: str, done: str, whole: list[str]) -> str:
    """Which of the allowed endings this is (``whole``: the lines of the uninterrupted run); fails
    on any other."""
    lines = _lines(text)
    if code == 130:  # whatever the command had printed by then, then the one line
        assert "Traceback" not in text, text
        assert lines[-1] in ("rlpipe: interrupted", f"rlpipe {done}: interrupted"), text
        printed = lines[:-1]  # a prefix of the whole output, its last line perhaps cut short
        if printed:
            assert printed[:-1] == whole[: len(printed) - 1], text
            assert whole[len(printed) - 1].startswith(printed[-1]), text
        return "interrupted"
    if code == 0 and lines == whole:
        return "finished first"  # Ctrl-C came after the end
    if killed == signal.SIGINT and lines in ([], whole):
        # Before Python installs its handler, or after it put the default back on the way out.
        return "outside Python's handling"
    # Inside the interpreter's own start-up: Python's traceback, naming none of rlpipe's modules.
    assert "Traceback" in text and "KeyboardInterrupt" in text, (code, killed, text)
    assert not re.search(r'File "[^"]*/rlpipe/', text), text
    assert "rlpipe.cli" not in text.split("Traceback", 1)[1].replace(
        "from rlpipe.cli.entry import run", ""
    ), text
    return "python start-up"


@pytest.mark.skipif(not RLPIPE.exists(), reason="the console script is installed by `make install`")
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_ctrl_c_at_any_moment_ends_with_one_line_and_130(command: list[str]) -> None:
    code, killed, text, seconds = _typed([str(RLPIPE), *command], None)
    assert (code, killed) == (0, None), text
    whole = _lines(text)
    seen = [_outcome(*_typed([str(RLPIPE), *command], f * seconds)[:3], command[0], whole) for f in FRACTIONS]
    # Between a tenth and half of the way, rlpipe's own code is running: the guard answers (how
    # many moments land there depends on the machine; that one does is what shows the guard).
    assert "interrupted" in seen, seen


def test_the_console_script_enters_through_the_guard() -> None:
    """The script pip writes imports ``cli.entry.run``: nothing of rlpipe's runs before the guard."""
    script = shutil.which("rlpipe", path=str(RLPIPE.parent))
    assert script is not None
    assert "from rlpipe.cli.entry import run" in Path(script).read_text()
    entry = (ROOT / "shared/rlpipe/cli/entry.py").read_text()
    body = entry.split("def run() -> int:", 1)[1]
    assert body.index("try:") < body.index("from rlpipe.cli.main import main")
