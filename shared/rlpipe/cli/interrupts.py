"""How a command ends on Ctrl-C: one line and 130 (128 + SIGINT, what a shell reports for it).

Kept apart, with the standard library only, because the console script's guard
(``cli.entry``) must have it before it imports anything of rlpipe's, and ``cli.main`` answers
the same way once it runs.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130


def interrupted(command: str | None = None) -> None:
    """The one line an interrupt ends with (a second Ctrl-C while it prints changes nothing). On a
    terminal it starts a line of its own: the command may have been part-way through one."""
    try:
        lead = "\n" if sys.stderr.isatty() else ""
        print(f"{lead}rlpipe{' ' + command if command else ''}: interrupted", file=sys.stderr, flush=True)
    except (KeyboardInterrupt, OSError):
        pass
