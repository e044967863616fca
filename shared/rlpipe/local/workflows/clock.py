"""Time for the engine: ``sys.now``, ``sys.sleep``, retry backoff and callback timeouts.

Injectable so tests never wait: ``FakeClock`` advances instantly and records
every sleep (to assert backoff delays), while ``RealClock`` really waits.  Both
honour cancellation, because an execution must stop during a sleep or an await
when it is cancelled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from .errors import ExecutionCancelled

_POLL_SECONDS = 0.01


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (``sys.now``)."""
        ...

    def sleep(self, seconds: float, cancel: threading.Event) -> None:
        """Wait; raise ``ExecutionCancelled`` as soon as ``cancel`` is set."""
        ...

    def wait_for(
        self,
        condition: threading.Condition,
        ready: Callable[[], bool],
        timeout: float,
        cancel: threading.Event,
    ) -> bool:
        """Wait until ``ready()`` (checked under ``condition``) or ``timeout``; ``False`` on timeout."""
        ...


class RealClock:
    """Wall-clock time."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float, cancel: threading.Event) -> None:
        if cancel.wait(max(0.0, seconds)):
            raise ExecutionCancelled()

    def wait_for(
        self,
        condition: threading.Condition,
        ready: Callable[[], bool],
        timeout: float,
        cancel: threading.Event,
    ) -> bool:
        deadline = time.monotonic() + timeout
        with condition:
            while True:
                if ready():
                    return True
                if cancel.is_set():
                    raise ExecutionCancelled()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                condition.wait(min(remaining, _POLL_SECONDS * 5))


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
                condition.wait(_POLL_SECONDS)
