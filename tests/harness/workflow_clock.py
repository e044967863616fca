"""The workflow engine's clock for tests (``rlpipe.local.workflows.clock.Clock``): time passes only
when the engine sleeps or waits, so a test of a 300 s await or a retry's backoff takes no real time
and orders its events, never races them. Why here and not beside ``RealClock``: only tests use it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rlpipe.local.workflows.clock import POLL_SECONDS
from rlpipe.local.workflows.errors import ExecutionCancelled


class FakeClock:
    """A clock that never really waits for time to pass.

    * ``sleep`` records the delay in ``sleeps`` and advances ``now`` instantly.
    * ``wait_for`` returns at once when the thing waited for is there.  Otherwise,
      with ``auto_advance_waits`` (the default) it jumps to the deadline and
      reports a timeout; without it, it blocks in real time until the thing
      arrives or a test calls ``advance`` past the deadline.
    """

    def __init__(self, start: float = 1_700_000_000.0, *, auto_advance_waits: bool = True) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.auto_advance_waits = auto_advance_waits
        self.sleeps: list[float] = []
        self.waits: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float, cancel: threading.Event) -> None:
        if cancel.is_set():
            raise ExecutionCancelled()
        with self._lock:
            self.sleeps.append(seconds)
            self._now += max(0.0, seconds)

    def wait_for(
        self,
        condition: threading.Condition,
        ready: Callable[[], bool],
        timeout: float,
        cancel: threading.Event,
    ) -> bool:
        with self._lock:
            self.waits.append(timeout)
            deadline = self._now + timeout
        with condition:
            while True:
                if ready():
                    return True
                if cancel.is_set():
                    raise ExecutionCancelled()
                if self.auto_advance_waits:
                    with self._lock:
                        self._now = max(self._now, deadline)
                    return False
                if self.now() >= deadline:
                    return False
                condition.wait(POLL_SECONDS)
