"""A Pathways training JobSet, as the JobSet controller (v0.10) and the Job controller run it.

Child Jobs ``<jobset>-<replicatedJob>-<index>`` are real ``batch/v1`` objects in the API double,
labelled and owned as the JobSet controller labels them, so deleting the JobSet cascades.
``startupPolicy: InOrder`` brings the head up before the workers. The program runs in the
head's main container; workers serve until the JobSet finishes, when the controller deletes
every still-active child Job (so a preempted worker pod vanishes with its Job unless that Job
failed, which is how evidence is lost on a real cluster too).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from rlpipe.local.kube_api import KubeApiError
from rlpipe.local.simulator import disruption
from rlpipe.local.simulator import kube_objects as ko
from rlpipe.local.simulator.jobs import JobSim
from rlpipe.local.simulator.pods import PodSim
from rlpipe.local.simulator.program import Program, identify
from rlpipe.local.simulator.runtime import ProgramRun
from rlpipe.local.simulator.workload import WorkloadSim

Obj = dict[str, Any]

JS = "jobset.sigs.k8s.io/"
DEFAULT_GROUP = "default"
LEADER = 0


JobSetFailed = disruption.JobFailed  # a child Job failed; carries it to the failure policy


class JobSetWorkload(WorkloadSim):
    resource = "jobsets"

    def __init__(self, env: Any, obj: Obj) -> None:
        self.leader_rjob: str | None = None
        super().__init__(env, obj)
        self.restarts = 0
        self.counted_restarts = 0
        self.children: dict[str, list[JobSim]] = {}

    # -- reading the spec ------------------------------------------------------------------------

    @property
    def rjobs(self) -> list[Obj]:
        return list((self.obj.get("spec") or {}).get("replicatedJobs") or [])

    def find_program(self) -> Program | None:
        for rjob in self.rjobs:
            pod_spec = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            ) or {}
            found = identify(pod_spec)
            if found is not None:
                self.leader_rjob = rjob["name"]
                return found
        return None

    def pod_sets(self) -> list[tuple[str, int]]:
        out = []
        for rjob in self.rjobs:
            spec = (rjob.get("template") or {}).get("spec") or {}
            out.append((rjob["name"], int(rjob.get("replicas", 1)) * int(spec.get("parallelism") or 1)))
        return out

    @property
    def pod_selector(self) -> str:
        return f"{JS}jobset-uid={self.uid}"

    def stop_for_kueue(self, message: str) -> None:
        """Kueue stops a JobSet by setting ``spec.suspend`` (JobSet implements no custom stop:
        jobframework/reconciler.go:1170-1184), with its ``Stopped`` event; the JobSet controller
        then suspends every active child Job and marks itself Suspended (jobset_controller.go
        213-218, 391-402, 1036-1046); the Job controller deletes their pods, which do not count
        as failures."""

        def stop(obj: Obj) -> None:
            obj["spec"]["suspend"] = True

        self.modify(stop)
        self.env.emit(self.obj, "Stopped", message, component="kueue-admission")
        pods: list[tuple[JobSim, list[PodSim]]] = []
        now = self.env.now()
        for jobs in self.children.values():
            for job in jobs:
                if job.finished is not None:
                    continue

                def suspend(obj: Obj) -> None:
                    obj["spec"]["suspend"] = True
                    status = obj.setdefault("status", {})
                    status["conditions"] = ko.upsert_condition(
                        status.get("conditions"),
                        ko.condition("Suspended", True, now, "JobSuspended", "Job suspended"),
                    )

                job.obj = self.env.modify("jobs", job.name, self.namespace, suspend)
                self.env.emit(job.obj, "Suspended", "Job suspended", component="job-controller")
                pods.append((job, job.stop_active()))
        cond = self.suspended_condition(True)
        self._conditions(cond)
        self.env.emit(self.obj, cond["reason"], cond["message"], component=self.controller)
        self.stop_pods([p for _, group in pods for p in group])
        for job, group in pods:
            job.terminated(group, counted=False)
        self._sync_status()

    def suspended_condition(self, suspended: bool) -> Obj:
        if suspended:
            return ko.meta_condition(
                "Suspended", True, self.env.now(), "SuspendedJobs", "jobset is suspended"
            )
        return ko.meta_condition("Suspended", False, self.env.now(), "ResumeJobs", "jobset is resumed")

    def _subdomain(self) -> str:
        network = (self.obj.get("spec") or {}).get("network") or {}
        return str(network.get("subdomain") or self.name)

    def _coordinator(self) -> str | None:
        coord = (self.obj.get("spec") or {}).get("coordinator")
        if not coord:
            return None
        return (
            f"{self.name}-{coord['replicatedJob']}-{coord.get('jobIndex', 0)}-{coord.get('podIndex', 0)}."
            f"{self._subdomain()}"
        )

    # -- the script ------------------------------------------------------------------------------

    def play(self) -> None:
        self.admit()
        self.obj = self.current()
        while True:
            try:
                self._run_once()
                self._finish(
                    completed=True, reason="AllJobsCompleted", message="jobset completed successfully"
                )
                break
            except JobSetFailed as failed:
                if not self._apply_failure_policy(failed.child):
                    break
        self.expire()

    def _run_once(self) -> None:
        spec = self.obj.get("spec") or {}
        in_order = ((spec.get("startupPolicy") or {}).get("startupPolicyOrder")) == "InOrder"
        if in_order:
            self._conditions(
                ko.meta_condition(
                    "StartupPolicyInProgress",
                    True,
                    self.env.now(),
                    "InOrderStartupPolicyInProgress",
                    "in order startup policy is in progress",
                )
            )
        self.children = {}
        tpu_anywhere = any(ko.requests_tpu(self._pod_spec(r)) for r in self.rjobs)
        gap = self.once("unschedulable")
        for rjob in self.rjobs:
            jobs = [self._create_child(rjob, i) for i in range(int(rjob.get("replicas", 1)))]
            self.children[rjob["name"]] = jobs
            pods_by_job = [
                (job, job.create_pods(range(min(job.parallelism, job.completions)))) for job in jobs
            ]
            hits_gap = gap is not None and (ko.requests_tpu(self._pod_spec(rjob)) or not tpu_anywhere)
            bad_image = self.bad_image() if rjob["name"] == self.leader_rjob else None
            for job, pods in pods_by_job:
                self.bring_up(job, pods, capacity_gap=gap if hits_gap else None, bad_image=bad_image)
            if hits_gap:
                gap = None
        if in_order:
            self._conditions(
                ko.meta_condition(
                    "StartupPolicyCompleted",
                    True,
                    self.env.now(),
                    "InOrderStartupPolicyCompleted",
                    "in order startup policy has completed",
                ),
                ko.meta_condition(
                    "StartupPolicyInProgress",
                    False,
                    self.env.now(),
                    "InOrderStartupPolicyCompleted",
                    "in order startup policy has completed",
                ),
            )
        else:
            self._sync_status()
        self.record("phase", "running")
        self._run_leader()

    def _run_leader(self) -> None:
        if self.leader_rjob is None:
            with self.parked():  # nothing simulated ever ends: a JobSet of servers runs forever
                self.pacer.forever()
        leader_job = self.children[self.leader_rjob][0]
        while True:
            for index, pod in sorted(leader_job.active.items()):
                if index != LEADER and self.program is not None and self.program.index_gated:
                    self.index_gate_success(leader_job, index, pod)
            pod = leader_job.active[LEADER]
            outcome = ProgramRun(self, pod).run()
            if outcome.disruption is not None and outcome.disruption.kind == "evict":
                self.kueue_evict(outcome.disruption, node=pod.node or "")
            elif outcome.disruption is not None:
                outcome = disruption.disrupt(self, outcome.disruption, pod)
            else:
                hold = self.program.exit_hold if self.program and outcome.code else 0.0
                disruption.hold_exit(pod, outcome.code, hold)
                self.pacer.pause(hold)
                pod.terminate(outcome.code, outcome.reason)
            if outcome.code == 0:
                leader_job.pod_succeeded(LEADER)
                if leader_job.done:
                    leader_job.complete()
                if self._success_policy_met():
                    return
                with self.parked():  # e.g. no successPolicy: the workers never finish
                    self.pacer.forever()
            decision = leader_job.pod_failed(LEADER, pod)
            if decision.action == "fail":
                self.fail_job(leader_job, decision.reason, decision.message)
                raise JobSetFailed(leader_job)
            if decision.counted:
                self.pacer.pause(leader_job.backoff_seconds())
            self.bring_up(leader_job, leader_job.create_pods([LEADER]))

    def _success_policy_met(self) -> bool:
        policy = (self.obj.get("spec") or {}).get("successPolicy") or {"operator": "All"}
        targets = policy.get("targetReplicatedJobs") or [r["name"] for r in self.rjobs]
        jobs = [job for name in targets for job in self.children.get(name, [])]
        done = [job.finished == "Complete" for job in jobs]
        return any(done) if policy.get("operator") == "Any" else bool(done) and all(done)

    # -- failure policy --------------------------------------------------------------------------

    def _apply_failure_policy(self, failed: JobSim) -> bool:
        """True when the JobSet restarts, False when it has failed for good."""
        policy = (self.obj.get("spec") or {}).get("failurePolicy")
        first = f"(first failed job: {failed.name})"
        if not policy:
            self._finish(
                completed=False,
                reason="FailedJobs",
                message=f"jobset failed due to one or more job failures {first}",
            )
            return False
        rjob = failed.obj["metadata"]["labels"].get(JS + "replicatedjob-name")
        action = "RestartJobSet"
        for rule in policy.get("rules") or []:
            reasons = rule.get("onJobFailureReasons") or []
            targets = rule.get("targetReplicatedJobs") or []
            if (not reasons or failed.failure_reason in reasons) and (not targets or rjob in targets):
                action = rule.get("action", "RestartJobSet")
                break
        if action == "FailJobSet":
            self._finish(
                completed=False,
                reason="FailJobSetFailurePolicyAction",
                message=f"applying FailJobSet failure policy action {first}",
            )
            return False
        counts = action != "RestartJobSetAndIgnoreMaxRestarts"
        if counts and self.counted_restarts >= int(policy.get("maxRestarts", 0)):
            self._finish(
                completed=False,
                reason="ReachedMaxRestarts",
                message=f"jobset failed due to reaching max number of restarts {first}",
            )
            return False
        self.env.emit(
            self.obj,
            "RestartJobSetFailurePolicyAction",
            f"applying RestartJobSet failure policy action {first}",
            warning=True,
            component="jobset-controller",
        )
        self._delete_children(only_active=False)
        self.restarts += 1
        self.counted_restarts += int(counts)
        self._sync_status()
        self.record("phase", f"restarting (restart {self.restarts})")
        return True

    # -- children --------------------------------------------------------------------------------

    @staticmethod
    def _pod_spec(rjob: Obj) -> Obj:
        return (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}

    def _child_labels(self, rjob: Obj, index: int) -> dict[str, str]:
        name = f"{self.name}-{rjob['name']}-{index}"
        group = str(rjob.get("groupName") or DEFAULT_GROUP)

        def replicas(r: Obj) -> int:
            return int(r.get("replicas", 1))

        def in_group(r: Obj) -> bool:
            return str(r.get("groupName") or DEFAULT_GROUP) == group

        position = next(i for i, r in enumerate(self.rjobs) if r["name"] == rjob["name"])
        earlier = self.rjobs[:position]
        labels = {
            JS + "jobset-name": self.name,
            JS + "jobset-uid": self.uid,
            JS + "replicatedjob-name": rjob["name"],
            JS + "restart-attempt": str(self.restarts),
            JS + "replicatedjob-replicas": str(replicas(rjob)),
            JS + "global-replicas": str(sum(map(replicas, self.rjobs))),
            JS + "job-index": str(index),
            JS + "job-key": hashlib.sha1(f"{self.namespace}/{name}".encode()).hexdigest(),
            JS + "job-global-index": str(sum(map(replicas, earlier)) + index),
            JS + "group-name": group,
            JS + "group-replicas": str(sum(replicas(r) for r in self.rjobs if in_group(r))),
            JS + "job-group-index": str(sum(replicas(r) for r in earlier if in_group(r)) + index),
        }
        if coordinator := self._coordinator():
            labels[JS + "coordinator"] = coordinator
        return labels

    def _create_child(self, rjob: Obj, index: int) -> JobSim:
        template = copy.deepcopy(rjob.get("template") or {})
        tmeta = template.get("metadata") or {}
        extra = self._child_labels(rjob, index)
        labels = {**(tmeta.get("labels") or {}), **extra}
        annotations = {**(tmeta.get("annotations") or {}), **extra}
        spec = template.get("spec") or {}
        pod_template = spec.setdefault("template", {})
        pmeta = pod_template.setdefault("metadata", {})
        pmeta["labels"] = {**(pmeta.get("labels") or {}), **extra}
        pmeta["annotations"] = {**(pmeta.get("annotations") or {}), **annotations}
        if ((self.obj.get("spec") or {}).get("network") or {}).get("enableDNSHostnames"):
            pod_template.setdefault("spec", {})["subdomain"] = self._subdomain()
        spec["suspend"] = False
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{self.name}-{rjob['name']}-{index}",
                "namespace": self.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [ko.owner_reference(self.obj)],
            },
            "spec": spec,
        }
        created = self.env.kube.create("jobs", job, namespace=self.namespace)
        self.record("job", f"{created['metadata']['name']} created")
        child = JobSim(self.env, created, workload=self.name)
        child.start()
        self.current()  # the JobSet may have been deleted meanwhile: then stop here
        return child

    def _delete_children(self, *, only_active: bool) -> None:
        """The controller deletes child Jobs with foreground propagation (jobset_controller.go
        589-612): each Job stays, with a deletionTimestamp, until its pods have terminated; pods
        already terminating (a Job at FailureTarget) finish in their own time."""
        deleted: list[tuple[JobSim, list[PodSim], list[PodSim]]] = []
        for jobs in self.children.values():
            for job in jobs:
                if only_active and job.finished is not None:
                    continue
                earlier = list(job.terminating.values())
                for pod in job.active.values():
                    pod.begin_termination()
                fresh = list(job.active.values())
                job.active.clear()
                try:
                    self.env.kube.delete(
                        "jobs", job.name, namespace=self.namespace, propagation_policy="Foreground"
                    )
                except KubeApiError as exc:
                    if exc.code != 404:
                        raise
                self.record("job", f"{job.name} deleted by the JobSet controller")
                deleted.append((job, fresh, earlier))
        self.stop_pods([pod for _, fresh, _ in deleted for pod in fresh])
        for job, fresh, earlier in deleted:
            for pod in earlier:
                pod.finish_termination()
            for pod in fresh + earlier:
                pod.untrack()  # the Job is gone with them (foreground)
            job.terminating.clear()

    # -- status ----------------------------------------------------------------------------------

    def _rjob_status(self) -> list[Obj]:
        out = []
        for rjob in self.rjobs:
            jobs = self.children.get(rjob["name"], [])
            ready = sum(
                1
                for j in jobs
                if j.finished is None
                and sum(1 for p in j.active.values() if p.phase == "Running")
                >= min(j.parallelism, j.completions)
            )
            out.append(
                {
                    "name": rjob["name"],
                    "ready": ready,
                    "succeeded": sum(1 for j in jobs if j.finished == "Complete"),
                    "failed": sum(1 for j in jobs if j.finished == "Failed"),
                    "active": sum(1 for j in jobs if j.finished is None and j.active),
                    "suspended": 0,
                }
            )
        return out

    def _sync_status(self, *conditions: Obj, terminal: str | None = None) -> None:
        def mutate(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            for cond in conditions:
                status["conditions"] = ko.upsert_condition(status.get("conditions"), cond)
            status["replicatedJobsStatus"] = self._rjob_status()
            status["restarts"] = self.restarts
            status["restartsCountTowardsMax"] = self.counted_restarts
            if terminal:
                status["terminalState"] = terminal

        self.modify(mutate)

    def _conditions(self, *conditions: Obj) -> None:
        self._sync_status(*conditions)

    def _finish(self, *, completed: bool, reason: str, message: str) -> None:
        kind = "Completed" if completed else "Failed"
        self._sync_status(ko.meta_condition(kind, True, self.env.now(), reason, message), terminal=kind)
        self.env.emit(self.obj, reason, message, warning=not completed, component="jobset-controller")
        self.record("phase", kind)
        self.env.log.info("%s/%s %s: %s", self.namespace, self.name, kind, message)
        self._delete_children(only_active=True)
        self._sync_status()
