"""One run of a MaxText program inside one pod's main container.

It is the container's side of the world for :mod:`maxtext`: logs go to the pod's log, files
to GCS or to the pod's own disk (``pod_disk``), time passes through the workload's pacer (so a
deleted workload stops mid-write), and the programs' fault hooks are answered from the scenario.
With real programs set (``env.real_programs``), a convert or export pod runs its MaxText program
for real instead (``real_programs``), through the same context.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rlpipe.local.simulator import real_programs
from rlpipe.local.simulator.env import SimEnv
from rlpipe.local.simulator.maxtext import PROGRAMS, Arguments, ProgramExit
from rlpipe.local.simulator.pod_disk import PodDisk
from rlpipe.local.simulator.pods import REAL_MARK, PodSim
from rlpipe.local.simulator.program import Program
from rlpipe.local.simulator.publisher import run_publish
from rlpipe.local.simulator.scenario import Fault
from rlpipe.local.simulator.timing import Pacer


class Disrupted(Exception):
    """A preemption fault struck; the workload decides which pod it hits."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.spec())
        self.fault = fault


@dataclass(frozen=True)
class Outcome:
    """How the main container ended: an exit code and reason, or a disruption."""

    code: int
    reason: str = "Completed"
    message: str = ""
    disruption: Fault | None = None


class Workload(Protocol):
    """What a :class:`ProgramRun` uses of the workload its pod belongs to. The workload
    (:class:`rlpipe.local.simulator.workload.WorkloadSim`) imports this module to start runs,
    so this module names only the protocol, never the workload module."""

    env: SimEnv
    pacer: Pacer
    name: str
    stage: str | None
    attempt: int | None
    program: Program | None

    def fault_hook(self, run: ProgramRun, point: str, step: int, saving: bool) -> None: ...


class ProgramRun:
    """Implements :class:`rlpipe.local.simulator.maxtext.ProgramContext` for one pod (and
    :class:`rlpipe.local.simulator.real_programs.RealContext`)."""

    def __init__(self, workload: Workload, pod: PodSim) -> None:
        self.workload = workload
        self.pod = pod
        self.env = workload.env
        self.export_shards = workload.env.export_shards
        self.real_programs = workload.env.real_programs
        self.disk = PodDisk()

    def now(self) -> float:
        return self.env.now()

    def log(self, line: str) -> None:
        self.pod.log(line)

    def log_real(self, line: str) -> None:
        self.pod.log(line, mark=REAL_MARK)

    def stopped(self) -> bool:
        return self.workload.pacer.cancelled.is_set()

    def work_dir(self) -> Path:
        return self.disk.work()

    def pause(self, simulated_seconds: float) -> None:
        self.workload.pacer.pause(simulated_seconds)

    def duration(self, name: str) -> float:
        return self.env.timing.duration(name)

    def write(self, uri: str, data: bytes | str) -> None:
        self.workload.pacer.check()  # a deleted workload writes nothing more
        if not uri.startswith("gs://"):
            self.disk.write(uri, data)
            return
        self.env.gcs.write(uri, data)
        self.env.wrote(uri, self.workload.name, self.workload.stage, self.workload.attempt)
        self.env.record(self.workload.name, "file", uri)

    def local_path(self, path: str) -> Path:
        return self.disk.path(path)

    def copy(self, source_uri: str, dest_uri: str) -> None:
        self.workload.pacer.check()
        self.env.gcs.copy(source_uri, dest_uri)
        self.env.wrote(dest_uri, self.workload.name, self.workload.stage, self.workload.attempt)
        self.env.record(self.workload.name, "file", dest_uri)

    def claim(self, uri: str) -> None:
        self.workload.pacer.check()
        self.env.wrote(uri, self.workload.name, self.workload.stage, self.workload.attempt)

    def list(self, prefix_uri: str) -> list[str]:
        return self.env.gcs.list(prefix_uri)

    def exists_under(self, prefix_uri: str) -> bool:
        return self.env.gcs.exists_under(prefix_uri)

    def exists(self, uri: str) -> bool:
        return self.env.gcs.exists(uri)

    def read(self, uri: str) -> bytes | None:
        return self.env.gcs.read(uri)

    def delete(self, uri: str) -> None:
        self.workload.pacer.check()
        self.env.gcs.delete(uri)
        self.env.record(self.workload.name, "deleted", uri)

    def note(self, kind: str, detail: str) -> None:
        self.env.record(self.workload.name, kind, detail)

    def hook(self, point: str, step: int = 0, *, saving: bool = False) -> None:
        self.workload.fault_hook(self, point, step, saving)

    def run(self) -> Outcome:
        """Run the program to its end; faults come back as an :class:`Outcome`."""
        program = self.workload.program
        stage = self.workload.stage
        if program is None or stage is None:
            self.log("container started; this program is not simulated, so it exits 0 at once")
            self.pause(self.env.timing.container_start)
            return Outcome(0)
        args: Arguments = program.args
        self.env.log.info("%s/%s runs %s (%s)", self.pod.namespace, self.pod.name, program.module, stage)
        real = self.real_programs
        try:
            if stage == "publish":
                code = run_publish(self, args)
            elif real is not None and stage in real.stages:
                code = real_programs.run(self, program, real)
            else:
                code = PROGRAMS[stage](self, args)
        except ProgramExit as exc:
            if exc.message:
                self.log(f"ERROR: {exc.message}")
            if exc.reason != "OOMKilled":  # the kernel kills without a word
                self.log(f"{program.module} exited with status {exc.code}")
            return Outcome(exc.code, exc.reason, exc.message)
        except Disrupted as exc:
            return Outcome(143, "Error", disruption=exc.fault)
        finally:
            self.disk.close()  # the container's disk goes with it
        return Outcome(code, "Completed" if code == 0 else "Error")
