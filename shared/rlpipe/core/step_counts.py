"""How many checkpoints and evaluations a run makes, counted without listing them, and the
ceilings every derived count stays under.

Why counted: a request once asked for ``num_epoch: 1000000000000`` with ``checkpoint_period: 1``,
and ``validate`` built the checkpoint schedule as a list until it died with ``MemoryError``;
another stored an 82-bit final step. Counts are arithmetic on the numbers (``checkpoint_count``),
a schedule is built only up to what is asked of it (``checkpoint_schedule(last=...)``), and
``core.steps`` refuses a request beyond a ceiling, naming the field, before anything is built.
"""

from __future__ import annotations

from typing import Any

# A million optimizer steps is training.num_batches' own ceiling at one iteration and one epoch;
# at one step a second it is eleven days of training. A plan's schedules stay below 100,000 entries.
MAX_TRAIN_STEPS = 1_000_000
MAX_CHECKPOINTS = 100_000
MAX_EVALUATIONS = 100_000


def checkpoint_count(final: int, period: int) -> int:
    """How many checkpoints train_rl commits up to ``final``: one per period, and the final save."""
    return 0 if final < 1 else final // period + (1 if final % period else 0)


def checkpoint_schedule(final: int, period: int, *, last: int | None = None) -> list[int]:
    """The committed steps (only the ``last`` ones when given): multiples of ``period``, then the
    forced final save. Built from the end, so ``last`` bounds the work, not ``final``."""
    count = checkpoint_count(final, period)
    keep = count if last is None else max(0, min(last, count))
    steps = [min(final, period * (i + 1)) for i in range(count - keep, count)]
    return steps


def shown(value: Any) -> str:
    """``repr`` of a value, short: a 1,600-bit integer is named by its size, not printed."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit number"
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"
