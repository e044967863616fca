"""What every simulated workload does, Job or JobSet: Kueue queueing, bringing pods up,
answering fault hooks, and the end of life (TTL deletion, or a stop when deleted).

Each workload runs its whole lifecycle as one sequential script in its own thread. That is
simpler to read and to reason about than a set of reconcilers, and it is enough: the
simulator's job is to produce, in the right order, the writes a real cluster would produce.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

from rlpipe.local.kube_api import KubeApiError
from rlpipe.local.simulator import kube_objects as ko
from rlpipe.local.simulator.env import SimEnv
from rlpipe.local.simulator.jobs import JobSim
from rlpipe.local.simulator.kueue import CLUSTER_QUEUE, KueueWorkload, insufficient_quota
from rlpipe.local.simulator.maxtext import ProgramExit
from rlpipe.local.simulator.pods import JOB_TRACKING_FINALIZER, SIGKILL_EXIT, SIGTERM_EXIT, PodSim
from rlpipe.local.simulator.program import Program
from rlpipe.local.simulator.runtime import Disrupted, ProgramRun
from rlpipe.local.simulator.scenario import Fault
from rlpipe.local.simulator.timing import Pacer, WorkloadGone

Obj = dict[str, Any]

ATTEMPT_LABEL = "rlpipe.dev/attempt"
RUN_LABEL = "rlpipe.dev/run"  # a scenario fault's optional ``run`` is matched against it
# The ProvisioningRequest's Failed message, which Kueue copies into the check (provisioning/
# controller.go:558). What GKE's queued-provisioning class writes there is not public: played.
PROVISIONING_FAILED = "the ProvisioningRequest failed: no capacity for the slice (played by the simulator)"


class WorkloadSim:
    """Base of :class:`JobWorkload` and :class:`JobSetWorkload`; one thread per workload."""

    resource = ""  # "jobs" | "jobsets"

    def __init__(self, env: SimEnv, obj: Obj) -> None:
        meta = obj["metadata"]
        self.env = env
        self.obj = obj
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.uid: str = meta["uid"]
        self.labels: dict[str, str] = dict(meta.get("labels") or {})
        self.attempt = _int(self.labels.get(ATTEMPT_LABEL))
        self.program: Program | None = self.find_program()
        self.stage = self.program.stage if self.program else None
        self.run: str | None = self.labels.get(RUN_LABEL)
        self.faults: list[Fault] = (
            env.scenario.for_workload(self.stage, self.attempt, self.run) if self.stage else []
        )
        self.queued = ko.QUEUE_LABEL in self.labels
        self.kueue = KueueWorkload(self)
        self.cancelled = threading.Event()
        self.idle = threading.Event()  # finished, or parked waiting for something outside it
        self.ended = threading.Event()  # terminal (Complete/Failed) or gone; TTL deletion may follow
        self.pacer = Pacer(env.timing, self.cancelled, sleep=env.sleep)
        self._fired: set[Fault] = set()
        self._thread = threading.Thread(target=self._main, name=f"simulated-{self.name}", daemon=True)

    # -- to be provided by subclasses ---------------------------------------------------------

    def find_program(self) -> Program | None:
        raise NotImplementedError

    def play(self) -> None:
        raise NotImplementedError

    def suspended_condition(self, suspended: bool) -> Obj:
        raise NotImplementedError

    def pod_sets(self) -> list[tuple[str, int]]:
        """(name, pod count) per pod set, as the Workload lists them."""
        raise NotImplementedError

    def stop_for_kueue(self, message: str) -> None:
        """Kueue's job reconciler stops the job (suspends it) after an eviction; the controllers
        then remove its pods. Returns once no pod is left running."""
        raise NotImplementedError

    @property
    def pod_selector(self) -> str:
        """The label selector of every pod this workload's controllers made."""
        raise NotImplementedError

    # -- thread ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self.cancelled.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _main(self) -> None:
        try:
            self.play()
        except WorkloadGone:
            self.record("phase", "simulation stopped: the workload is gone")
            self.env.log.info("%s/%s deleted; its simulation stopped", self.namespace, self.name)
        except Exception:  # a bug here must not kill the process that hosts the stack
            self.env.log.exception("simulation of %s/%s failed", self.namespace, self.name)
            self.record("phase", "simulation crashed (see the simulator log)")
        finally:
            self._release()
            self.ended.set()
            self.idle.set()

    def _release(self) -> None:
        """The simulation ends (the workload was deleted, or the simulator stops): the Job
        controller's finalizers go from the pods that still carry one, so nothing is left held."""

        def untrack(pod: Obj) -> None:
            finalizers = [f for f in pod["metadata"].get("finalizers") or [] if f != JOB_TRACKING_FINALIZER]
            pod["metadata"]["finalizers"] = finalizers
            if not finalizers:
                del pod["metadata"]["finalizers"]

        try:
            pods = self.env.kube.list("pods", namespace=self.namespace, label_selector=self.pod_selector)
            for pod in pods:
                if JOB_TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                    with contextlib.suppress(KubeApiError):
                        self.env.kube.modify(
                            "pods", pod["metadata"]["name"], untrack, namespace=self.namespace
                        )
        except Exception:  # the stack is going down; nothing to hold on to
            self.env.log.debug("could not release the pods of %s/%s", self.namespace, self.name)

    @contextlib.contextmanager
    def parked(self) -> Iterator[None]:
        """Waiting on something only the outside world (or nobody) can change."""
        self.idle.set()
        try:
            yield
        finally:
            self.idle.clear()

    def record(self, kind: str, detail: str) -> None:
        self.env.record(self.name, kind, detail)

    def current(self) -> Obj:
        obj = self.env.kube.find(self.resource, self.name, namespace=self.namespace)
        if obj is None or obj["metadata"]["uid"] != self.uid:
            raise WorkloadGone
        return obj

    def modify(self, mutate: Any) -> Obj:
        self.obj = self.env.modify(self.resource, self.name, self.namespace, mutate)
        return self.obj

    def fault(self, kind: str) -> Fault | None:
        return next((f for f in self.faults if f.kind == kind), None)

    def once(self, kind: str) -> Fault | None:
        """A fault that strikes once per workload (a preemption, a capacity gap)."""
        found = next((f for f in self.faults if f.kind == kind and f not in self._fired), None)
        if found is not None:
            self._fired.add(found)
            self.record("fault", found.spec())
        return found

    # -- creation (runs synchronously in the API writer's thread) -------------------------------

    def on_created(self) -> None:
        """What happens before the creator hears back: Kueue's webhook suspends a queued
        workload, and an ``api-5xx`` fault arms the API double for the next requests.

        Approximation: Kueue's webhook mutates the object before it is stored; here it is
        suspended right after, in the same request, so the 201 body and the ADDED watch event
        still show ``suspend`` unset while every later read and event shows it suspended."""
        self.record("phase", "created")
        api = self.fault("api-5xx")
        if api is not None and api.count:
            self.env.kube.inject_fault(
                503, count=api.count, message="simulated: injected fault (the apiserver is unavailable)"
            )
            self.record("fault", api.spec())
        if self.queued:
            self._suspend()

    def _suspend(self) -> None:
        def mutate(obj: Obj) -> None:
            obj["spec"]["suspend"] = True
            status = obj.setdefault("status", {})
            status["conditions"] = ko.upsert_condition(
                status.get("conditions"), self.suspended_condition(True)
            )

        self.modify(mutate)
        self.kueue.create(self.obj, self.pod_sets())
        cond = self.suspended_condition(True)
        self.env.emit(
            self.obj,
            cond["reason"] if self.resource == "jobsets" else "Suspended",
            cond["message"],
            component=self.controller,
        )
        self.record("phase", "suspended (queued by Kueue)")

    @property
    def controller(self) -> str:
        return "jobset-controller" if self.resource == "jobsets" else "job-controller"

    def admit(self) -> None:
        """Kueue admits after the admission delay; a workload suspended by someone else
        waits until that someone resumes it (as the real controllers do)."""
        if self.queued:
            self.pacer.pause(self.env.timing.admission_delay)
            if self.once("provision-fail"):
                self._provisioning_rejected()
            if self.once("no-quota"):
                self._not_admitted()
            now = self.env.now()

            def mutate(obj: Obj) -> None:
                obj["spec"]["suspend"] = False
                status = obj.setdefault("status", {})
                status["conditions"] = ko.upsert_condition(
                    status.get("conditions"), self.suspended_condition(False)
                )
                if self.resource == "jobs":
                    status["startTime"] = ko.rfc3339(now)

            self.modify(mutate)
            self.kueue.admitted(self.obj)
            self.env.emit(
                self.obj, "Started", f"Admitted by clusterQueue {CLUSTER_QUEUE}", component="kueue-admission"
            )
            cond = self.suspended_condition(False)
            self.env.emit(
                self.obj,
                cond["reason"] if self.resource == "jobsets" else "Resumed",
                cond["message"],
                component=self.controller,
            )
            self.record("phase", "admitted")
            self.env.log.info("%s/%s admitted by Kueue", self.namespace, self.name)
            return
        if (self.current().get("spec") or {}).get("suspend"):
            with self.parked():
                while (self.current().get("spec") or {}).get("suspend"):
                    self.pacer.pause(0)
                    self.cancelled.wait(self.env.timing.poll)
            self.record("phase", "resumed")

    # -- pods ------------------------------------------------------------------------------------

    def bring_up(
        self,
        job: JobSim,
        pods: list[PodSim],
        *,
        capacity_gap: Fault | None = None,
        bad_image: str | None = None,
    ) -> None:
        """Scheduling, image pulls, container starts, for a group of pods at once."""
        if not pods:
            return
        if capacity_gap is not None and capacity_gap.seconds:
            for pod in pods:
                pod.unschedulable()
            self.record("phase", f"pods unschedulable for {capacity_gap.seconds:g}s")
            self.pacer.pause(capacity_gap.seconds)
        self.pacer.pause(self.env.timing.schedule_delay)
        for pod in pods:
            pod.schedule()
        for pod in pods:
            pod.begin_start()
        self.pacer.pause(self.env.timing.image_pull + self.env.timing.container_start)
        stuck = [pod for pod in pods if not pod.finish_start(bad_image)]
        job.pods_changed()
        for pod in pods:
            self.record("pod", f"{pod.name} {pod.phase}")
        if stuck and bad_image is not None:
            self.pacer.pause(self.env.timing.image_pull)
            for pod in stuck:
                pod.image_pull_backoff(bad_image)
                self.record("pod", f"{pod.name} ImagePullBackOff")
            self.env.log.info(
                "%s/%s: image %s cannot be pulled; waiting forever", self.namespace, self.name, bad_image
            )
            with self.parked():
                self.pacer.forever()

    # -- endings of pods and Jobs ---------------------------------------------------------------

    def exit_after(self, pod: PodSim, *, slow: bool = False) -> float:
        """Simulated seconds from SIGTERM to the containers' exit: prompt, or (``slow``) the whole
        terminationGracePeriodSeconds, when the kubelet kills them."""
        return pod.grace if slow else min(self.env.timing.sigterm_exit, pod.grace)

    def stop_pods(self, pods: list[PodSim], *, slow: bool = False, waited: float = 0.0) -> None:
        """Deleted pods run their SIGTERM handlers, then exit (143, or 137 when killed at the end of
        the grace period); ``waited`` simulated seconds of that have passed already."""
        if not pods:
            return
        self.pacer.pause(max(0.0, max(self.exit_after(p, slow=slow) for p in pods) - waited))
        for pod in pods:
            pod.finish_termination(SIGKILL_EXIT if slow else SIGTERM_EXIT)

    def fail_job(self, job: JobSim, reason: str, message: str, *, slow: bool = False) -> None:
        """The Job controller fails a Job: FailureTarget, its other pods deleted and waited for,
        then Failed (nothing terminating any more)."""
        pods = job.fail_target(reason, message)
        self.stop_pods(pods, slow=slow)
        job.terminated(pods)
        job.fail_final()

    def kueue_evict(self, fault: Fault, node: str = "") -> None:
        """Kueue evicts the running workload (``evict@<step>``): the Workload's conditions and
        events, the job stopped (suspended, ``Stopped`` event), its pods gone, then it waits in
        its queue. Re-admission is not simulated: the pipeline's verdict decides what follows."""
        why = fault.why or "preempted"
        reason, message = self.kueue.evict(why, node=node)
        self.record("fault", f"{fault.spec()}: Kueue evicts ({reason})")
        self.stop_for_kueue(message)
        self.kueue.requeued(why, message)
        self.record("phase", f"evicted by Kueue ({reason}); suspended in its queue")
        with self.parked():
            self.pacer.forever()

    def _not_admitted(self) -> None:
        """``no-quota``: the ClusterQueue's quota is all in use by other workloads, so Kueue
        keeps this one suspended with the flavor assigner's reason, for as long as it exists."""
        self.kueue.pending(insufficient_quota(self.obj))
        self.record("phase", "not admitted: no unused quota")
        with self.parked():
            self.pacer.forever()

    def _provisioning_rejected(self) -> None:
        """flex-start (``provision-fail``): the ProvisioningRequest never gets capacity; Kueue
        rejects the admission check and deactivates the Workload, which stays suspended."""
        reason, _ = self.kueue.provisioning_rejected(PROVISIONING_FAILED)
        self.record("phase", f"not admitted: {reason}")
        with self.parked():
            self.pacer.forever()

    def bad_image(self) -> str | None:
        return self.program.image if self.program and self.fault("image-pull") else None

    def index_gate_success(self, job: JobSim, index: int, pod: PodSim) -> None:
        """A pod whose completion index has nothing to do exits 0 at once."""
        pod.log(f"completion index {index}: not index 0, so this pod has nothing to do; exiting 0")
        pod.terminate(0, "Completed")
        job.pod_succeeded(index)

    # -- program faults ------------------------------------------------------------------------

    def fault_hook(self, run: ProgramRun, point: str, step: int, saving: bool) -> None:
        for fault in self.faults:
            if (
                fault.kind in ("preempt", "evict")
                and fault not in self._fired
                and self._preempt_due(fault, point, step, saving)
            ):
                self._fired.add(fault)
                self.record("fault", f"{fault.spec()} at {point} {step}")
                raise Disrupted(fault)
            if fault.kind == "oom" and point == "peak":
                self.record("fault", fault.spec())
                raise ProgramExit(137, "OOMKilled")
            if fault.kind == "exit" and point == "start" and fault.code:
                self.record("fault", fault.spec())
                raise ProgramExit(
                    fault.code, "Error", f"simulated fault: the program exits with status {fault.code}"
                )
            if fault.kind == "hold" and point == "step" and step == fault.step and fault not in self._fired:
                self._fired.add(fault)
                self.record("fault", f"{fault.spec()}: training paused until the run is released")
                released = self.env.released(self.run or "")
                with self.parked():
                    while not released.wait(self.env.timing.poll):
                        self.pacer.check()  # cancelled meanwhile: the workload is gone
                self.record("fault", f"{fault.spec()}: released")
            if fault.kind == "stall" and point == "start":
                self.record("fault", fault.spec())
                run.log("waiting for the Pathways resource manager ... (no further output)")
                with self.parked():
                    self.pacer.forever()

    def _preempt_due(self, fault: Fault, point: str, step: int, saving: bool) -> bool:
        if self.stage != "train" or not fault.step:
            return point == "start"
        if point == "save":
            return step == fault.step
        return point == "step" and step == fault.step and not saving

    # -- end of life -----------------------------------------------------------------------------

    def expire(self) -> None:
        """The workload has reached its end; after ``ttlSecondsAfterFinished`` (if set and
        honoured) the TTL controller deletes it."""
        self.ended.set()
        with contextlib.suppress(WorkloadGone):  # deleted meanwhile: its Workload went with it
            self.kueue.finished(self.current())
        ttl = (self.obj.get("spec") or {}).get("ttlSecondsAfterFinished")
        if not self.env.timing.ttl or ttl is None:
            return
        with self.parked():
            self.pacer.pause(float(ttl))
        self.record("phase", f"deleted after ttlSecondsAfterFinished={ttl}")
        self.env.kube.delete(
            self.resource, self.name, namespace=self.namespace, propagation_policy="Foreground"
        )


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def pipe_timeout(program_container: Obj | None, default: float) -> float:
    """The head gives up on an unreachable worker after ``--pathways_pipe_unreachable_timeout``."""
    for env in (program_container or {}).get("env") or []:
        if env.get("name") == "ABSL_FLAGS":
            m = re.search(
                r"--pathways_pipe_unreachable_timeout=(\d+(?:\.\d+)?)(ms|s|m)?", env.get("value") or ""
            )
            if m:
                unit = {"ms": 0.001, "s": 1.0, "m": 60.0}[m.group(2) or "s"]
                return float(m.group(1)) * unit
    return default
