"""MaxText, Pathways and the TPU, played inside the pods of the real control plane.

On the real plane the real controllers decide which pods exist and when (Kueue admits, the Job and
JobSet controllers make the pods, the scheduler binds them, the garbage collector removes them), and
the pod player (``kubelet.py``) moves their containers. What runs *inside* a container is decided
here, from the pod's own spec, exactly as the double's simulator decides it
(``rlpipe.local.simulator.program.identify``): the same MaxText player
(``rlpipe.local.simulator.maxtext``) writes the same files to GCS and prints the same log lines,
so a run on the real plane leaves the objects a run on the double leaves. Nothing here plays a Job,
JobSet or Kueue rule; which pod runs the program follows the double's workloads
(``job_workload.py``, ``jobset_workload.py``):

* a Job's pod at completion index 0 (or an un-indexed Job's only pod) runs the program; another
  index has nothing to do and exits 0 at once (the tutorial's index-0 gate);
* in a JobSet, the replicated Job whose pods run a Python module (the Pathways head) runs it in job
  0, pod 0; the other pods of that Job exit 0 when the script is index-gated and otherwise serve
  until stopped; every pod without a program (a Pathways TPU worker) serves until the JobSet
  controller deletes it;
* a Job's pod without a recognised program exits 0 once its container has started.

Faults are the double's alone: no hook strikes here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlpipe.core.commands import HOLD_MARK
from rlpipe.local import pod_logs
from rlpipe.local.controlplane.kubelet import SIGTERM_EXIT, Outcome
from rlpipe.local.simulator.gcs_io import GcsIO
from rlpipe.local.simulator.maxtext import PROGRAMS
from rlpipe.local.simulator.pod_disk import PodDisk
from rlpipe.local.simulator.program import Program, ProgramExit, identify
from rlpipe.local.simulator.publisher import run_publish
from rlpipe.local.simulator.timing import Pacer, Timing, WorkloadGone

log = logging.getLogger(__name__)

PLAYED = "[played] "  # every line a played program prints says so, as the double's say [simulated]
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
LEADER = "0"
EXPORT_SHARDS = 3  # as the double's default, so both clusters write the same object names


class PodLogs(pod_logs.ContainerLogFolder):
    """The played containers' output, in the files the double's containers write too."""

    def played(self, namespace: str, pod: str, container: str, line: str) -> None:
        """A played program's line(s), each marked as played, stamped now."""
        marked = [f"{PLAYED}{part}" for part in line.splitlines() or [""]]
        self.append(namespace, pod, container, marked, datetime.now(UTC))

    def lines(self, namespace: str, pod: str, container: str) -> list[pod_logs.LogLine]:
        return self.read(
            pod_logs.ContainerLog(namespace, pod, container, self.path(namespace, pod, container))
        )

    def serve(self, namespace: str, pod: str, container: str, query: Mapping[str, str] | None = None) -> str:
        """The body the kubelet answers for these log options (``pod_logs.render``)."""
        return pod_logs.render(self.lines(namespace, pod, container), query or {}).decode()


@dataclass(frozen=True)
class PodRef:
    """The pod a program runs in (what the publisher asks of ``ctx.workload``), and the container
    whose output is the program's."""

    namespace: str
    name: str
    container: str
    program: Program | None


