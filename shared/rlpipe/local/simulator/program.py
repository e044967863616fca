"""Which program a workload runs, read from its container exactly as rendered, with its arguments.

The simulator must not be told what a workload is (that would trust the pipeline's labels);
it reads the container the way the kubelet would run it: an exec-form ``python3 -m <module>``
with arguments, or ``/bin/bash -c <script> <name> <args...>`` whose script ends in
``exec python3 -m <module> "$@"``. The arguments are the program's own, so every path the
simulated program uses comes from what the pipeline actually passed.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

PUBLISHER = "rlpipe.publisher.program"  # shipped as `python3 -c <source>` (core/manifests/publish.py)
PUBLISHER_MARK = "# rlpipe-publisher"
MODULES = {
    "maxtext.checkpoint_conversion.to_maxtext": "convert",
    "maxtext.trainers.post_train.rl.train_rl": "train",
    "maxtext.checkpoint_conversion.to_huggingface": "export",
    PUBLISHER: "publish",
}


class ProgramExit(Exception):
    """The program ended with a non-zero exit code (``reason`` as the kubelet reports it)."""

    def __init__(self, code: int, reason: str = "Error", message: str = "") -> None:
        super().__init__(f"exit code {code} ({reason}){': ' + message if message else ''}")
        self.code = code
        self.reason = reason
        self.message = message


class ProgramContext(Protocol):
    """What a simulated program may do: the container's side of the world."""

    export_shards: int

    def now(self) -> float: ...
    def log(self, line: str) -> None: ...
    def pause(self, simulated_seconds: float) -> None: ...
    def duration(self, name: str) -> float: ...
    def write(self, uri: str, data: bytes | str) -> None:
        """To GCS (a ``gs://`` URI) or to the pod's own disk (an absolute container path)."""

    def local_path(self, path: str) -> Path:
        """Where a container path on the pod's own disk lies on this machine."""

    def claim(self, uri: str) -> None:
        """A script step run for real is about to write this object for this workload."""

    def list(self, prefix_uri: str) -> list[str]: ...
    def exists_under(self, prefix_uri: str) -> bool: ...
    def exists(self, uri: str) -> bool: ...
    def read(self, uri: str) -> bytes | None: ...
    def delete(self, uri: str) -> None: ...
    def note(self, kind: str, detail: str) -> None: ...
    def hook(self, point: str, step: int = 0, *, saving: bool = False) -> None:
        """A place where an injected fault may strike: "start", "peak" (the memory high-water
        mark), "step" (a training step begins) and "save" (mid-checkpoint)."""


def run_source(
    log: Callable[[str], None], source: str, argv: list[str], env: dict[str, str], timeout: float, what: str
) -> int:
    """``python3 -c <source> <argv>`` in a subprocess, as the container runs its program, its
    output into the pod's log; → its exit code. Longer than ``timeout`` on the local stack is
    stuck, and fails as a program that hangs until its deadline."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", source, *argv], env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise ProgramExit(1, "Error", f"{what} ran longer than {timeout:g} s") from None
    for line in (done.stdout + done.stderr).splitlines():
        log(line)
    return done.returncode


@dataclass(frozen=True)
class Arguments:
    """``key=value`` arguments (MaxText config overrides) and ``--flag[=value]`` flags."""

    values: Mapping[str, str]
    flags: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)  # the container's plain env values
    steps: tuple[str, ...] = ()  # rlpipe script steps around the program: "pin", "fetch", "manifest"
    # the `python3 -c` source of each script step that is run for real ("manifest"), from the script
    step_programs: Mapping[str, str] = field(default_factory=dict)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def require(self, key: str) -> str:
        value = self.values.get(key)
        if not value:
            raise ProgramExit(1, message=f"{key} is required but was not passed")
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        raw = self.values.get(key)
        if raw is None:
            if default is None:
                raise ProgramExit(1, message=f"{key} is required but was not passed")
            return default
        try:
            return int(raw)
        except ValueError:
            raise ProgramExit(1, message=f"{key}={raw!r} is not an integer") from None

    def number(self, key: str, default: str) -> float:
        raw = self.values.get(key, default)
        try:
            return float(raw)
        except ValueError:
            raise ProgramExit(1, message=f"{key}={raw!r} is not a number") from None

    def boolean(self, key: str, default: bool) -> bool:
        raw = self.values.get(key)
        return default if raw is None else raw.strip().lower() in ("true", "1", "yes")

    @classmethod
    def parse(cls, argv: list[str]) -> Arguments:
        values: dict[str, str] = {}
        flags: dict[str, str] = {}
        for arg in argv:
            if arg.startswith("--"):
                name, sep, value = arg[2:].partition("=")
                flags[name] = value if sep else "true"
            elif "=" in arg:
                key, _, value = arg.partition("=")
                values[key] = value
        return cls(values, flags)


_SHELLS = ("bash", "sh", "dash", "zsh")
# The script hands its positional parameters to the module: `exec python3 -m mod "$@"`.
_SCRIPT_MODULE = re.compile(r'(?:^|[\s;&|])(?:exec\s+)?python3?\s+-m\s+([A-Za-z_][\w.]*)\s+"\$@"')
# The tutorial's index-0 gate: every other completion index exits 0 without running the stage.
_INDEX_GATE = re.compile(r"JOB_COMPLETION_INDEX[^\n]*\n(?:[^\n]*\n){0,3}?\s*exit\s+0", re.MULTILINE)


# rlpipe's own script steps around the program (core/pinning.py, core/staging.py,
# core/export_manifest.py), recognised by what they print.
_SCRIPT_STEPS = {
    "pin": "rlpipe-pin:",
    "fetch": "rlpipe-fetch:",
    "inputs": "rlpipe-inputs:",
    "manifest": "rlpipe-manifest:",
}
# The steps the simulator may run for real: their program's text is taken from the script. The
# manifest step always runs for real; fetch only where the pod's program does (``.real_programs``).
_REAL_STEPS = ("fetch", "manifest")
# A script that holds the program's failed exit (core/commands.held_exit), and for how long.
_EXIT_HOLD = re.compile(r"^hold_seconds=(\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Program:
    """One container's program: module, stage, arguments, and whether only index 0 runs it."""

    container: str
    image: str
    module: str
    args: Arguments
    index_gated: bool = False
    exit_hold: float = 0.0  # seconds the container holds the program's failed exit
    source: str = ""  # `python3 -c <source>`: the program's own text (the publisher runs it for real)
    argv: tuple[str, ...] = ()  # the program's arguments exactly as passed
    secret_env: tuple[tuple[str, str, str], ...] = ()  # (variable, Secret name, key) from secretKeyRef

    @property
    def stage(self) -> str | None:
        return MODULES.get(self.module)


