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
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIGTERM_EXIT = 143


@dataclass(frozen=True)
class Outcome:
    """What a pod's containers do once started: run for ``seconds``, then exit with ``exit_code``
    (``reason`` as the kubelet words it: Completed, Error, OOMKilled). ``exit_code=None``: run
    until deleted. ``image_pull``: never start (``ErrImagePull``)."""

    exit_code: int | None = 0
    seconds: float = 0.0
    reason: str | None = None
    image_pull: bool = False
    # After ``seconds``, disrupted instead: the ``DisruptionTarget`` condition with this reason
    # (PreemptionByScheduler, TerminationByKubelet, EvictionByEvictionAPI), then a graceful
    # deletion, as the scheduler, the kubelet or the eviction API does.
    disruption: str | None = None


Script = Callable[[dict[str, Any]], Outcome]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _containers(pod: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Status field -> (name, image) of its containers (the client's to_dict is snake_case)."""
    spec = pod["spec"]
    return {
        "initContainerStatuses": [(c["name"], c.get("image", "")) for c in spec.get("init_containers") or []],
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


class PodPlayer:
    """Plays every pod bound to one of ``nodes``; ``script`` decides each pod's outcome."""

    def __init__(self, kubeconfig: Path, nodes: set[str], script: Script, *, interval: float = 0.1):
        from kubernetes import client, config

        self.core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.nodes = nodes
        self.script = script
        self.interval = interval
        self._stop = threading.Event()
        self._started: dict[str, float] = {}  # pod uid -> monotonic start
        self._outcomes: dict[str, Outcome] = {}
        self._thread = threading.Thread(target=self._loop, name="pod-player", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> PodPlayer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        import time

        while not self._stop.is_set():
            try:
                for pod in self.core.list_pod_for_all_namespaces().to_dict()["items"]:
                    self._step(pod, time.monotonic())
            except Exception as exc:  # the API server stopping under us, a race with a deletion
                self.errors.append(repr(exc))
            self._stop.wait(self.interval)

    def _step(self, pod: dict[str, Any], now: float) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if spec.get("node_name") not in self.nodes:
            return
        uid, phase = meta["uid"], status.get("phase")
        if meta.get("deletion_timestamp"):
            if phase not in ("Succeeded", "Failed"):
                self._finish(pod, SIGTERM_EXIT, "Error")
            self._remove(pod)
            return
        if phase in ("Succeeded", "Failed"):
            return
        api_pod = _camel(pod)
        if uid not in self._outcomes:
            self._outcomes[uid] = self.script(api_pod)
            self._started[uid] = now
            outcome = self._outcomes[uid]
            if outcome.image_pull:
                self._waiting(pod, "ErrImagePull", "failed to pull image: played by rlpipe")
            else:
                self._running(pod)
            return
        outcome = self._outcomes[uid]
        if outcome.disruption and now - self._started[uid] >= outcome.seconds:
            self._disrupt(pod, outcome.disruption)
            return
        if outcome.image_pull or outcome.exit_code is None:
            return
        if now - self._started[uid] >= outcome.seconds:
            reason = outcome.reason or ("Completed" if outcome.exit_code == 0 else "Error")
            self._finish(pod, outcome.exit_code, reason)

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

    def _finish(self, pod: dict[str, Any], exit_code: int, reason: str) -> None:
        at = _now()
        terminated = {
            "terminated": {"exitCode": exit_code, "reason": reason, "startedAt": at, "finishedAt": at}
        }
        self._patch(
            pod,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": at}],
                **_statuses(pod, terminated, ready=False),
            },
        )

    def _disrupt(self, pod: dict[str, Any], reason: str) -> None:
        at = _now()
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": f"{reason}: played by rlpipe",
            "lastTransitionTime": at,
        }
        self._patch(pod, {"conditions": [condition]})
        self.core.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"])

    def _remove(self, pod: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(
                pod["metadata"]["name"], pod["metadata"]["namespace"], grace_period_seconds=0
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


def _camel(pod: dict[str, Any]) -> dict[str, Any]:
    """The few fields a script reads, in the API's spelling (the client's to_dict is snake_case)."""
    meta = pod["metadata"]
    return {
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": meta.get("labels") or {},
        },
        "spec": {"nodeName": pod["spec"].get("node_name")},
    }
