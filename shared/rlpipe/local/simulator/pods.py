"""One pod as the scheduler and the kubelet move it: Pending → Running → Succeeded/Failed.

Each transition is a write through the API double (so watchers see it) plus the Events the
real components record. Native sidecars (init containers with ``restartPolicy: Always``, the
Pathways proxy and resource manager) start before the main containers and are stopped after
them, and never decide the pod's phase.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rlpipe.local.kube_api import KubeApiError
from rlpipe.local.pod_logs import fallback_termination_message
from rlpipe.local.simulator import kube_objects as ko
from rlpipe.local.simulator.env import SimEnv
from rlpipe.local.simulator.timing import WorkloadGone

Obj = dict[str, Any]

SIMULATED_MARK = "[simulated]"  # on every line a played program or step prints
REAL_MARK = "[real]"  # on every line a program run for real prints (PROGRAMS=real)
SIGTERM_EXIT = 143  # 128 + SIGTERM: a process that exits on the kubelet's SIGTERM
SIGKILL_EXIT = 137  # 128 + SIGKILL: one still running when its grace period ends
NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
# The Job controller puts this finalizer on every pod it creates and removes it once it has counted
# the pod as terminal (k8s pkg/controller/job, JobTrackingWithFinalizers, GA in 1.26): a deleted
# pod therefore stays readable, with its deletionTimestamp, until it has terminated and been counted.
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
DEFAULT_GRACE = 30.0  # terminationGracePeriodSeconds when the pod spec does not set it

# Who sets DisruptionTarget, with which message, and whether the pod object is deleted (then it
# lingers with a deletionTimestamp until it has terminated). Reasons: k8s.io/api core/v1/types.go
# L3511-3548 (DisruptionTarget, TerminationByKubelet, PreemptionByScheduler); the others are literals
# in kube-scheduler preemption, the taint-eviction controller (tainteviction/taint_eviction.go
# addConditionAndDeletePod), the Eviction subresource (registry/core/pod/storage/eviction.go), PodGC
# (podgc/gc_controller.go markFailedAndDeletePodWithCondition: phase Failed, deleted with grace 0)
# and the kubelet's node shutdown manager (phase Failed, reason Terminated; the pod is not deleted).
DISRUPTIONS: dict[str, tuple[str, bool]] = {
    "PreemptionByScheduler": ("default-scheduler: preempting to accommodate a higher priority pod", True),
    "DeletionByTaintManager": ("Taint manager: deleting due to NoExecute taint", True),
    "EvictionByEvictionAPI": ("Eviction API: evicting", True),
    "DeletionByPodGC": ("PodGC: node no longer exists", True),
    "TerminationByKubelet": (NODE_SHUTDOWN_MESSAGE, False),
}


class PodSim:
    """A created Pod object and the simulated state of its containers."""

    def __init__(self, env: SimEnv, obj: Obj, *, index: int | None) -> None:
        self.env = env
        self.obj = obj
        self.index = index
        self.name: str = obj["metadata"]["name"]
        self.namespace: str = obj["metadata"]["namespace"]
        spec = obj["spec"]
        self.spec: Obj = spec
        self.main: list[Obj] = list(spec.get("containers") or [])
        self.sidecars: list[Obj] = ko.sidecars(spec)
        self.node: str | None = None
        self.cids: dict[str, str] = {}
        self.started: dict[str, float] = {}
        self.lines: list[str] = []
        self.phase = "Pending"
        self.held_exit: int | None = None  # a failed exit the script holds: SIGTERM ends it so

    # -- plumbing ------------------------------------------------------------------------------

    def _modify(self, mutate: Callable[[Obj], None]) -> None:
        self.obj = self.env.modify("pods", self.name, self.namespace, mutate)

    def _status(self, mutate: Callable[[Obj], None]) -> None:
        self._modify(lambda pod: mutate(pod.setdefault("status", {})))

    def _sigterm_statuses(self, containers: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """Statuses of containers stopped with SIGTERM (exit 143)."""
        return [
            ko.terminated(
                c["name"],
                c.get("image", ""),
                self.cids.get(c["name"], ""),
                SIGTERM_EXIT,
                "Error",
                self.started.get(c["name"], now),
                now,
            )
            for c in containers
        ]

    def _terminate_sidecars(self, status: dict[str, Any], now: float) -> None:
        """Native sidecars are stopped with SIGTERM when the main containers end (exit 143)."""
        if self.sidecars:
            status["initContainerStatuses"] = self._sigterm_statuses(self.sidecars, now)

    def _condition(
        self, status: Obj, kind: str, value: bool, reason: str | None = None, message: str | None = None
    ) -> None:
        status["conditions"] = ko.upsert_condition(
            status.get("conditions"), ko.condition(kind, value, self.env.now(), reason, message, probe=False)
        )

    def event(
        self,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        container: str | None = None,
        component: str = "kubelet",
    ) -> None:
        field_path = None
        if container:
            kind = "initContainers" if any(c["name"] == container for c in self.sidecars) else "containers"
            field_path = f"spec.{kind}{{{container}}}"
        self.env.emit(
            self.obj,
            reason,
            message,
            warning=warning,
            component=component,
            host=self.node if component == "kubelet" else None,
            field_path=field_path,
        )

    @property
    def exists(self) -> bool:
        return self.env.kube.find("pods", self.name, namespace=self.namespace) is not None

    # -- logs ----------------------------------------------------------------------------------

    def log(self, line: str, *, mark: str = SIMULATED_MARK) -> None:
        """Append a line to what ``kubectl logs`` shows; every line says whether it is simulated
        (``mark``: ``[real]`` for a line a real program printed, ``.real_programs``). The
        program's container printed it (the first main container), and it is also kept, with the
        same stamp, where GKE's logging agent would ship it from (``env.container_logs``)."""
        new = [f"{mark} {part}" for part in line.splitlines() or [""]]
        self.lines.extend(new)
        when = datetime.now(UTC)
        self.env.kube.append_pod_log(self.name, new, namespace=self.namespace, when=when)
        if self.env.container_logs is not None and self.main:
            self.env.container_logs.append(self.namespace, self.name, self.main[0]["name"], new, when)

    # -- scheduling ------------------------------------------------------------------------------

    def unschedulable(self) -> None:
        message = ko.unschedulable_message(self.spec)

        def mutate(status: Obj) -> None:
            status["phase"] = "Pending"
            status.setdefault("qosClass", ko.qos_class(self.spec))
            self._condition(status, "PodScheduled", False, "Unschedulable", message)

        self._status(mutate)
        self.event("FailedScheduling", message, warning=True, component="default-scheduler")

    def schedule(self) -> None:
        self.node = self.env.with_rng(lambda rng: ko.node_name(rng, ko.node_pool(self.spec)))

        def mutate(pod: Obj) -> None:
            pod["spec"]["nodeName"] = self.node
            status = pod.setdefault("status", {})
            status["phase"] = "Pending"
            status.setdefault("qosClass", ko.qos_class(self.spec))
            self._condition(status, "PodScheduled", True)

        self._modify(mutate)
        self.event(
            "Scheduled",
            f"Successfully assigned {self.namespace}/{self.name} to {self.node}",
            component="default-scheduler",
        )

    # -- starting --------------------------------------------------------------------------------

    def begin_start(self) -> None:
        """The kubelet admits the pod: sandbox ready, images start pulling."""
        host_ip = self.env.with_rng(lambda rng: f"10.128.{rng.randrange(0, 255)}.{rng.randrange(2, 254)}")
        pod_ip = (
            host_ip
            if self.spec.get("hostNetwork")
            else self.env.with_rng(lambda rng: f"10.4.{rng.randrange(0, 255)}.{rng.randrange(2, 254)}")
        )

        def mutate(status: Obj) -> None:
            status.update(
                hostIP=host_ip,
                hostIPs=[{"ip": host_ip}],
                podIP=pod_ip,
                podIPs=[{"ip": pod_ip}],
                startTime=ko.rfc3339(self.env.now()),
            )
            self._condition(status, "PodReadyToStartContainers", True)
            self._condition(
                status,
                "Initialized",
                not self.sidecars,
                None if not self.sidecars else "ContainersNotInitialized",
                None
                if not self.sidecars
                else f"containers with incomplete status: [{' '.join(c['name'] for c in self.sidecars)}]",
            )
            self._condition(status, "ContainersReady", False, "ContainersNotReady", self._unready_message())
            self._condition(status, "Ready", False, "ContainersNotReady", self._unready_message())
            if self.sidecars:
                status["initContainerStatuses"] = [
                    ko.waiting(c["name"], c.get("image", ""), "PodInitializing") for c in self.sidecars
                ]
            status["containerStatuses"] = [
                ko.waiting(c["name"], c.get("image", ""), "ContainerCreating") for c in self.main
            ]

        self._status(mutate)
        for c in self.sidecars + self.main:
            self.event("Pulling", f'Pulling image "{c.get("image", "")}"', container=c["name"])

    def _unready_message(self) -> str:
        return f"containers with unready status: [{' '.join(c['name'] for c in self.main)}]"

    def finish_start(self, bad_image: str | None = None) -> bool:
        """Images pulled, containers created and started. Returns False if the main
        container's image cannot be pulled (then it waits with ErrImagePull)."""
        now = self.env.now()
        for c in self.sidecars:
            self._start_container(c, now)
        if self.sidecars:

            def sidecars_up(status: Obj) -> None:
                status["initContainerStatuses"] = [
                    ko.running(c["name"], c.get("image", ""), self.cids[c["name"]], now)
                    for c in self.sidecars
                ]
                self._condition(status, "Initialized", True)

            self._status(sidecars_up)
        failing = [c for c in self.main if bad_image is not None and c.get("image") == bad_image]
        for c in self.main:
            if c in failing:
                self._pull_failed(c)
            else:
                self._start_container(c, now)
        if failing:

            def stuck(status: Obj) -> None:
                status["phase"] = "Pending"
                status["containerStatuses"] = [
                    ko.waiting(c["name"], c.get("image", ""), "ErrImagePull", self._pull_error(c))
                    if c in failing
                    else ko.running(c["name"], c.get("image", ""), self.cids[c["name"]], now)
                    for c in self.main
                ]

            self._status(stuck)
            return False

        def up(status: Obj) -> None:
            status["phase"] = "Running"
            status["containerStatuses"] = [
                ko.running(c["name"], c.get("image", ""), self.cids[c["name"]], now) for c in self.main
            ]
            self._condition(status, "ContainersReady", True)
            self._condition(status, "Ready", True)

        self._status(up)
        self.phase = "Running"
        return True

    def _start_container(self, c: Obj, now: float) -> None:
        image = c.get("image", "")
        self.cids[c["name"]] = self.env.with_rng(ko.container_id)
        self.started[c["name"]] = now
        self.event(
            "Pulled",
            f'Successfully pulled image "{image}" in 1.2s (1.2s including waiting). '
            "Image size: 1048576 bytes.",
            container=c["name"],
        )
        self.event("Created", f"Created container: {c['name']}", container=c["name"])
        self.event("Started", f"Started container {c['name']}", container=c["name"])

    @staticmethod
    def _pull_error(c: Obj) -> str:
        image = c.get("image", "")
        return (
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
            f'failed to resolve reference "{image}": {image}: not found'
        )

    def _pull_failed(self, c: Obj) -> None:
        image = c.get("image", "")
        self.event(
            "Failed",
            f'Failed to pull image "{image}": {self._pull_error(c)}',
            warning=True,
            container=c["name"],
        )
        self.event("Failed", "Error: ErrImagePull", warning=True, container=c["name"])

    def image_pull_backoff(self, bad_image: str) -> None:
        """After the first failed pull, the kubelet backs off: ImagePullBackOff, forever."""

        def mutate(status: Obj) -> None:
            statuses = []
            for cs in status.get("containerStatuses") or []:
                if cs.get("image") == bad_image:
                    cs = ko.waiting(
                        cs["name"], bad_image, "ImagePullBackOff", f'Back-off pulling image "{bad_image}"'
                    )
                statuses.append(cs)
            status["containerStatuses"] = statuses

        self._status(mutate)
        for c in self.main:
            if c.get("image") == bad_image:
                self.event("BackOff", f'Back-off pulling image "{bad_image}"', container=c["name"])
                self.event("Failed", "Error: ImagePullBackOff", warning=True, container=c["name"])

    # -- ending ----------------------------------------------------------------------------------

    def terminate(self, code: int, reason: str, *, message: str | None = None) -> None:
        """The main containers exit with ``code``; the kubelet then stops the sidecars."""
        now = self.env.now()
        self.phase = "Succeeded" if code == 0 else "Failed"
        for c in self.sidecars:
            self.event("Killing", f"Stopping container {c['name']}", container=c["name"])

        def mutate(status: Obj) -> None:
            status["phase"] = self.phase
            status["containerStatuses"] = [
                ko.terminated(
                    c["name"],
                    c.get("image", ""),
                    self.cids.get(c["name"], ""),
                    code,
                    reason,
                    self.started.get(c["name"], now),
                    now,
                    message=message or fallback_termination_message(c, code, reason, self.lines),
                )
                for c in self.main
            ]
            self._terminate_sidecars(status, now)
            why = "PodCompleted" if code == 0 else "PodFailed"
            self._condition(status, "ContainersReady", False, why)
            self._condition(status, "Ready", False, why)
            self._condition(status, "PodReadyToStartContainers", False)

        self._status(mutate)

    @property
    def grace(self) -> float:
        value = self.spec.get("terminationGracePeriodSeconds")
        return float(value) if isinstance(value, int | float) else DEFAULT_GRACE

    def disrupt(self, reason: str) -> None:
        """A disruption begins: ``DisruptionTarget`` first (so a watcher sees why), then the kill
        (a DELETE for the scheduler, the taint manager, the Eviction API and PodGC; the kubelet's
        own SIGTERM on node shutdown). PodGC's pod is Failed at once (its node is gone); the others
        end with :meth:`finish_termination` after their containers have exited."""
        message, deleted = DISRUPTIONS[reason]
        self._status(lambda status: self._condition(status, "DisruptionTarget", True, reason, message))
        if reason == "PreemptionByScheduler":
            self.event(
                "Preempted",
                f"Preempted by pod {self.env.suffix(8)} on node {self.node}",
                component="default-scheduler",
            )
        elif reason == "DeletionByTaintManager":
            self.event(
                "TaintManagerEviction",
                f"Marking for deletion Pod {self.namespace}/{self.name}",
                component="taint-eviction-controller",
            )
        if reason == "DeletionByPodGC":
            self.phase = "Failed"  # the node is gone: no container reports again

            def failed(status: Obj) -> None:
                status["phase"] = "Failed"
                self._condition(status, "Ready", False, "PodFailed")

            self._status(failed)
        elif not deleted:
            self._status(lambda status: status.update(reason="Terminated", message=NODE_SHUTDOWN_MESSAGE))
        if deleted:
            self.begin_termination(events=reason != "DeletionByPodGC")
        else:
            self._killing_events()

    def _killing_events(self) -> None:
        for c in self.main + self.sidecars:
            self.event("Killing", f"Stopping container {c['name']}", container=c["name"])

    def begin_termination(self, *, events: bool = True) -> None:
        """Deleted (by its controller, a disruption, or a cascade): the pod keeps running its
        containers' SIGTERM handlers and stays readable with a deletionTimestamp, held by the Job
        controller's finalizer, until :meth:`finish_termination`."""
        if events:
            self._killing_events()
        try:
            self.env.kube.delete("pods", self.name, namespace=self.namespace)
        except KubeApiError as exc:
            if exc.code != 404:
                raise

    def finish_termination(self, code: int = SIGTERM_EXIT) -> None:
        """The containers have exited (143 on SIGTERM, 137 when killed at the end of the grace
        period); the kubelet reports phase Failed. A pod already Failed keeps its status."""
        if self.phase in ("Succeeded", "Failed") or not self.exists:
            self.phase = self.phase if self.phase in ("Succeeded", "Failed") else "Failed"
            return
        code = code if self.held_exit is None else self.held_exit
        now = self.env.now()
        self.phase = "Failed"

        def mutate(status: Obj) -> None:
            status["phase"] = "Failed"
            started = [c for c in self.main if c["name"] in self.cids]
            status["containerStatuses"] = [
                ko.terminated(
                    c["name"],
                    c.get("image", ""),
                    self.cids[c["name"]],
                    code,
                    "Error",
                    self.started.get(c["name"], now),
                    now,
                    message=fallback_termination_message(c, code, "Error", self.lines),
                )
                for c in started
            ] or status.get("containerStatuses", [])
            self._terminate_sidecars(status, now)
            self._condition(status, "ContainersReady", False, "PodFailed")
            self._condition(status, "Ready", False, "PodFailed")

        with contextlib.suppress(WorkloadGone):
            self._status(mutate)

    def untrack(self) -> None:
        """The Job controller has counted the pod: its finalizer goes, and a deleted pod with it."""

        def mutate(pod: Obj) -> None:
            finalizers = [f for f in pod["metadata"].get("finalizers") or [] if f != JOB_TRACKING_FINALIZER]
            if finalizers:
                pod["metadata"]["finalizers"] = finalizers
            else:
                pod["metadata"].pop("finalizers", None)

        try:
            self.env.kube.modify("pods", self.name, mutate, namespace=self.namespace)
        except KubeApiError as exc:
            if exc.code != 404:
                raise

    def kill(self) -> None:
        """Stopped at once, no grace (the Job was deleted while its pod was being created)."""
        self.begin_termination()
        self.finish_termination()
        self.untrack()

    # -- what the Job controller reads ---------------------------------------------------------

    def exit_codes(self) -> dict[str, int]:
        codes = {}
        for cs in (self.obj.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated")
            if term is not None:
                codes[cs["name"]] = int(term.get("exitCode", 0))
        return codes

    def conditions(self) -> dict[str, str]:
        return {c["type"]: c["status"] for c in (self.obj.get("status") or {}).get("conditions") or []}

    def require(self) -> None:
        if not self.exists:
            raise WorkloadGone
