"""One ``batch/v1`` Job as the Job controller (Kubernetes 1.32) runs it.

Pods are named and labelled as the controller names them, counters and conditions are the
controller's (``SuccessCriteriaMet`` then ``Complete``; ``FailureTarget`` then ``Failed``), and
a failed pod is judged by ``podFailurePolicy`` and ``backoffLimit`` exactly in that order,
because whether a preempted pod fails the Job or is replaced is what decides how a JobSet
fails, and so what evidence the pipeline's classifier gets to see.

``Failed`` is written only once the pods deleted after ``FailureTarget`` have terminated
(k8s job_controller.go ``enactJobFinished``: "Delaying marking the Job as finished, because there
are still terminating pod(s)", since 1.31 with JobManagedBy/JobPodReplacementPolicy), so there is a
real gap after ``FailureTarget`` in which the Job is still *active* for a JobSet.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rlpipe.local.simulator import kube_objects as ko
from rlpipe.local.simulator.env import SimEnv
from rlpipe.local.simulator.pods import JOB_TRACKING_FINALIZER, PodSim
from rlpipe.local.simulator.timing import WorkloadGone

Obj = dict[str, Any]

BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"
COMPLETIONS_MESSAGE = "Reached expected number of succeeded pods"


@dataclass(frozen=True)
class Decision:
    """What the Job controller does about a failed pod."""

    action: str  # "replace" (a new pod for the index) | "fail" (the Job fails)
    reason: str = ""
    message: str = ""
    counted: bool = True


def pod_failure_rule(policy: Mapping[str, Any] | None, pod: PodSim) -> tuple[str, str] | None:
    """The first matching ``podFailurePolicy`` rule as (action, message), or None.

    ``onExitCodes`` looks at terminated containers with a non-zero code (optionally one named
    container); ``onPodConditions`` at the pod's conditions. Messages are the controller's."""
    if not policy:
        return None
    codes = pod.exit_codes()
    conditions = pod.conditions()
    for i, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action", "Count")
        on_codes = rule.get("onExitCodes")
        if on_codes:
            wanted = set(on_codes.get("values") or [])
            negate = on_codes.get("operator") == "NotIn"
            for name, code in codes.items():
                if code == 0 or (on_codes.get("containerName") and on_codes["containerName"] != name):
                    continue
                if (code in wanted) != negate:
                    return action, (
                        f"Container {name} for pod {pod.namespace}/{pod.name} failed with exit code "
                        f"{code} matching {action} rule at index {i}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            if conditions.get(pattern.get("type")) == pattern.get("status", "True"):
                return action, (
                    f"Pod {pod.namespace}/{pod.name} has condition {pattern.get('type')} matching "
                    f"{action} rule at index {i}"
                )
    return None


class JobSim:
    """The Job controller's view of one Job: its pods, counters and conditions."""

    def __init__(
        self, env: SimEnv, obj: Obj, *, workload: str, on_pod: Callable[[PodSim], None] | None = None
    ) -> None:
        self.env = env
        self.obj = obj
        self.workload = workload
        self.on_pod = on_pod
        meta, spec = obj["metadata"], obj["spec"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.uid: str = meta["uid"]
        self.spec: Obj = spec
        self.indexed = spec.get("completionMode") == "Indexed"
        self.completions = int(spec.get("completions") or spec.get("parallelism") or 1)
        self.parallelism = int(spec.get("parallelism") or 1)
        self.backoff_limit = int(spec.get("backoffLimit", 6))
        self.failed = 0
        self.succeeded: set[int] = set()
        self.active: dict[int, PodSim] = {}
        self.finished: str | None = None  # "Complete" | "Failed"
        self.failure_reason = ""
        self.failure_message = ""
        self.terminating: dict[str, PodSim] = {}  # deleted, still running their SIGTERM handlers

    # -- status ----------------------------------------------------------------------------------

    def _sync(self, extra: Callable[[Obj], None] | None = None) -> None:
        def mutate(job: Obj) -> None:
            status = job.setdefault("status", {})
            status["active"] = sum(1 for p in self.active.values() if p.phase in ("Pending", "Running"))
            status["ready"] = sum(1 for p in self.active.values() if p.phase == "Running")
            status["succeeded"] = len(self.succeeded)
            status["failed"] = self.failed
            status["terminating"] = len(self.terminating)
            status["uncountedTerminatedPods"] = {}
            if self.indexed and self.succeeded:
                status["completedIndexes"] = compress_indexes(self.succeeded)
            for key in ("active", "ready", "succeeded", "failed"):
                if status[key] == 0 and key != "ready":
                    status.pop(key)
            if extra:
                extra(status)

        self.obj = self.env.modify("jobs", self.name, self.namespace, mutate)

    def start(self) -> None:
        """The controller starts the Job: ``startTime`` is when it was (last) unsuspended."""

        def started(status: Obj) -> None:
            status.setdefault("startTime", ko.rfc3339(self.env.now()))

        self._sync(started)

    # -- pods ------------------------------------------------------------------------------------

    def create_pods(self, indexes: Iterable[int]) -> list[PodSim]:
        pods = [self._create_pod(i) for i in indexes]
        self._sync()
        return pods

    def _create_pod(self, index: int) -> PodSim:
        template = copy.deepcopy(self.obj["spec"]["template"])
        tmeta = template.get("metadata") or {}
        labels = dict(tmeta.get("labels") or {})
        annotations = dict(tmeta.get("annotations") or {})
        for key in ko.JOB_NAME_LABELS:
            labels.setdefault(key, self.name)
        for key in ko.JOB_UID_LABELS:
            labels.setdefault(key, self.uid)
        spec = template["spec"]
        prefix = f"{self.name}-"
        if self.indexed:
            labels[ko.COMPLETION_INDEX] = str(index)
            annotations[ko.COMPLETION_INDEX] = str(index)
            prefix = f"{self.name}-{index}-"
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                env = c.setdefault("env", [])
                env.append(
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{ko.COMPLETION_INDEX}']"}},
                    }
                )
            if spec.get("subdomain"):
                spec["hostname"] = f"{self.name}-{index}"
        annotations[ko.SIMULATED_ANNOTATION] = ko.SIMULATED_NOTE
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Never")
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": prefix + self.env.suffix(),
                "generateName": prefix,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [ko.owner_reference(self.obj)],
                "finalizers": [JOB_TRACKING_FINALIZER],
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": ko.qos_class(spec)},
        }
        created = self.env.kube.create("pods", pod, namespace=self.namespace)
        sim = PodSim(self.env, created, index=index)
        self.active[index] = sim
        self.env.emit(self.obj, "SuccessfulCreate", f"Created pod: {sim.name}", component="job-controller")
        self.env.record(self.workload, "pod", f"{sim.name} created")
        if self.on_pod:
            self.on_pod(sim)
        if self.env.kube.find("jobs", self.name, namespace=self.namespace) is None:
            sim.kill()  # the Job was deleted while we created its pod: the GC would remove it
            raise WorkloadGone
        return sim

    def pods_changed(self) -> None:
        self._sync()

    def pod_succeeded(self, index: int) -> None:
        pod = self.active.pop(index, None)
        self.succeeded.add(index)
        self._sync()
        if pod is not None:
            pod.untrack()

    def pod_failed(self, index: int, pod: PodSim) -> Decision:
        """``podFailurePolicy`` first (FailJob, Ignore, Count, FailIndex), then ``backoffLimit``.
        The pod is judged once it is in phase Failed, then counted (its finalizer removed)."""
        self.active.pop(index, None)
        self.terminating.pop(pod.name, None)
        pod.untrack()
        rule = pod_failure_rule(self.spec.get("podFailurePolicy"), pod)
        if rule and rule[0] == "FailJob":
            self.failed += 1
            self._sync()
            return Decision("fail", "PodFailurePolicy", rule[1])
        if rule and rule[0] == "Ignore":
            self._sync()
            return Decision("replace", counted=False)
        self.failed += 1  # Count (and FailIndex, as without backoffLimitPerIndex)
        self._sync()
        if self.failed > self.backoff_limit:
            return Decision("fail", "BackoffLimitExceeded", BACKOFF_LIMIT_MESSAGE)
        return Decision("replace")

    def backoff_seconds(self) -> float:
        """The controller's exponential pod-recreation delay (simulated seconds)."""
        return float(self.env.timing.pod_backoff * (2 ** max(0, self.failed - 1)))

    # -- endings ---------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return len(self.succeeded) >= self.completions

    def complete(self) -> None:
        now = self.env.now()

        def criteria(status: Obj) -> None:
            status["conditions"] = ko.upsert_condition(
                status.get("conditions"),
                ko.condition("SuccessCriteriaMet", True, now, "CompletionsReached", COMPLETIONS_MESSAGE),
            )

        def complete(status: Obj) -> None:
            status["conditions"] = ko.upsert_condition(
                status.get("conditions"),
                ko.condition("Complete", True, now, "CompletionsReached", COMPLETIONS_MESSAGE),
            )
            status["completionTime"] = ko.rfc3339(now)

        self._sync(criteria)
        self._sync(complete)
        self.finished = "Complete"
        self.env.emit(self.obj, "Completed", "Job completed", component="job-controller")

    def fail_target(self, reason: str, message: str) -> list[PodSim]:
        """``FailureTarget``; the controller then deletes the remaining pods, which keep running
        their SIGTERM handlers (returned: the caller ends them, then calls :meth:`fail_final`)."""
        now = self.env.now()
        self.failure_reason, self.failure_message = reason, message

        def target(status: Obj) -> None:
            status["conditions"] = ko.upsert_condition(
                status.get("conditions"), ko.condition("FailureTarget", True, now, reason, message)
            )

        self._sync(target)
        return self.stop_active()

    def stop_active(self) -> list[PodSim]:
        """Delete every active pod (they linger, terminating); the Job counts them as terminating."""
        pods = list(self.active.values())
        for pod in pods:
            pod.begin_termination()
            self.env.emit(
                self.obj, "SuccessfulDelete", f"Deleted pod: {pod.name}", component="job-controller"
            )
            self.terminating[pod.name] = pod
        self.active.clear()
        self._sync()
        return pods

    def terminated(self, pods: Iterable[PodSim], *, counted: bool = True) -> None:
        """Deleted pods have exited: counted as failed (unless the Job was suspended) and released."""
        for pod in pods:
            self.terminating.pop(pod.name, None)
            self.failed += int(counted)
            pod.untrack()
        self._sync()

    def fail_final(self) -> None:
        """``Failed`` with the FailureTarget's reason and message, once nothing is terminating."""
        now = self.env.now()
        reason, message = self.failure_reason, self.failure_message

        def failed(status: Obj) -> None:
            status["conditions"] = ko.upsert_condition(
                status.get("conditions"), ko.condition("Failed", True, now, reason, message)
            )

        self._sync(failed)
        self.finished = "Failed"
        self.env.emit(self.obj, reason, message, warning=True, component="job-controller")


def compress_indexes(indexes: Iterable[int]) -> str:
    """``{0,1,2,5}`` → ``"0-2,5"``, the controller's ``completedIndexes`` format."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    start: int | None = None
    prev = -2
    for i in ordered:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = i
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(parts)
