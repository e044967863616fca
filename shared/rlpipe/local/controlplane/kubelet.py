"""The kubelet's part, played: containers of pods the real scheduler bound to our nodes.

A process-only cluster has nodes nothing runs. This player watches pods bound to them and writes
what a kubelet would through the pods' status subresource: the containers start (Running), then
end as the scenario says (an exit code, ``OOMKilled``), or never start (``ErrImagePull``). A pod
being deleted ends with SIGTERM's 143 and is then removed, as a kubelet confirms a graceful
deletion. The Job, JobSet and Kueue controllers, the scheduler and the garbage collector are the
real ones: they react to these statuses as they would to a kubelet's.
"""

from __future__ import annotations

import collections
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
    # of the grace period the program uses (None: until ``program`` returns, a test's ordering).
    # Until then the pod stays Running with a deletionTimestamp, as on a real node.
    terminating_seconds: float | None = 0.0
    program: Program | None = None


Script = Callable[[dict[str, Any]], Outcome]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _statuses(pod: dict[str, Any], state: dict[str, Any], *, ready: bool) -> dict[str, Any]:
    """Container statuses with the main containers in ``state``. Init containers ran before them:
    a regular one completed (exit 0); a native sidecar (``restartPolicy: Always``, the Pathways
    head's proxy and resource manager) runs beside them and, once they have ended, is stopped by
    the kubelet with SIGTERM (143), never given the main container's exit."""
    spec = pod["spec"]
    at = _now()
    main_ended = "terminated" in state

    def entry(c: dict[str, Any], st: dict[str, Any], is_ready: bool) -> dict[str, Any]:
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": is_ready,
            "restartCount": 0,
            "state": st,
        }

    def init_state(c: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if c.get("restartPolicy") != "Always":
            return {
                "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}
            }, False
        if main_ended:
            return {
                "terminated": {"exitCode": SIGTERM_EXIT, "reason": "Error", "startedAt": at, "finishedAt": at}
            }, False
        return {"running": {"startedAt": at}}, True

    out: dict[str, Any] = {}
    inits = spec.get("initContainers") or []
    if inits:
        out["initContainerStatuses"] = [entry(c, *init_state(c)) for c in inits]
    out["containerStatuses"] = [entry(c, state, ready) for c in spec.get("containers") or []]
    return out


@dataclass
class _Played:
    """One pod's played life: its outcome, when it started, when SIGTERM came, its program."""

    outcome: Outcome
    started: float
    sigterm_at: float | None = None
    sigterm: threading.Event = field(default_factory=threading.Event)
    ended: tuple[int, str] | None = None  # the program's (exit code, reason) once it returns
    disrupted: bool = False

    def terminating(self, now: float) -> bool:
        wait = self.outcome.terminating_seconds
        if wait is None:  # until its program returns (a script with none ends at once)
            return self.outcome.program is not None and self.ended is None
        return now - (self.sigterm_at or now) < wait


class PodPlayer:
    """Plays every pod bound to one of ``nodes``; ``script`` decides each pod's outcome."""

    def __init__(self, kubeconfig: Path, nodes: set[str], script: Script, *, interval: float = 0.2):
        from kubernetes import client, config

        self.core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.nodes = nodes
        self.script = script
        self.interval = interval
        self._stop = threading.Event()
        self._pods: dict[str, _Played] = {}  # pod uid -> its played life
        self._thread = threading.Thread(target=self._loop, name="pod-player", daemon=True)
        self._programs: list[threading.Thread] = []
        # The newest failures only: a long-lived stack must not grow a list every tick.
        self.errors: collections.deque[str] = collections.deque(maxlen=100)

    def start(self) -> PodPlayer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop playing: the loop first (it may still add pods), then SIGTERM every program and
        wait a moment for them, so none writes after the player is gone."""
        self._stop.set()
        self._thread.join(timeout=10)
        for played in list(self._pods.values()):
            played.sigterm.set()
        for thread in self._programs:
            thread.join(timeout=5)

    def __enter__(self) -> PodPlayer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        import time

        while not self._stop.is_set():
            try:
                # Raw JSON, in the API's own spelling: the script reads the pod as stored.
                listed: Any = self.core.list_pod_for_all_namespaces(
                    _preload_content=False, _request_timeout=5
                )
                pods = json.loads(listed.data)["items"]
            except Exception as exc:  # the API server stopping under us
                self.errors.append(f"listing pods: {exc!r}")
                pods = []
            for pod in pods:  # one pod's failure (a race with its deletion) never stalls the rest
                try:
                    self._step(pod, time.monotonic())
                except Exception as exc:
                    self.errors.append(f"pod {pod['metadata'].get('name')}: {exc!r}")
            self._stop.wait(self.interval)

    def _step(self, pod: dict[str, Any], now: float) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if spec.get("nodeName") not in self.nodes:
            return
        uid, phase = meta["uid"], status.get("phase")
        played = self._pods.get(uid)
        if meta.get("deletionTimestamp"):
            if phase not in ("Succeeded", "Failed"):
                if played is not None:
                    if played.sigterm_at is None:
                        played.sigterm_at = now
                        played.sigterm.set()
                    if played.terminating(now):
                        return  # still in its SIGTERM handler
                self._finish(pod, SIGTERM_EXIT, "Error")
            self._remove(pod)
            self._pods.pop(uid, None)
            return
        if phase in ("Succeeded", "Failed"):
            return
        if played is None:
            try:
                outcome = self.script(pod)
            except Exception as exc:  # a broken script fails its pod once, not every tick
                self.errors.append(f"script for {meta['name']}: {exc!r}")
                outcome = Outcome(exit_code=1, reason="Error")
            played = self._pods[uid] = _Played(outcome, now)
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

        thread = threading.Thread(target=run, name="played-program", daemon=True)
        self._programs.append(thread)
        thread.start()

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
                self._patch(pod, {"conditions": [condition]})
                self.core.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"])
                played.disrupted = True  # only once the delete went through; else tried again
            return
        # The node shuts down: the kubelet stops the containers within the grace period, then
        # reports the pod Failed; the pod object stays for its controller to count.
        if played.sigterm_at is None:
            played.sigterm_at = now
            played.sigterm.set()
        if not played.terminating(now):
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
