"""Time for the engine: ``sys.now``, ``sys.sleep``, retry backoff and callback timeouts.

Injectable so tests never wait: the tests' ``FakeClock`` (``tests/harness/workflow_clock.py``) advances instantly and records
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

POLL_SECONDS = 0.01


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
                condition.wait(min(remaining, POLL_SECONDS * 5))