class SecretReader:
    """``kube.get("secrets", …)`` as the publisher asks it of the double, answered by the real API
    server, as the kubelet resolves a ``secretKeyRef``."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def get(self, resource: str, name: str, *, namespace: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        from rlpipe.local.kube_api import KubeApiError

        assert resource == "secrets"
        try:
            response = self.core.read_namespaced_secret(name, namespace, _preload_content=False)
        except ApiException as exc:
            raise KubeApiError(exc.status, str(exc.reason), f"secret {namespace}/{name}") from None
        return dict(json.loads(response.data))


@dataclass(frozen=True)
class Services:
    """What every played program shares: storage, the Hub double, Secrets, log files."""

    gcs: GcsIO
    logs: PodLogs
    hub_url: str = ""
    kube: SecretReader | None = None


class PlayedContainer:
    """The container's side of the world for one program on the real plane
    (``rlpipe.local.simulator.program.ProgramContext``): GCS through the real client, local files
    on the pod's own disk, output to the pod's log file, time scaled by the stack's timing, and
    SIGTERM ends it mid-pause or before the next write, as a killed process writes nothing more."""

    export_shards = EXPORT_SHARDS

    def __init__(self, pod: PodRef, services: Services, timing: Timing, sigterm: threading.Event) -> None:
        self.workload = pod  # the publisher's view: program, namespace
        self.env = services  # the publisher's and hub_file's view: hub_url, kube
        self.services = services
        self.timing = timing
        self.pacer = Pacer(timing, sigterm)
        self.disk = PodDisk()

    def now(self) -> float:
        return time.time()

    def log(self, line: str) -> None:
        pod = self.workload
        self.services.logs.played(pod.namespace, pod.name, pod.container, line)

    def pause(self, simulated_seconds: float) -> None:
        self.pacer.pause(simulated_seconds)

    def duration(self, name: str) -> float:
        return self.timing.duration(name)

    def write(self, uri: str, data: bytes | str) -> None:
        self.pacer.check()
        if not uri.startswith("gs://"):
            self.disk.write(uri, data)
            return
        self.services.gcs.write(uri, data)

    def local_path(self, path: str) -> Path:
        return self.disk.path(path)

    def claim(self, uri: str) -> None:
        """Nothing to attribute: no event is dropped on the real plane."""
        self.pacer.check()

    def list(self, prefix_uri: str) -> list[str]:
        return self.services.gcs.list(prefix_uri)

    def exists_under(self, prefix_uri: str) -> bool:
        return self.services.gcs.exists_under(prefix_uri)

    def exists(self, uri: str) -> bool:
        return self.services.gcs.exists(uri)

    def read(self, uri: str) -> bytes | None:
        return self.services.gcs.read(uri)

    def delete(self, uri: str) -> None:
        self.pacer.check()
        self.services.gcs.delete(uri)

    def note(self, kind: str, detail: str) -> None:
        log.debug("%s/%s %s: %s", self.workload.namespace, self.workload.name, kind, detail)

    def hook(self, point: str, step: int = 0, *, saving: bool = False) -> None:
        """No faults are injected on the real plane."""


def play(ctx: PlayedContainer, *, program: Program) -> tuple[int, str]:
    """Run the program to its exit code and the kubelet's reason; a failed exit is held as the
    container's script holds it (``core.commands.held_exit``), and SIGTERM ends the hold."""
    stage = program.stage
    if stage is None:
        return _not_played(ctx)
    pod = ctx.workload
    log.info("%s/%s runs %s (%s)", pod.namespace, pod.name, program.module, stage)
    try:
        code = run_publish(ctx, program.args) if stage == "publish" else PROGRAMS[stage](ctx, program.args)
        reason = "Completed" if code == 0 else "Error"
    except ProgramExit as exc:
        if exc.message:
            ctx.log(f"ERROR: {exc.message}")
        if exc.reason != "OOMKilled":  # the kernel kills without a word
            ctx.log(f"{program.module} exited with status {exc.code}")
        code, reason = exc.code, exc.reason
    except WorkloadGone:
        return SIGTERM_EXIT, "Error"
    finally:
        ctx.disk.close()  # the container's disk goes with it
    if code != 0 and program.exit_hold > 0:
        ctx.log(
            f"{HOLD_MARK} the program exited {code}; holding this exit {program.exit_hold:g}s so that a "
            "disrupted TPU worker's Job, if any, fails the JobSet first"
        )
        with contextlib.suppress(WorkloadGone):  # SIGTERM ends the hold with the program's own code
            ctx.pause(program.exit_hold)
    return code, reason


def _not_played(ctx: PlayedContainer) -> tuple[int, str]:
    ctx.log("container started; this program is not played, so it exits 0 at once")
    try:
        ctx.pause(ctx.timing.container_start)
    except WorkloadGone:
        return SIGTERM_EXIT, "Error"
    return 0, "Completed"


def _nothing_to_do(ctx: PlayedContainer, *, index: str) -> tuple[int, str]:
    ctx.log(f"completion index {index}: not index 0, so this pod has nothing to do; exiting 0")
    return 0, "Completed"


class ProgramScript:
    """The pod player's script: each pod's part, read from the pod as the API server stores it.

    ``timing`` applies to pods started from then on (the stack switches it between tests)."""

    def __init__(self, services: Services, timing: Timing) -> None:
        self.services = services
        self.timing = timing

    def __call__(self, pod: dict[str, Any]) -> Outcome:
        meta, full = pod["metadata"], pod  # the player hands over the pod as stored
        found = role(full)
        if found is None:
            return Outcome(exit_code=None)  # serves until stopped
        part, program = found
        first = ((full.get("spec") or {}).get("containers") or [{}])[0].get("name", "")
        ref = PodRef(meta["namespace"], meta["name"], program.container if program else first, program)
        services, timing = self.services, self.timing

        def container(sigterm: threading.Event) -> tuple[int, str]:
            return part(PlayedContainer(ref, services, timing, sigterm))

        return Outcome(program=container)


Part = Callable[[PlayedContainer], tuple[int, str]]


def role(pod: dict[str, Any]) -> tuple[Part, Program | None] | None:
    """What this pod's main container does, and the program it was rendered with; None: it serves
    until stopped (a Pathways worker)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    program = identify(spec)
    in_jobset = JOBSET_NAME in labels
    if program is None:
        return None if in_jobset else (_not_played, None)
    if in_jobset and str(labels.get(JOB_INDEX, LEADER)) != LEADER:
        return None
    index = str(labels.get(COMPLETION_INDEX) or annotations.get(COMPLETION_INDEX) or LEADER)
    if index != LEADER:
        if in_jobset and not program.index_gated:
            return None
        return functools.partial(_nothing_to_do, index=index), program
    return functools.partial(play, program=program), program
