"""Simulated time: every duration is in simulated seconds, scaled to real seconds once.

A GRPO run takes hours and a conversion tens of minutes; a demo should take seconds and a
benchmark no time at all. Durations keep their real proportions (startup, per step, checkpoint
saves) so ordering effects (a callback racing a TTL, a watch racing a checkpoint) still show.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

Clock = Callable[[], float]
Sleep = Callable[[float], None]


class WorkloadGone(Exception):
    """The workload was deleted (or the simulator stopped): its simulation ends here."""


@dataclass(frozen=True)
class Timing:
    """Simulated seconds for each phase; ``scale`` real seconds per simulated second."""

    scale: float = 0.002
    admission_delay: float = 30.0  # Kueue: queued (suspended) before admission
    schedule_delay: float = 2.0  # Pending before the scheduler binds a pod
    image_pull: float = 20.0  # Pulling → Pulled
    container_start: float = 1.0  # Created → Started
    convert: float = 900.0  # to_maxtext from start to commit
    export: float = 600.0  # to_huggingface from start to index
    train_startup: float = 180.0  # Pathways connect, load, first compile, pre-RL eval
    step: float = 30.0  # one GRPO step
    checkpoint_save: float = 20.0  # one Orbax save
    pipe_timeout: float = 60.0  # head gives up on a lost worker (ABSL flag overrides it)
    sigterm_exit: float = 3.0  # a container's exit after SIGTERM (capped by the pod's grace period)
    pod_backoff: float = 10.0  # Job controller's first pod-recreation backoff
    ttl: bool = True  # honour ttlSecondsAfterFinished (scaled like everything else)
    poll: float = 0.05  # real seconds between checks while parked (never scaled)

    def real(self, simulated: float) -> float:
        return max(0.0, simulated * self.scale)

    def duration(self, name: str) -> float:
        value = getattr(self, name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise KeyError(f"no duration named {name!r}")
        return float(value)

    @classmethod
    def zero(cls) -> Timing:
        """No waiting at all (benchmarks); finished workloads are never TTL-deleted."""
        return cls(scale=0.0, ttl=False, poll=0.01)

    @classmethod
    def fast(cls, scale: float = 0.0002) -> Timing:
        """Tests: a whole three-stage run in well under a second of simulated waiting."""
        return cls(scale=scale, ttl=False, poll=0.01)


class Pacer:
    """Sleeps in simulated seconds and wakes early when the workload is cancelled.

    ``sleep`` may be injected (a fake clock in tests); cancellation is then checked after
    each sleep instead of interrupting it.
    """

    def __init__(self, timing: Timing, cancelled: threading.Event, *, sleep: Sleep | None = None) -> None:
        self.timing = timing
        self.cancelled = cancelled
        self._sleep = sleep

    def check(self) -> None:
        if self.cancelled.is_set():
            raise WorkloadGone

    def pause(self, simulated: float) -> None:
        self.check()
        seconds = self.timing.real(simulated)
        if seconds > 0:
            if self._sleep is not None:
                self._sleep(seconds)
            elif self.cancelled.wait(seconds):
                raise WorkloadGone
        self.check()

    def forever(self) -> NoReturn:
        """Park until cancelled (a stall, an image that never pulls): ``check`` raises then."""
        while True:
            if self._sleep is not None:
                self._sleep(self.timing.poll)
            elif self.cancelled.wait(self.timing.poll):
                pass
            self.check()


def wall_clock() -> float:
    return time.time()
