"""Which program a workload runs, read from its container exactly as rendered.

The simulator must not be told what a workload is (that would trust the pipeline's labels);
it reads the container the way the kubelet would run it: an exec-form ``python3 -m <module>``
with arguments, or ``/bin/bash -c <script> <name> <args...>`` whose script ends in
``exec python3 -m <module> "$@"``. The arguments are the program's own, so every path the
simulated program uses comes from what the pipeline actually passed.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlpipe.local.simulator.maxtext import MODULES, Arguments

_SHELLS = ("bash", "sh", "dash", "zsh")
# The script hands its positional parameters to the module: `exec python3 -m mod "$@"`.
_SCRIPT_MODULE = re.compile(r'(?:^|[\s;&|])(?:exec\s+)?python3?\s+-m\s+([A-Za-z_][\w.]*)\s+"\$@"')
# The tutorial's index-0 gate: every other completion index exits 0 without running the stage.
_INDEX_GATE = re.compile(r"JOB_COMPLETION_INDEX[^\n]*\n(?:[^\n]*\n){0,3}?\s*exit\s+0", re.MULTILINE)


@dataclass(frozen=True)
class Program:
    """One container's program: module, stage, arguments, and whether only index 0 runs it."""

    container: str
    image: str
    module: str
    args: Arguments
    index_gated: bool = False

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
            return Program(
                container.get("name", ""), container.get("image", ""), module, Arguments.parse(rest), gated
            )
    return None


def parse_argv(argv: list[str]) -> tuple[str, list[str], bool] | None:
    """(module, its arguments, index-gated) for the two rendered shapes, else None."""
    if len(argv) >= 3 and posixpath.basename(argv[0]).startswith("python") and argv[1] == "-m":
        return argv[2], argv[3:], False
    if len(argv) >= 3 and posixpath.basename(argv[0]) in _SHELLS and argv[1] == "-c":
        script = argv[2]
        matches = _SCRIPT_MODULE.findall(script)
        if not matches:
            return None
        positional = argv[4:]  # argv[3] is $0, the script's name
        return matches[-1], positional, bool(_INDEX_GATE.search(script))
    return None
