"""What every simulated controller shares: the API double, storage, time, randomness, history.

Kept in one small object so pods, Jobs and workloads stay plain classes that are easy to read,
and so every write goes through the same two places (the API double and the history).
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from rlpipe.local.kube_api import KubeApiError, KubeApiServer
from rlpipe.local.pod_logs import ContainerLogFolder
from rlpipe.local.simulator import kube_objects as ko
from rlpipe.local.simulator.gcs_io import GcsIO
from rlpipe.local.simulator.real_programs import RealPrograms
from rlpipe.local.simulator.scenario import Scenario
from rlpipe.local.simulator.timing import Clock, Sleep, Timing, WorkloadGone

Obj = dict[str, Any]


class SimulatedLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Prefixes every message with ``simulated:`` so no reader mistakes it for a real cluster."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"simulated: {msg}", kwargs


@dataclass(frozen=True)
class HistoryEntry:
    """One thing a workload did: ``kind`` is e.g. phase, pod, step, checkpoint, file, fault."""

    time: float
    kind: str
    detail: str


class History:
    """Per-workload record (by name), for tests and benchmarks to assert what happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, list[HistoryEntry]] = {}

    def record(self, workload: str, kind: str, detail: str, when: float) -> None:
        with self._lock:
            self._entries.setdefault(workload, []).append(HistoryEntry(when, kind, detail))

    def snapshot(self) -> dict[str, list[HistoryEntry]]:
        with self._lock:
            return {name: list(entries) for name, entries in self._entries.items()}

    def of(self, workload: str, kind: str | None = None) -> list[HistoryEntry]:
        with self._lock:
            entries = list(self._entries.get(workload, []))
        return [e for e in entries if kind is None or e.kind == kind]


@dataclass
class SimEnv:
    """The simulator's shared services (one per :class:`ClusterSimulator`)."""

    kube: KubeApiServer
    gcs: GcsIO
    timing: Timing
    scenario: Scenario
    log: SimulatedLog
    clock: Clock
    sleep: Sleep | None = None
    export_shards: int = 3
    seed: int | None = None
    hub_url: str = ""  # the Hub double the publish Job's program talks to (HF_ENDPOINT)
    # Convert and export run the real MaxText programs (``real_programs``); None: they are played.
    real_programs: RealPrograms | None = None
    # Every container line, kept after its pod is gone (what GKE ships to Cloud Logging); None: not kept.
    container_logs: ContainerLogFolder | None = None
    history: History = field(default_factory=History)
    objects: dict[str, tuple[str, str | None, int | None]] = field(default_factory=dict)
    rng: random.Random = field(init=False)
    _rng_lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: Callable[[], int] = field(default_factory=lambda: itertools.count().__next__)
    # A ``hold`` fault's release, per run (``release``); set before the hold is reached, it passes.
    _releases: dict[str, threading.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def now(self) -> float:
        return self.clock()

    def released(self, run: str) -> threading.Event:
        """The event a ``hold`` of ``run``'s training waits on."""
        with self._rng_lock:
            return self._releases.setdefault(run, threading.Event())

    def suffix(self, n: int = 5) -> str:
        with self._rng_lock:
            return ko.rand_suffix(self.rng, n)

    def with_rng(self, fn: Callable[[random.Random], str]) -> str:
        with self._rng_lock:
            return fn(self.rng)

    def wrote(self, uri: str, workload: str, stage: str | None, attempt: int | None) -> None:
        """Remember who wrote an object (for the event shim's drop-events question)."""
        with self._rng_lock:
            self.objects[uri] = (workload, stage, attempt)

    def writer_of(self, uri: str) -> tuple[str, str | None, int | None] | None:
        with self._rng_lock:
            return self.objects.get(uri)

    def record(self, workload: str, kind: str, detail: str) -> None:
        self.history.record(workload, kind, detail, self.clock())

    def emit(
        self,
        obj: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        component: str = "kubelet",
        host: str | None = None,
        field_path: str | None = None,
    ) -> None:
        """Record a Kubernetes Event about ``obj`` (failures to record are not the workload's)."""
        ev = ko.event(
            ko.involved(obj, field_path),
            reason,
            message,
            now=self.clock(),
            seq=self._seq(),
            warning=warning,
            component=component,
            host=host,
        )
        try:
            self.kube.create("events", ev, namespace=obj["metadata"]["namespace"])
        except KubeApiError as exc:  # an event is best effort, exactly as in the real recorder
            self.log.debug("event %s on %s not recorded: %s", reason, obj["metadata"]["name"], exc)

    def modify(self, resource: str, name: str, namespace: str, mutate: Callable[[Obj], None]) -> Obj:
        """Read-modify-write through the API double; a vanished object ends the simulation."""
        try:
            return self.kube.modify(resource, name, mutate, namespace=namespace)
        except KubeApiError as exc:
            if exc.code == 404:
                raise WorkloadGone from exc
            raise
