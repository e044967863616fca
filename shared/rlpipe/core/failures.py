"""The failure taxonomy (docs/design.md#failure-classes-and-retry-budgets): every failure has a class, and the class decides the retry.

The ``tag`` is what the workflow matches on in its retry predicate, so tags are stable strings,
never reworded. ``transient`` failures are first retried inside the library with jitter; only
what survives that budget reaches the workflow.
"""

from __future__ import annotations

from enum import StrEnum


class FailureClass(StrEnum):
    PREEMPTED = "preempted"
    CAPACITY = "capacity"
    TRANSIENT = "transient"
    RESOURCES = "resources"
    PERMANENT = "permanent"


# Classes the workflow retries (each within its own budget, enforced by `stage status`).
RETRYABLE: frozenset[FailureClass] = frozenset(
    {FailureClass.PREEMPTED, FailureClass.CAPACITY, FailureClass.RESOURCES, FailureClass.TRANSIENT}
)


class PipelineFailure(Exception):
    """A classified failure; ``reason`` is the one line a person reads first."""

    failure_class: FailureClass = FailureClass.PERMANENT

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason

    @property
    def tag(self) -> str:
        return self.failure_class.value

    def as_error(self) -> dict[str, str]:
        return {"tag": self.tag, "message": self.reason}


class Preempted(PipelineFailure):
    failure_class = FailureClass.PREEMPTED


class CapacityUnavailable(PipelineFailure):
    failure_class = FailureClass.CAPACITY


class TransientFailure(PipelineFailure):
    failure_class = FailureClass.TRANSIENT


class ResourcesExhausted(PipelineFailure):
    failure_class = FailureClass.RESOURCES


class PermanentFailure(PipelineFailure):
    failure_class = FailureClass.PERMANENT


_BY_CLASS: dict[FailureClass, type[PipelineFailure]] = {
    FailureClass.PREEMPTED: Preempted,
    FailureClass.CAPACITY: CapacityUnavailable,
    FailureClass.TRANSIENT: TransientFailure,
    FailureClass.RESOURCES: ResourcesExhausted,
    FailureClass.PERMANENT: PermanentFailure,
}


def failure_for(failure_class: FailureClass | str, reason: str) -> PipelineFailure:
    return _BY_CLASS[FailureClass(failure_class)](reason)
