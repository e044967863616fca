"""The kubelet's part, played: containers of pods the real scheduler bound to our nodes.

A process-only cluster has nodes nothing runs. This player watches pods bound to them and writes
what a kubelet would through the pods' status subresource: the containers start (Running), then
end as the scenario says (an exit code, ``OOMKilled``), or never start (``ErrImagePull``). A pod
being deleted ends with SIGTERM's 143 and is then removed, as a kubelet confirms a graceful
deletion. The Job, JobSet and Kueue controllers, the scheduler and the garbage collector are the
real ones: they react to these statuses as they would to a kubelet's.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SIGTERM_EXIT = 143
# What the kubelet's graceful node shutdown writes (k8s pkg/kubelet/nodeshutdown, the pod status
# mutator: phase Failed, reason Terminated, and a DisruptionTarget condition TerminationByKubelet).
NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
# A played program: runs in its own thread while its pod runs; the event is set when the pod is
# deleted (SIGTERM). It returns the exit code and the kubelet's reason (Completed, Error, OOMKilled).
Program = Callable[[threading.Event], tuple[int, str]]


@dataclass(frozen=True)
class Outcome:
    """What a pod's containers do once started: run for ``seconds``, then exit with ``exit_code``
    (``reason`` as the kubelet words it: Completed, Error, OOMKilled). ``exit_code=None``: run
    until deleted. ``image_pull``: never start (``ErrImagePull``). ``program``: instead of a fixed
    exit, a played program decides (the demo's MaxText player)."""

    exit_code: int | None = 0
    seconds: float = 0.0
    reason: str | None = None
    image_pull: bool = False
    # After ``seconds``, disrupted instead: the ``DisruptionTarget`` condition with this reason.
    # TerminationByKubelet is the node's graceful shutdown (a Spot reclaim): the kubelet fails the
    # pod and does not delete it. The others (PreemptionByScheduler, EvictionByEvictionAPI,
    # DeletionByTaintManager) delete it gracefully, as the scheduler, the eviction API or the taint
    # manager does.
    disruption: str | None = None
    # How long the containers take to exit after SIGTERM (a deletion, a node shutdown): the part
    # of the grace period the program uses. Until then the pod stays Running with a
    # deletionTimestamp, as on a real node.
    terminating_seconds: float = 0.0
    program: Program | None = None


Script = Callable[[dict[str, Any]], Outcome]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _containers(pod: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Status field -> (name, image) of its containers."""
    spec = pod["spec"]
    return {
        "initContainerStatuses": [(c["name"], c.get("image", "")) for c in spec.get("initContainers") or []],
        "containerStatuses": [(c["name"], c.get("image", "")) for c in spec.get("containers") or []],
    }


def _statuses(pod: dict[str, Any], state: dict[str, Any], *, ready: bool) -> dict[str, Any]:
    return {
        field: [
            {"name": name, "image": image, "imageID": "", "ready": ready, "restartCount": 0, "state": state}
            for name, image in containers
        ]
        for field, containers in _containers(pod).items()
        if containers
    }


@dataclass
class _Played:
    """One pod's played life: its outcome, when it started, when SIGTERM came, its program."""

    outcome: Outcome
    started: float
    sigterm_at: float | None = None
    sigterm: threading.Event = field(default_factory=threading.Event)
    ended: tuple[int, str] | None = None  # the program's (exit code, reason) once it returns
    disrupted: bool = False


class PodPlayer:
    """Plays every pod bound to one of ``nodes``; ``script`` decides each pod's outcome."""

    def __init__(self, kubeconfig: Path, nodes: set[str], script: Script, *, interval: float = 0.1):
        from kubernetes import client, config

        self.core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.nodes = nodes
        self.script = script
        self.interval = interval
        self._stop = threading.Event()
        self._pods: dict[str, _Played] = {}  # pod uid -> its played life
        self._thread = threading.Thread(target=self._loop, name="pod-player", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> PodPlayer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for played in self._pods.values():
            played.sigterm.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        import time

        while not self._stop.is_set():
            try:
                # Raw JSON, in the API's own spelling: the script reads the pod as stored.
                listed = self.core.list_pod_for_all_namespaces(_preload_content=False)
                for pod in json.loads(listed.data)["items"]:
                    self._step(pod, time.monotonic())
            except Exception as exc:  # the API server stopping under us, a race with a deletion
                self.errors.append(repr(exc))
            self._stop.wait(self.interval)

    def _step(self, pod: dict[str, Any], now: float) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if spec.get("nodeName") not in self.nodes:
            return
        uid, phase = meta["uid"], status.get("phase")
        played = self._pods.get(uid)
        if meta.get("deletionTimestamp"):
            if phase not in ("Succeeded", "Failed"):
                if played is not None and played.sigterm_at is None:
                    played.sigterm_at = now
                    played.sigterm.set()
                if (
                    played is not None
                    and now - (played.sigterm_at or now) < played.outcome.terminating_seconds
                ):
                    return  # still in its SIGTERM handler
                self._finish(pod, SIGTERM_EXIT, "Error")
            self._remove(pod)
            return
        if phase in ("Succeeded", "Failed"):
            return
        if played is None:
            played = self._pods[uid] = _Played(self.script(pod), now)
            if played.outcome.image_pull:
                self._waiting(pod, "ErrImagePull", "failed to pull image: played by rlpipe")
            else:
                self._running(pod)
                if played.outcome.program is not None:
                    self._start_program(played)
            return
        outcome = played.outcome
        if outcome.disruption and now - played.started >= outcome.seconds:
            self._disrupt(pod, played, now)
            return
        if played.ended is not None:
            self._finish(pod, *played.ended)
            return
        if outcome.image_pull or outcome.exit_code is None or outcome.program is not None:
            return
        if now - played.started >= outcome.seconds:
            self._finish(
                pod, outcome.exit_code, outcome.reason or ("Completed" if outcome.exit_code == 0 else "Error")
            )

    def _start_program(self, played: _Played) -> None:
        program = played.outcome.program
        assert program is not None

        def run() -> None:
            try:
                played.ended = program(played.sigterm)
            except Exception as exc:  # a crash of the played program is the container's failure
                self.errors.append(f"played program: {exc!r}")
                played.ended = (1, "Error")

        threading.Thread(target=run, name="played-program", daemon=True).start()

    # ---- status writes ------------------------------------------------------------------------

    def _patch(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(
            pod["metadata"]["name"], pod["metadata"]["namespace"], {"status": status}
        )

    def _running(self, pod: dict[str, Any]) -> None:
        at = _now()
        ready = [{"type": "Ready", "status": "True", "lastTransitionTime": at}]
        running = {"running": {"startedAt": at}}
        self._patch(
            pod,
            {"phase": "Running", "startTime": at, "conditions": ready, **_statuses(pod, running, ready=True)},
        )

    def _waiting(self, pod: dict[str, Any], reason: str, message: str) -> None:
        waiting = {"waiting": {"reason": reason, "message": message}}
        self._patch(pod, {"phase": "Pending", **_statuses(pod, waiting, ready=False)})

    def _finish(
        self,
        pod: dict[str, Any],
        exit_code: int,
        reason: str,
        *,
        conditions: tuple[dict[str, Any], ...] = (),
        pod_reason: str | None = None,
        message: str | None = None,
    ) -> None:
        at = _now()
        terminated = {
            "terminated": {"exitCode": exit_code, "reason": reason, "startedAt": at, "finishedAt": at}
        }
        why = {"reason": pod_reason, "message": message} if pod_reason else {}
        self._patch(
            pod,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": at}, *conditions],
                **_statuses(pod, terminated, ready=False),
                **why,
            },
        )

    def _disrupt(self, pod: dict[str, Any], played: _Played, now: float) -> None:
        reason = played.outcome.disruption
        assert reason is not None
        message = NODE_SHUTDOWN_MESSAGE if reason == "TerminationByKubelet" else f"{reason}: played by rlpipe"
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": _now(),
        }
        if reason != "TerminationByKubelet":
            if not played.disrupted:
                played.disrupted = True
                self._patch(pod, {"conditions": [condition]})
                self.core.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"])
            return
        # The node shuts down: the kubelet stops the containers within the grace period, then
        # reports the pod Failed; the pod object stays for its controller to count.
        if played.sigterm_at is None:
            played.sigterm_at = now
            played.sigterm.set()
        if now - played.sigterm_at >= played.outcome.terminating_seconds:
            self._finish(
                pod, SIGTERM_EXIT, "Error", conditions=(condition,), pod_reason="Terminated", message=message
            )

    def _remove(self, pod: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(
                pod["metadata"]["name"], pod["metadata"]["namespace"], grace_period_seconds=0
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