def identify(pod_spec: Mapping[str, Any]) -> Program | None:
    """The first container that runs a Python module, or None (e.g. a Pathways worker)."""
    for container in pod_spec.get("containers") or []:
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        found = parse_argv(argv)
        if found is not None:
            module, rest, gated = found
            script = argv[2] if len(argv) > 2 and argv[1] == "-c" else ""
            env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
            steps = tuple(step for step, mark in _SCRIPT_STEPS.items() if mark in script)
            programs = script_programs(script, [s for s in steps if s in _REAL_STEPS])
            args = replace(Arguments.parse(rest), env=env, steps=steps, step_programs=programs)
            hold = _EXIT_HOLD.search(script)
            secrets = tuple(
                (e["name"], ref["name"], ref["key"])
                for e in container.get("env") or []
                if (ref := (e.get("valueFrom") or {}).get("secretKeyRef"))
            )
            return Program(
                container.get("name", ""),
                container.get("image", ""),
                module,
                args,
                gated,
                exit_hold=float(hold.group(1)) if hold else 0.0,
                source=script if module == PUBLISHER else "",
                argv=tuple(rest),
                secret_env=secrets,
            )
    return None


def script_programs(script: str, steps: list[str]) -> dict[str, str]:
    """The ``python3 -c <program>`` text of each of ``steps`` in a container script, read as bash
    reads its words (the script quotes each program with ``shlex.quote``)."""
    if not steps:
        return {}
    try:
        words = shlex.split(script)
    except ValueError:
        return {}
    found: dict[str, str] = {}
    for i, word in enumerate(words[:-2]):
        if posixpath.basename(word).startswith("python") and words[i + 1] == "-c":
            for step in steps:
                if _SCRIPT_STEPS[step] in words[i + 2]:
                    found[step] = words[i + 2]
    return found


def parse_argv(argv: list[str]) -> tuple[str, list[str], bool] | None:
    """(module, its arguments, index-gated) for the rendered shapes, else None."""
    if len(argv) >= 3 and posixpath.basename(argv[0]).startswith("python") and argv[1] == "-m":
        return argv[2], argv[3:], False
    if len(argv) >= 3 and posixpath.basename(argv[0]).startswith("python") and argv[1] == "-c":
        return (PUBLISHER, argv[3:], False) if argv[2].startswith(PUBLISHER_MARK) else None
    if len(argv) >= 3 and posixpath.basename(argv[0]) in _SHELLS and argv[1] == "-c":
        script = argv[2]
        matches = _SCRIPT_MODULE.findall(script)
        if not matches:
            return None
        positional = argv[4:]  # argv[3] is $0, the script's name
        return matches[-1], positional, bool(_INDEX_GATE.search(script))
    return None
