"""A ``batch/v1`` Job workload (conversion and export): queue, pods, program, ending.

In ``tpu-slice`` placement the Job is Indexed with one pod per TPU host and the container's
script exits 0 on every completion index but 0; only index 0 runs the program.
"""

from __future__ import annotations

from typing import Any

from rlpipe.local.simulator import kube_objects as ko
from rlpipe.local.simulator.jobs import JobSim
from rlpipe.local.simulator.pods import PodSim
from rlpipe.local.simulator.program import Program, identify
from rlpipe.local.simulator.runtime import Outcome, ProgramRun
from rlpipe.local.simulator.workload import WorkloadSim

Obj = dict[str, Any]
LEADER = 0


class JobWorkload(WorkloadSim):
    resource = "jobs"
    job: JobSim | None = None

    def find_program(self) -> Program | None:
        return identify(((self.obj.get("spec") or {}).get("template") or {}).get("spec") or {})

    def suspended_condition(self, suspended: bool) -> Obj:
        if suspended:
            return ko.condition("Suspended", True, self.env.now(), "JobSuspended", "Job suspended")
        return ko.condition("Suspended", False, self.env.now(), "JobResumed", "Job resumed")

    def pod_sets(self) -> list[tuple[str, int]]:
        spec = self.obj.get("spec") or {}
        return [("main", int(spec.get("parallelism") or 1))]

    @property
    def pod_selector(self) -> str:
        return f"{ko.JOB_UID_LABELS[0]}={self.uid}"

    def stop_for_kueue(self, message: str) -> None:
        """Kueue stops a batch Job: ``suspend``, and ``startTime`` reset (Kueue jobs/job/
        job_controller.go:167-200), with its ``Stopped`` event (jobframework/reconciler.go:1151);
        the Job controller marks it Suspended and deletes its active pods, which do not count as
        failures."""
        now = self.env.now()

        def stop(obj: Obj) -> None:
            obj["spec"]["suspend"] = True
            status = obj.setdefault("status", {})
            status.pop("startTime", None)
            status["conditions"] = ko.upsert_condition(
                status.get("conditions"),
                ko.condition("Suspended", True, now, "JobSuspended", "Job suspended"),
            )

        self.modify(stop)
        self.env.emit(self.obj, "Stopped", message, component="kueue-admission")
        self.env.emit(self.obj, "Suspended", "Job suspended", component="job-controller")
        job = self.job
        if job is not None:
            pods = job.stop_active()
            self.stop_pods(pods)
            job.terminated(pods, counted=False)

    def play(self) -> None:
        self.admit()
        job = self.job = JobSim(self.env, self.current(), workload=self.name)
        job.start()
        self._warn_if_ungated(job)
        while job.finished is None:
            missing = [i for i in range(job.completions) if i not in job.succeeded and i not in job.active]
            pods = job.create_pods(missing)
            self.bring_up(job, pods, capacity_gap=self.once("unschedulable"), bad_image=self.bad_image())
            for index, pod in sorted(job.active.items()):
                if index != LEADER:
                    self.index_gate_success(job, index, pod)
            leader = job.active.get(LEADER)
            if leader is not None:
                self._run_leader(job, leader)
            if job.finished is None and job.done:
                job.complete()
        self.record("phase", job.finished)
        self.env.log.info("%s/%s %s", self.namespace, self.name, job.finished)
        self.expire()

    def _run_leader(self, job: JobSim, pod: PodSim) -> None:
        outcome = ProgramRun(self, pod).run()
        fault = outcome.disruption
        if fault is not None and fault.kind == "evict":
            self.kueue_evict(fault, node=pod.node or "")
        elif fault is not None:
            pod.disrupt(fault.disruption_reason)
            if fault.disruption_reason != "DeletionByPodGC":
                self.stop_pods([pod], slow=fault.head_first)
        else:
            pod.terminate(outcome.code, outcome.reason)
        self._settle(job, pod, outcome)

    def _settle(self, job: JobSim, pod: PodSim, outcome: Outcome) -> None:
        if outcome.code == 0 and outcome.disruption is None:
            job.pod_succeeded(LEADER)
            return
        decision = job.pod_failed(LEADER, pod)
        if decision.action == "fail":
            self.fail_job(job, decision.reason, decision.message)
            return
        self.record("phase", f"pod {pod.name} failed; the Job controller replaces it")
        if decision.counted:
            self.pacer.pause(job.backoff_seconds())

    def _warn_if_ungated(self, job: JobSim) -> None:
        if job.completions > 1 and self.program is not None and not self.program.index_gated:
            self.env.log.warning(
                "%s/%s: %d completions run %s without an index-0 gate; every index would run "
                "it on a real cluster, only index 0 writes here",
                self.namespace,
                self.name,
                job.completions,
                self.program.module,
            )
