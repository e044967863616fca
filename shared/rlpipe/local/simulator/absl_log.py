"""absl's prefix on every line the MaxText programs log, as their pods print it.

Its own module because all three programs (``rlpipe.local.simulator.maxtext``, ``.train_rl``)
print through it, and the pipeline reads their lines by it: every one is described, with its
source, in ``tests/fixtures/maxtext_facts.yaml``.
"""

from __future__ import annotations

import time

from rlpipe.local.simulator.program import ProgramContext

ABSL_THREAD = 140318812  # any thread id; absl prints it right-aligned in 5 columns


def absl_line(ctx: ProgramContext, level: str, source: str, message: str) -> str:
    """``message`` as absl prints it: ``W0102 15:04:05.123456 140318812 train_rl.py:785] ...``."""
    now = ctx.now()
    t = time.gmtime(now)
    stamp = f"{t.tm_mon:02d}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{int(now % 1 * 1e6):06d}"
    return f"{level}{stamp} {ABSL_THREAD:5d} {source}] {message}"
