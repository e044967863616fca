"""The cluster simulator: watches the API double and plays every workload the pipeline creates.

It listens to the double's changes in-process. A new top-level Job or JobSet gets a
:class:`~rlpipe.local.simulator.workload.WorkloadSim` thread; its deletion stops that thread.
Anything the simulator itself creates (child Jobs, pods, events) is recognised by its owner
and never simulated twice.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any

from rlpipe.local.kube_api import KubeApiServer, WatchEvent
from rlpipe.local.pod_logs import ContainerLogFolder
from rlpipe.local.simulator.env import HistoryEntry, SimEnv, SimulatedLog
from rlpipe.local.simulator.gcs_io import GcsIO
from rlpipe.local.simulator.job_workload import JobWorkload
from rlpipe.local.simulator.jobset_workload import JobSetWorkload
from rlpipe.local.simulator.real_programs import RealPrograms
from rlpipe.local.simulator.scenario import Scenario
from rlpipe.local.simulator.timing import Clock, Sleep, Timing, wall_clock
from rlpipe.local.simulator.workload import WorkloadSim

LOGGER_NAME = "rlpipe.local.simulator"
WORKLOADS: dict[str, type[WorkloadSim]] = {"jobs": JobWorkload, "jobsets": JobSetWorkload}


class ClusterSimulator:
    """Plays GKE's controllers, kubelets and the MaxText programs for one API double.

    ``storage_client`` is a real ``google.cloud.storage.Client`` (pointed at fake-gcs-server
    locally); ``namespace`` limits the simulation to one namespace (None: all). ``clock`` and
    ``sleep`` may be injected; ``seed`` makes pod/node names reproducible. ``container_logs`` keeps
    every container line after its pod is gone (the local Cloud Logging reads it).
    ``real_programs``: convert and export run the real MaxText programs (``.real_programs``).
    """

    def __init__(
        self,
        kube: KubeApiServer,
        storage_client: Any,
        *,
        scenario: Scenario | None = None,
        timing: Timing | None = None,
        log: logging.Logger | None = None,
        clock: Clock = wall_clock,
        sleep: Sleep | None = None,
        export_shards: int = 3,
        seed: int | None = None,
        namespace: str | None = None,
        hub_url: str = "",
        container_logs: ContainerLogFolder | None = None,
        real_programs: RealPrograms | None = None,
    ) -> None:
        if export_shards < 1:
            raise ValueError("export_shards must be >= 1 (1 writes a single model.safetensors)")
        self.kube = kube
        self.scenario = scenario or Scenario()
        self.namespace = namespace
        self.env = SimEnv(
            kube=kube,
            gcs=GcsIO(storage_client),
            timing=timing or Timing(),
            scenario=self.scenario,
            log=SimulatedLog(log or logging.getLogger(LOGGER_NAME), {}),
            clock=clock,
            sleep=sleep,
            export_shards=export_shards,
            seed=seed,
            hub_url=hub_url,
            container_logs=container_logs,
            real_programs=real_programs,
        )
        self._lock = threading.Lock()
        self._sims: dict[str, WorkloadSim] = {}  # by uid
        self._runs: dict[str, str | None] = {}  # workload name → its run label (for drops_event)
        self._running = False

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> ClusterSimulator:
        """Start listening; workloads that exist but were never touched are adopted."""
        with self._lock:
            if self._running:
                return self
            self._running = True
        self.kube.add_listener(self._on_change)
        for resource in WORKLOADS:
            for obj in self.kube.list(resource, namespace=self.namespace):
                if not obj.get("status") or obj["status"] == {}:
                    self._launch(resource, obj)
        self.env.log.info(
            "cluster simulator started (timing scale %g, %d fault(s))",
            self.env.timing.scale,
            len(self.scenario.faults),
        )
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every workload's simulation (objects stay as they are) and stop listening."""
        with self._lock:
            if not self._running:
                return
            self._running = False
            sims = list(self._sims.values())
        self.kube.remove_listener(self._on_change)
        for sim in sims:
            sim.cancel()
        deadline = time.monotonic() + timeout
        for sim in sims:
            sim.join(max(0.0, deadline - time.monotonic()))
        self.env.log.info("cluster simulator stopped")

    def __enter__(self) -> ClusterSimulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- watching ----------------------------------------------------------------------------------

    def _on_change(self, event: WatchEvent) -> None:
        resource = event.resource.plural
        if resource not in WORKLOADS:
            return
        meta = event.object.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return
        if event.type == "ADDED":
            if meta.get("ownerReferences"):
                return  # a controller's child (a JobSet's Job): its parent is simulated
            self._launch(resource, event.object)
        elif event.type == "DELETED" or (event.type == "MODIFIED" and meta.get("deletionTimestamp")):
            with self._lock:
                sim = self._sims.get(meta.get("uid", ""))
            if sim is not None:
                sim.cancel()

    def _launch(self, resource: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        with self._lock:
            if not self._running or uid in self._sims:
                return
            sim = WORKLOADS[resource](self.env, obj)
            self._sims[uid] = sim
            self._runs[sim.name] = sim.run
        try:
            sim.on_created()
        except Exception:  # never fail the creator's request because of the simulator
            self.env.log.exception("could not prepare %s/%s", obj["metadata"].get("namespace"), sim.name)
        sim.start()

    # -- waiting and records ----------------------------------------------------------------------

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """True once every workload has finished or is parked (stalled, stuck pulling an image,
        waiting out its TTL, suspended by someone else); False if ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                sims = list(self._sims.values())
            if all(sim.idle.is_set() for sim in sims):
                return True
            time.sleep(0.005)
        return False

    def wait_finished(self, name: str, timeout: float = 10.0) -> bool:
        """True once the named workload has reached Complete/Failed or was deleted (a TTL
        deletion may still follow; ``wait_idle`` covers that wait as parked)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                sims = [s for s in self._sims.values() if s.name == name]
            if sims and all(s.ended.is_set() for s in sims):
                return True
            time.sleep(0.005)
        return False

    @property
    def history(self) -> dict[str, list[HistoryEntry]]:
        """Workload name → what it did, in order: (time, kind, detail) entries."""
        return self.env.history.snapshot()

    def history_of(self, name: str, kind: str | None = None) -> list[HistoryEntry]:
        """One workload's entries, optionally of one kind (phase, pod, job, step, checkpoint,
        resume, file, deleted, fault)."""
        return self.env.history.of(name, kind)

    def files_written(self, name: str) -> list[str]:
        """The gs:// URIs a workload wrote, in write order."""
        return [e.detail for e in self.env.history.of(name, "file")]

    def set_scenario(self, scenario: Scenario) -> None:
        """Replace the faults for workloads created from now on (the local stack's control API
        uses this so one long-lived stack can run many scenarios one after another)."""
        self.scenario = scenario
        self.env.scenario = scenario

    def release(self, run: str) -> None:
        """Let ``run``'s training go on past its ``hold`` fault (now, or when it gets there)."""
        self.env.released(run).set()
        self.env.record(run, "fault", "hold released")

    def drops_event(self, object_name: str, bucket: str | None = None) -> bool:
        """For the event shim: should the notification for this object be dropped?

        Uses who actually wrote the object (stage, attempt and run) when the simulator wrote it,
        else MaxText's file names (``object_name`` may be bucket-relative or a gs:// URI); an
        object of unknown writer never matches a run-scoped fault."""
        uri = (
            object_name
            if object_name.startswith("gs://")
            else (f"gs://{bucket}/{object_name}" if bucket else None)
        )
        writer = self.env.writer_of(uri) if uri else None
        if writer is not None and writer[1] is not None:
            with self._lock:
                run = self._runs.get(writer[0])
            return self.scenario.drops_events_for(writer[1], writer[2], run)
        return self.scenario.drops_events_for(object_name)
