"""How long a test waits for a condition before it gives up.

Every wait in the suite is on a condition, polled, and ends as soon as the condition holds; the
ceiling only decides how long a broken run takes to be reported. It is set for a machine ten
times slower than the one the expectation was measured on, so a loaded CI machine never turns a
slow pass into a failure. No test asserts on elapsed wall-clock time: benchmarks live in bench/.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

SLOWDOWN = 10.0

T = TypeVar("T")


def ceiling(expected_seconds: float) -> float:
    """The most a wait that takes ``expected_seconds`` on a quiet machine may take."""
    return expected_seconds * SLOWDOWN


# The longest pause between two polls. A condition is most often read over the network (the
# Kubernetes API, the ledger in GCS, a kubectl process), and the suite is CPU-bound: polling a
# long wait fifty times a second cost the real plane's API server more CPU than the tests' own
# work. So the pause doubles from ``interval`` up to this, and a wait ends at most this much after
# its condition holds.
MAX_INTERVAL = 0.25


def wait_until(
    condition: Callable[[], T | None],
    expected_seconds: float,
    *,
    what: str,
    interval: float = 0.02,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that: at once, then after
    ``interval``, each pause twice the last, up to ``MAX_INTERVAL`` (or ``interval`` when larger)."""
    deadline = time.monotonic() + ceiling(expected_seconds)
    pause, longest = interval, max(interval, MAX_INTERVAL)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {ceiling(expected_seconds):.0f}s")
        time.sleep(pause)
        pause = min(pause * 2, longest)
