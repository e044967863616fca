"""Ctrl-C at any moment of a command ends with one line and exit 130, never a traceback.

The review found a traceback when Ctrl-C came in the first moments (``rlpipe plan`` within 0.2 s):
the imports of ``cli.main`` and of every command's module ran outside the interrupt handling. The
console script now enters through ``cli.entry``, whose first statement is the guard.

Ctrl-C is typed into a pseudo-terminal's process group, as a terminal sends it, at named moments
rather than after a delay: the first import of a module on the command's path, from the guard's
own first import to the command's last lazy one (``tests/harness/interrupt_on_import``). A delay
races the command, and lands elsewhere on a machine of another speed; an import is the same moment
on every machine. What the interpreter does before it runs any of rlpipe's code is Python's, not
rlpipe's, and docs/cli.md says so.
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
CTRL_C_ON_IMPORT = ROOT / "tests" / "harness" / "interrupt_on_import"
# From the guard's first import, through cli.main's, to each command's own lazy imports (found
# with ``python -X importtime``); each must be imported by the command, which the test checks.
ON_THE_WAY = ("rlpipe.cli.main", "yaml", "rlpipe.cli.lookup", "rlpipe.cli.plan", "rlpipe.cli.teams_command")
COMMANDS = {
    "plan": (
        ["plan", "examples/gemma4-26b-v6e-32.yaml"],
        ("rlpipe.core.plan", "rlpipe.control.lifecycle.user_files"),
    ),
    # long YAML: the last import comes after the manifests are built
    "render": (
        ["render", "examples/gemma4-26b-v6e-32.yaml"],
        ("rlpipe.core.manifests", "rlpipe.control.lifecycle.publishing"),
    ),
}
MOMENTS = [(name, module) for name, (_, own) in COMMANDS.items() for module in (*ON_THE_WAY, *own)]


def _typed(argv: list[str], env: dict[str, str] | None = None) -> tuple[int | None, int | None, str]:
    """Run ``argv`` on a pseudo-terminal with ``env`` added to the environment; → (exit code,
    killing signal, what the terminal showed)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own, the terminal its controlling one
        # A shell runs a command in the foreground with SIGINT's default action; a suite started in
        # the background (``nohup … &``) passes SIGINT ignored down to every process it starts.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.chdir(ROOT)
        os.execve(argv[0], argv, {**os.environ, **(env or {})})
    out = b""
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
    text = out.decode(errors="replace").replace("\r", "")
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status), text
    return os.WEXITSTATUS(status), None, text


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
@pytest.mark.parametrize(("command", "module"), MOMENTS, ids=[f"{c} at import {m}" for c, m in MOMENTS])
def test_ctrl_c_at_any_moment_ends_with_one_line_and_130(command: str, module: str, tmp_path: Path) -> None:
    argv, _ = COMMANDS[command]
    code, killed, text = _typed([str(RLPIPE), *argv])
    assert (code, killed) == (0, None), text
    whole = _lines(text)
    came = tmp_path / "moments"
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(CTRL_C_ON_IMPORT), os.environ.get("PYTHONPATH")) if p),
        "RLPIPE_TEST_INTERRUPT_ON": module,
        "RLPIPE_TEST_INTERRUPT_LOG": str(came),
    }
    outcome = _outcome(*_typed([str(RLPIPE), *argv], env), argv[0], whole)
    assert came.read_text().split() == [module], "the moment never came: the command does not import it"
    assert outcome == "interrupted", text


def test_the_console_script_enters_through_the_guard() -> None:
    """The script pip writes imports ``cli.entry.run``: nothing of rlpipe's runs before the guard."""
    script = shutil.which("rlpipe", path=str(RLPIPE.parent))
    assert script is not None
    assert "from rlpipe.cli.entry import run" in Path(script).read_text()
    entry = (ROOT / "shared/rlpipe/cli/entry.py").read_text()
    body = entry.split("def run() -> int:", 1)[1]
    assert body.index("try:") < body.index("from rlpipe.cli.main import main")
