"""The head's held failed exit, run by a real bash with a stand-in ``python3`` on PATH.

The hold closes the preemption race (docs/simulator.md): it must hold only a failed exit, pass
SIGTERM to the program at once, and never keep a pod that is being stopped.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rlpipe.core.commands import HOLD_MARK, SCRIPT_NAME, held_exit
from tests.harness.patience import ceiling

FAKE_PYTHON = """#!/bin/bash
# Stand-in for `python3 -m <module> "$@"`: behaves as FAKE_MODE says.
echo "args: $*" > "$FAKE_DIR/args"
case "$FAKE_MODE" in
  exit:*) exit "${FAKE_MODE#exit:}" ;;
  serve) trap 'echo term > "$FAKE_DIR/got-term"; exit 143' TERM; echo up > "$FAKE_DIR/up"
         while true; do sleep 0.05; done ;;
esac
"""


# Stand-in for `sleep`: records how long it was asked to sleep, then really sleeps.
RECORDING_SLEEP = """#!/bin/bash
echo "$1" >> "$FAKE_DIR/sleeps"
exec /bin/sleep "$@"
"""


# Read by bash before the script (BASH_ENV), so the rendered script runs unchanged. Its DEBUG trap
# counts the commands from the program's `python3 -m ... &` and, STOP_AFTER commands later, sends
# the shell SIGTERM, whose trap then runs before that command: 0 is just before the program starts,
# 1 just before `$!` is stored, 2 just after. What `$program` and `$!` held then goes to
# $FAKE_DIR/stop-landed (so a test knows it hit the window); each `kill` the script makes goes to
# $FAKE_DIR/kills (a function wraps the builtin).
STOP_AFTER_INSTRUMENT = r"""
kill() { echo "$*" >> "$FAKE_DIR/kills"; builtin kill "$@"; }
_stop() { echo "program=[$program] started=[${!:-}]" > "$FAKE_DIR/stop-landed"; builtin kill -TERM $$; }
_countdown=
trap '
case "$BASH_COMMAND" in "python3 -m "*) _countdown=$STOP_AFTER ;; esac
if [ -n "$_countdown" ]; then
  if [ "$_countdown" = 0 ]; then _countdown=; _stop; else _countdown=$((_countdown - 1)); fi
fi' DEBUG
"""


def start(tmp_path: Path, mode: str, hold: int, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("python3", FAKE_PYTHON), ("sleep", RECORDING_SLEEP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = "set -eu\n" + "\n".join(held_exit("some.module", hold)) + "\n"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_MODE": mode,
        "FAKE_DIR": str(tmp_path),
        **(env or {}),
    }
    return subprocess.Popen(
        ["/bin/bash", "-c", script, SCRIPT_NAME, "--flag", "a b"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so a test can end a stand-in left running
        preexec_fn=_signals_as_in_a_pod,
    )


def _signals_as_in_a_pod() -> None:
    """A pod's shell starts with SIGINT at its default. A test runner started as a background job
    inherits SIGINT ignored, and bash cannot trap a signal ignored at its entry, so the INT case
    would wait out the whole hold for a reason that is the launcher's, not the script's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def end_group(proc: subprocess.Popen[str]) -> None:
    """Kill whatever of the script's process group still runs (a program a broken script never stopped)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def wait_for(path: Path, timeout: float = ceiling(10)) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_a_failed_exit_is_held_then_passed_on(tmp_path: Path) -> None:
    proc = start(tmp_path, "exit:3", hold=1)
    out, _ = proc.communicate(timeout=ceiling(30))
    assert proc.returncode == 3
    assert f"{HOLD_MARK} the program exited 3; holding this exit 1s" in out
    assert (tmp_path / "sleeps").read_text() == "1\n"  # the hold slept its whole length
    assert (tmp_path / "args").read_text() == "args: -m some.module --flag a b\n"  # "$@" intact


def test_a_success_is_never_held(tmp_path: Path) -> None:
    proc = start(tmp_path, "exit:0", hold=600)
    out, _ = proc.communicate(timeout=ceiling(30))  # a held success would outlast this
    assert proc.returncode == 0 and HOLD_MARK not in out


def test_sigterm_reaches_the_program_and_skips_the_hold(tmp_path: Path) -> None:
    proc = start(tmp_path, "serve", hold=600)
    wait_for(tmp_path / "up")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=ceiling(30))
    assert (tmp_path / "got-term").exists()
    assert proc.returncode == 143 and HOLD_MARK not in out


@pytest.mark.parametrize(
    ("stop_after", "landed"),
    [
        pytest.param(0, r"program=\[\] started=\[\]", id="before-the-start"),
        pytest.param(1, r"program=\[\] started=\[(\d+)\]", id="after-the-start-before-the-pid"),
        pytest.param(2, r"program=\[(\d+)\] started=\[\1\]", id="after-the-pid"),
    ],
)
def test_a_stop_around_the_programs_start_reaches_it_once(
    tmp_path: Path, stop_after: int, landed: str
) -> None:
    """The window CI met under load: SIGTERM handled before `program=$!` (just before the program
    starts, or after it started but before its pid is stored) found no pid to signal, and the
    script then waited for a program nobody had stopped. Here the stop lands there every time; and
    once the pid is known, the stop is passed on by the trap alone, not a second time."""
    instrument = tmp_path / "stop-after.sh"
    instrument.write_text(STOP_AFTER_INSTRUMENT)
    env = {"BASH_ENV": str(instrument), "STOP_AFTER": str(stop_after)}
    proc = start(tmp_path, "serve", hold=600, env=env)
    try:
        out, _ = proc.communicate(timeout=ceiling(3))  # a program never stopped serves forever
    except subprocess.TimeoutExpired:
        pytest.fail("the stop never reached the program: the script still waits for it")
    finally:
        end_group(proc)
    assert re.fullmatch(landed, (tmp_path / "stop-landed").read_text().strip())  # the window was hit
    assert proc.returncode == 143 and HOLD_MARK not in out  # the program's own end by SIGTERM
    kills = (tmp_path / "kills").read_text().splitlines()
    assert len([k for k in kills if re.fullmatch(r"-TERM \d+( \d+)*", k)]) == 1, kills


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_during_the_hold_ends_it_with_the_programs_code(tmp_path: Path, signum: int) -> None:
    proc = start(tmp_path, "exit:1", hold=600)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(HOLD_MARK), line
    proc.send_signal(signum)
    proc.communicate(timeout=ceiling(30))  # a hold that ignored the signal would run for 600 s
    assert proc.returncode == 1


def test_a_stop_that_lands_before_the_wait_blocks_still_ends_the_hold_in_seconds(tmp_path: Path) -> None:
    """The race CI met once: the signal arrives while the hold is between commands, so its trap is
    pending when `wait` blocks. Signals sent at many points of the hold's first moments; each stop
    must end it well before the hold's 600 s."""
    for delay in (0.0, 0.001, 0.003, 0.01, 0.03):
        proc = start(tmp_path, "exit:1", hold=600)
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(HOLD_MARK)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=ceiling(10))
        assert proc.returncode == 1
