"""``rlpipe completion bash|zsh``: shell completion for every command, option and choice.

Generated from the CLI's own argparse parser by ``shtab`` (the completion generator for argparse),
so a new command or option completes the moment it exists, and nothing is kept by hand:

    rlpipe completion bash > ~/.local/share/bash-completion/completions/rlpipe
    rlpipe completion zsh > "${fpath[1]}/_rlpipe"
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

SHELLS = ("bash", "zsh")
# Positional arguments that name runs: completed from `rlpipe list` (the run ids of the deployment
# or local stack the shell's environment points at), the first column of its table.
RUN_ARGUMENTS = ("run", "runs")
_LIST_RUNS = "rlpipe list 2>/dev/null | awk 'NR > 1 {print $1}'"
PREAMBLE = {
    # shtab calls a bash completer with the word being completed and takes the lines it prints.
    "bash": f'_rlpipe_runs() {{\n  compgen -W "$({_LIST_RUNS})" -- "$1"\n}}\n',
    "zsh": f'_rlpipe_runs() {{\n  local -a runs\n  runs=(${{(f)"$({_LIST_RUNS})"}})\n  compadd -a runs\n}}\n',
}
RUN_COMPLETER = {"bash": "_rlpipe_runs", "zsh": "_rlpipe_runs"}


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` of the whole ``rlpipe`` parser, run ids included."""
    import shtab

    _complete_runs(parser)
    return str(shtab.complete(parser, shell=shell, preamble=PREAMBLE.get(shell, "")))


def _complete_runs(parser: argparse.ArgumentParser) -> None:
    """Mark every positional argument that names a run, in every subcommand, for run-id completion."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _complete_runs(sub)
        elif not action.option_strings and action.dest in RUN_ARGUMENTS:
            action.complete = RUN_COMPLETER  # type: ignore[attr-defined]  # shtab's own attribute


def register(subparsers: Any, *, parser: Callable[[], argparse.ArgumentParser]) -> None:
    """``parser`` builds the whole CLI parser (the script covers every command, this one too)."""
    p = subparsers.add_parser("completion", help="print a bash or zsh completion script for rlpipe")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=lambda args: print(script(parser(), args.shell), end="") or 0)
