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


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` of the whole ``rlpipe`` parser."""
    import shtab

    return str(shtab.complete(parser, shell=shell))


def register(subparsers: Any, *, parser: Callable[[], argparse.ArgumentParser]) -> None:
    """``parser`` builds the whole CLI parser (the script covers every command, this one too)."""
    p = subparsers.add_parser("completion", help="print a bash or zsh completion script for rlpipe")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=lambda args: print(script(parser(), args.shell), end="") or 0)
