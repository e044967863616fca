"""Named points in the control plane where a test can hold one caller while another runs.

Why: the races that matter (a lease lapsing while its holder still starts an execution, a cancel
landing during a launch, two executions planning one run) happen between two network calls. A
test that only sleeps finds them by luck; a test that parks a thread at a named point and
releases it after the competing call finds them every time, in both orders.

In production no hook is installed and ``point`` is one dict lookup.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_hooks: dict[str, Callable[[], None]] = {}


def point(name: str) -> None:
    """Mark a place between two side effects; runs the hook a test installed there, if any."""
    hook = _hooks.get(name)
    if hook is not None:
        hook()


@contextmanager
def hooked(name: str, hook: Callable[[], None]) -> Iterator[None]:
    """Install ``hook`` at ``name`` for the duration of the block."""
    _hooks[name] = hook
    try:
        yield
    finally:
        _hooks.pop(name, None)


class Barrier:
    """Park the first caller that reaches a point until the test releases it.

    ``reached`` is set when a caller arrives; ``release()`` lets it go on. Later callers pass
    straight through, so retries inside the held caller do not deadlock the test.
    """

    def __init__(self, timeout: float = 30.0) -> None:
        self.reached = threading.Event()
        self._go = threading.Event()
        self._lock = threading.Lock()
        self._taken = False
        self.timeout = timeout

    def __call__(self) -> None:
        with self._lock:
            if self._taken:
                return
            self._taken = True
        self.reached.set()
        if not self._go.wait(self.timeout):
            raise TimeoutError("interleave barrier was never released")

    def release(self) -> None:
        self._go.set()

    def wait_reached(self) -> None:
        if not self.reached.wait(self.timeout):
            raise TimeoutError("no caller reached the interleave point")
