"""The ``rlpipe`` console script's first code: nothing but the guard around everything else.

Why: Ctrl-C in the first moments of a command (``make demo`` within 1 to 3 s, ``rlpipe plan``
within 0.2 s) landed in the imports of ``cli.main`` and of the command's modules, which ``main``'s
own handling did not cover yet, and printed a traceback. Here the import of ``main`` itself is
inside the guard, so from the moment the interpreter runs rlpipe's code an interrupt ends with one
line and 130 (128 + SIGINT, what a shell reports for Ctrl-C). Before that moment (the
interpreter's own start-up) SIGINT ends the process as the kernel's default does, silently.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130


def run() -> int:
    """Import and run ``cli.main.main``; an interrupt anywhere in it ends with one line."""
    try:
        from rlpipe.cli.main import main

        return main()
    except KeyboardInterrupt:
        interrupted()
        return INTERRUPTED


def interrupted(command: str | None = None) -> None:
    """The one line an interrupt ends with (a second Ctrl-C while it prints changes nothing). On a
    terminal it starts a line of its own: the command may have been part-way through one."""
    try:
        lead = "\n" if sys.stderr.isatty() else ""
        print(f"{lead}rlpipe{' ' + command if command else ''}: interrupted", file=sys.stderr, flush=True)
    except (KeyboardInterrupt, OSError):
        pass
