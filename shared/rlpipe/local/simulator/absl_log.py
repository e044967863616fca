"""The two ways the MaxText programs' log lines come out of their pods, as each program prints them.

Every MaxText line goes through absl logging (``maxtext/utils/max_logging.py``). Under
``absl.app.run`` (train_rl, to_huggingface) absl's handler gives it absl's prefix
(:func:`absl_line`); ``to_maxtext`` runs its ``main`` outside ``absl.app`` (``to_maxtext.py:1114-1159``),
and its lines come out in Python logging's default format, ``INFO:absl:<message>``
(:func:`logging_line`), as the programs tier's real conversion prints them.

Its own module because all three programs (``rlpipe.local.simulator.maxtext``, ``.train_rl``)
print through it, and the pipeline reads their lines by it: every one is described, with its
source, in ``tests/fixtures/maxtext_facts.yaml``.
"""

from __future__ import annotations

import time

from rlpipe.local.simulator.program import ProgramContext

ABSL_THREAD = 140318812  # any thread id; absl prints it right-aligned in 5 columns
LEVEL_NAMES = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}


def absl_line(ctx: ProgramContext, level: str, source: str, message: str) -> str:
    """``message`` as absl prints it: ``W0102 15:04:05.123456 140318812 train_rl.py:785] ...``."""
    now = ctx.now()
    t = time.gmtime(now)
    stamp = f"{t.tm_mon:02d}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{int(now % 1 * 1e6):06d}"
    return f"{level}{stamp} {ABSL_THREAD:5d} {source}] {message}"


def logging_line(level: str, message: str, logger: str = "absl") -> str:
    """``message`` in Python logging's default format (``logging.BASIC_FORMAT``):
    ``INFO:absl:Conversion complete. ...``; ``level`` is absl's letter (I, W, E, F)."""
    return f"{LEVEL_NAMES[level]}:{logger}:{message}"
