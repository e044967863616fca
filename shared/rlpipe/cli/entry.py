"""The ``rlpipe`` console script's first code: nothing but the guard around everything else.

Why: Ctrl-C in the first moments of a command (``make demo`` within 1 to 3 s, ``rlpipe plan``
within 0.2 s) landed in the imports of ``cli.main`` and of the command's modules, which ``main``'s
own handling did not cover yet, and printed a traceback. Here the import of ``main`` itself is
inside the guard, so from the moment the interpreter runs rlpipe's code an interrupt ends with one
line and 130 (``cli.interrupts``). Before that moment (the interpreter's own start-up) SIGINT ends
the process as Python's start-up lets it (docs/cli.md).
"""

from __future__ import annotations

from rlpipe.cli.interrupts import INTERRUPTED, interrupted


def run() -> int:
    """Import and run ``cli.main.main``; an interrupt anywhere in it ends with one line."""
    try:
        from rlpipe.cli.main import main

        return main()
    except KeyboardInterrupt:
        interrupted()
        return INTERRUPTED
