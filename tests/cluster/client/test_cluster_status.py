"""rlpipe.cluster against the Kubernetes API double, through the real ``kubernetes`` client: the status table: a workload's documents as a cluster writes them, and the verdict read from them.

Shared documents: documents.py; fixtures and the RBAC check of every call: conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.cluster import kinds
from rlpipe.core.failures import FailureClass, Preempted
from rlpipe.core.manifests import pathways
from rlpipe.local.kube_api import KubeApiServer
from tests.cluster.client.documents import (
    HF_TOKEN_LOOKALIKE,
    JOB_FAILED,
    JOBSET_FAILED,
    JOBSET_RUNNING,
    NS,
    REQ,
    SCHEDULED,
    STOPPED,
    T0,
    UNSCHEDULABLE_CPU,
    UNSCHEDULABLE_TPU,
    Harness,
    cond,
    event,
    job_pod,
    jobset_pod,
    make_harness,
    patch_status_of,
    rendered,
    running,
    suspend,
    term,
    terminated,
    waiting,
)

# --------------------------------------------------------------------------- status table

Setup = Callable[[KubeApiServer, dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    setup: Setup
    phase: str
    failure_class: FailureClass | None
    fragments: tuple[str, ...] = ()  # must all appear in the reason ("{name}" = the workload's name)
    absent: tuple[str, ...] = ()  # must not appear in the reason
    retryable: tuple[int, ...] = ()
    deadline: float | None = 600.0
    hours_later: float = 0.0  # how far the clock is moved before asking


def _pods(server: KubeApiServer, *pods: dict[str, Any]) -> None:
    for pod in pods:
        server.create("pods", pod)


# -- Job cases


def job_running(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, {"active": 1, "ready": 1, "startTime": T0})
    _pods(s, job_pod(job))


def job_succeeded(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(
        s,
        "jobs",
        job,
        {
            "succeeded": 1,
            "startTime": T0,
            "completionTime": T0,
            "conditions": [
                cond(
                    "SuccessCriteriaMet",
                    reason="CompletionsReached",
                    message="Reached expected number of succeeded pods",
                ),
                cond(
                    "Complete",
                    reason="CompletionsReached",
                    message="Reached expected number of succeeded pods",
                ),
            ],
        },
    )
    _pods(
        s,
        job_pod(
            job,
            phase="Succeeded",
            conditions=STOPPED,
            containers=[terminated("workload-container", 0, "Completed")],
        ),
    )


def job_preempted(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, JOB_FAILED)
    _pods(
        s,
        job_pod(
            job,
            phase="Failed",
            conditions=[
                cond(
                    "DisruptionTarget",
                    reason="PreemptionByScheduler",
                    message="default-scheduler: preempting to accommodate a higher priority pod",
                ),
                *STOPPED,
            ],
            containers=[terminated("workload-container", 143)],
        ),
    )


def job_node_shutdown(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, JOB_FAILED)
    _pods(
        s,
        job_pod(
            job,
            phase="Failed",
            conditions=STOPPED,
            reason="Terminated",
            message="Pod was terminated in response to imminent node shutdown.",
            containers=[terminated("workload-container", 137)],
        ),
    )


def job_oom(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, JOB_FAILED)
    _pods(
        s,
        job_pod(
            job,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("workload-container", 137, "OOMKilled")],
        ),
    )


def job_image_pull_backoff(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("Ready", "False", "ContainersNotReady"), cond("PodScheduled")],
            containers=[
                waiting("workload-container", "ImagePullBackOff", f'Back-off pulling image "{REQ.image}"')
            ],
        ),
    )


def job_err_image_pull(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("PodScheduled")],
            containers=[
                waiting(
                    "workload-container",
                    "ErrImagePull",
                    f'rpc error: code = NotFound desc = failed to pull and unpack image "{REQ.image}9": failed to '
                    f'resolve reference "{REQ.image}9": {REQ.image}9: not found',
                )
            ],
        ),
    )


def job_err_image_pull_registry_timeout(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("PodScheduled")],
            containers=[
                waiting(
                    "workload-container",
                    "ErrImagePull",
                    f'rpc error: code = Unknown desc = failed to pull and unpack image "{REQ.image}": failed to copy: '
                    "httpReadSeeker: failed open: dial tcp 142.250.102.82:443: i/o timeout",
                )
            ],
        ),
    )


def job_secret_missing(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            conditions=[cond("PodScheduled")],
            containers=[
                waiting("workload-container", "CreateContainerConfigError", 'secret "hf-token" not found')
            ],
        ),
    )


def _job_exit(code: int) -> Setup:
    def setup(s: KubeApiServer, job: dict[str, Any]) -> None:
        patch_status_of(s, "jobs", job, JOB_FAILED)
        _pods(
            s,
            job_pod(
                job,
                phase="Failed",
                conditions=STOPPED,
                containers=[
                    terminated(
                        "workload-container",
                        code,
                        message='Traceback (most recent call last):\n  File "to_maxtext.py"\n'
                        f"ValueError: checkpoint shape mismatch token={HF_TOKEN_LOOKALIKE}",
                    )
                ],
            ),
        )

    return setup


def job_failed_no_pods(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(
        s,
        "jobs",
        job,
        {
            "startTime": T0,
            "conditions": [
                cond(
                    "FailureTarget",
                    reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline",
                ),
                cond(
                    "Failed",
                    reason="DeadlineExceeded",
                    message="Job was active longer than specified deadline",
                ),
            ],
        },
    )


def job_unschedulable(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, {"active": 1, "startTime": T0})
    _pods(
        s,
        job_pod(
            job,
            phase="Pending",
            node=None,
            containers=[],
            conditions=[cond("PodScheduled", "False", "Unschedulable", UNSCHEDULABLE_CPU)],
        ),
    )


def job_kueue_suspended(s: KubeApiServer, job: dict[str, Any]) -> None:
    """Suspended by Kueue's webhook at creation: the Job controller's Suspended condition carries the
    creation time (the queued deadline is timed from the latest Suspended=True transition)."""
    suspend(s, "jobs", job["metadata"]["name"])
    created = job["metadata"]["creationTimestamp"]
    patch_status_of(
        s,
        "jobs",
        job,
        {
            "conditions": [
                {
                    **cond("Suspended", reason="JobSuspended", message="Job suspended"),
                    "lastTransitionTime": created,
                }
            ]
        },
    )
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    _pods(s)
    s.create(
        "events",
        event(
            "Job",
            name,
            "Suspended",
            "Kueue suspended the Job",
            uid=uid,
            api_version="batch/v1",
            component="kueue-job-controller",
        ),
    )
    s.create(
        "events",
        event(
            "Job",
            name,
            "CreatedWorkload",
            f"Created Workload: {NS}/job-{name}-4c1f2",
            uid=uid,
            api_version="batch/v1",
            component="kueue-job-controller",
        ),
    )
    s.create(
        "events",
        event(
            "Workload",
            f"job-{name}-4c1f2",
            "Pending",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
            "flavor cpu-np, 32 more needed",
            api_version="kueue.x-k8s.io/v1beta1",
        ),
    )


KUEUE_PREEMPTED = (  # Kueue v0.14.8 pkg/scheduler/preemption/preemption.go:163
    "Preempted to accommodate a workload (UID: 5c6a1e0f, JobUID: 77b1c2d3) due to prioritization in the ClusterQueue"
)


def job_kueue_evicted(s: KubeApiServer, job: dict[str, Any]) -> None:
    """Kueue preempted it: EvictedDueToPreempted and Preempted on its Workload (workload.go:1367-1371,
    preemption.go:190), Stopped on the Job (jobframework/reconciler.go:1151); never a condition on the Job."""
    job_kueue_suspended(s, job)
    name = job["metadata"]["name"]
    s.create(
        "events",
        event(
            "Job",
            name,
            "Stopped",
            KUEUE_PREEMPTED,
            uid=job["metadata"]["uid"],
            api_version="batch/v1",
            component="kueue-job-controller",
        ),
    )
    for reason in ("Preempted", "EvictedDueToPreempted"):
        s.create(
            "events",
            event(
                "Workload", f"job-{name}-4c1f2", reason, KUEUE_PREEMPTED, api_version="kueue.x-k8s.io/v1beta2"
            ),
        )


def job_readmitted_after_eviction(s: KubeApiServer, job: dict[str, Any]) -> None:
    """Kueue evicted it once and has admitted it again: the old event is history, not a verdict."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    resumed = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch_status_of(
        s,
        "jobs",
        job,
        {
            "active": 1,
            "startTime": resumed,
            "conditions": [
                {**cond("Suspended", "False", "JobResumed", "Job resumed"), "lastTransitionTime": resumed}
            ],
        },
    )
    _pods(s, job_pod(job, phase="Pending", node=None, containers=[], conditions=[]))
    for reason, message in (
        (
            "Stopped",
            "Preempted to accommodate a workload (UID: 5c6a1e) due to prioritization in the ClusterQueue",
        ),
        ("Started", "Admitted by clusterQueue cpu-cq"),
    ):
        s.create(
            "events",
            event(
                "Job",
                name,
                reason,
                message,
                uid=uid,
                api_version="batch/v1",
                component="kueue-job-controller",
            ),
        )


def _admitted_a_minute_ago_after_two_hours_in_kueue(s: KubeApiServer, js: dict[str, Any]) -> None:
    resumed = (datetime.now(UTC) + timedelta(hours=2, minutes=-1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch_status_of(
        s,
        "jobsets",
        js,
        {
            "conditions": [
                {
                    **cond("Suspended", "False", "ResumeJobs", "jobset is resumed"),
                    "lastTransitionTime": resumed,
                }
            ]
        },
    )


def job_disrupted_not_yet_failed(s: KubeApiServer, job: dict[str, Any]) -> None:
    patch_status_of(s, "jobs", job, {"active": 1, "startTime": T0, "terminating": 1})
    _pods(
        s,
        job_pod(
            job,
            conditions=[
                cond("DisruptionTarget", reason="EvictionByEvictionAPI", message="Eviction API: evicting"),
                *SCHEDULED,
            ],
        ),
    )


# -- JobSet cases


def js_running(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(s, "jobsets", js, JOBSET_RUNNING)
    _pods(s, jobset_pod(js, "pathways-head"), jobset_pod(js, "worker", 0, 0), jobset_pod(js, "worker", 0, 1))


def js_succeeded(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(
        s,
        "jobsets",
        js,
        {
            "terminalState": "Completed",
            "conditions": [
                cond(
                    "StartupPolicyCompleted",
                    reason="StartupPolicyCompleted",
                    message="startup policy completed",
                ),
                cond("Completed", reason="AllJobsCompleted", message="jobset completed successfully"),
            ],
        },
    )
    # Only the head decides: workers and sidecars are killed (143) when the head is done.
    _pods(
        s,
        jobset_pod(
            js,
            "pathways-head",
            phase="Succeeded",
            conditions=STOPPED,
            containers=[terminated(pathways.MAIN_CONTAINER, 0, "Completed")],
            init=[terminated("pathways-proxy", 143), terminated("pathways-rm", 143)],
        ),
        jobset_pod(
            js,
            "worker",
            0,
            0,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("pathways-worker", 143)],
        ),
    )


def js_worker_preempted_and_head_crashed(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(s, "jobsets", js, JOBSET_FAILED)
    _pods(
        s,
        jobset_pod(
            js,
            "pathways-head",
            phase="Failed",
            conditions=STOPPED,
            containers=[
                terminated(
                    pathways.MAIN_CONTAINER,
                    1,
                    message="jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: "
                    "Pathways worker tpu-v6e-4x8-7d1e-w1 unreachable",
                )
            ],
        ),
        jobset_pod(
            js,
            "worker",
            0,
            0,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("pathways-worker", 143)],
        ),
        jobset_pod(
            js,
            "worker",
            0,
            1,
            phase="Failed",
            conditions=[
                cond(
                    "DisruptionTarget",
                    reason="DeletionByTaintManager",
                    message="Taint manager: deleting due to NoExecute taint",
                ),
                *STOPPED,
            ],
            containers=[terminated("pathways-worker", 143)],
        ),
    )


def js_worker_oom(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(s, "jobsets", js, JOBSET_FAILED)
    _pods(
        s,
        jobset_pod(js, "pathways-head"),
        jobset_pod(
            js,
            "worker",
            0,
            1,
            conditions=[cond("Ready", "False", "ContainersNotReady"), cond("PodScheduled")],
            containers=[
                waiting(
                    "pathways-worker",
                    "CrashLoopBackOff",
                    "back-off 40s restarting failed container=pathways-worker",
                    restarts=3,
                    last=term(137, "OOMKilled"),
                )
            ],
        ),
    )


def _js_head_exit(code: int) -> Setup:
    def setup(s: KubeApiServer, js: dict[str, Any]) -> None:
        patch_status_of(s, "jobsets", js, JOBSET_FAILED)
        _pods(
            s,
            jobset_pod(
                js,
                "pathways-head",
                phase="Failed",
                conditions=STOPPED,
                containers=[terminated(pathways.MAIN_CONTAINER, code)],
                init=[terminated("pathways-proxy", 143), terminated("pathways-rm", 143)],
            ),
            jobset_pod(
                js,
                "worker",
                0,
                0,
                phase="Failed",
                conditions=STOPPED,
                containers=[terminated("pathways-worker", 143)],
            ),
        )

    return setup


def js_worker_exit_while_head_runs(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(s, "jobsets", js, JOBSET_FAILED)
    _pods(
        s,
        jobset_pod(js, "pathways-head"),
        jobset_pod(
            js,
            "worker",
            0,
            0,
            phase="Failed",
            conditions=STOPPED,
            containers=[terminated("pathways-worker", 42, message="F0301 pathways worker: bad flag")],
        ),
    )


def js_sidecar_err_image_pull(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(s, "jobsets", js, JOBSET_RUNNING)
    _pods(
        s,
        jobset_pod(
            js,
            "pathways-head",
            phase="Pending",
            conditions=[cond("Initialized", "False", "ContainersNotInitialized"), cond("PodScheduled")],
            init=[
                running("pathways-proxy"),
                waiting(
                    "pathways-rm",
                    "ErrImagePull",
                    "rpc error: code = NotFound desc = failed to pull and unpack image "
                    '"us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:v0.0.0-bogus": '
                    "manifest unknown",
                ),
            ],
            containers=[waiting(pathways.MAIN_CONTAINER, "PodInitializing", "")],
        ),
    )


def js_kueue_suspended(s: KubeApiServer, js: dict[str, Any]) -> None:
    name = js["metadata"]["name"]
    suspend(s, "jobsets", name)
    created = js["metadata"]["creationTimestamp"]
    patch_status_of(
        s,
        "jobsets",
        js,
        {
            "conditions": [
                {
                    **cond("Suspended", reason="SuspendedJobs", message="jobset is suspended"),
                    "lastTransitionTime": created,
                }
            ]
        },
    )
    s.create(
        "events",
        event(
            "Workload",
            f"jobset-{name}-9b7e1",
            "Pending",
            "couldn't assign flavors to pod set worker: insufficient quota for google.com/tpu in "
            "flavor tpu-v6e-4x8, request > maximum capacity (32 > 0)",
            api_version="kueue.x-k8s.io/v1beta1",
        ),
    )
    # Another workload's Kueue message must not leak into this one's reason.
    s.create(
        "events",
        event(
            "Workload",
            f"jobset-{name}x-11111",
            "Pending",
            "UNRELATED WORKLOAD",
            api_version="kueue.x-k8s.io/v1beta1",
        ),
    )


def js_workers_unschedulable(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(s, "jobsets", js, JOBSET_RUNNING)
    _pods(
        s,
        jobset_pod(js, "pathways-head"),
        *(
            jobset_pod(
                js,
                "worker",
                0,
                i,
                phase="Pending",
                containers=[],
                node=None,
                conditions=[cond("PodScheduled", "False", "Unschedulable", UNSCHEDULABLE_TPU)],
            )
            for i in range(2)
        ),
    )


def js_kueue_preempted_after_hours(s: KubeApiServer, js: dict[str, Any]) -> None:
    """Ran for hours, then preempted by Kueue: suspended again a minute ago (JobSet Suspended=True,
    jobset_controller.go:1036-1046), the Workload's EvictedDueToPreempted and the JobSet's Stopped."""
    name = js["metadata"]["name"]
    suspend(s, "jobsets", name)
    minute_ago = (datetime.now(UTC) + timedelta(hours=3, minutes=-1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch_status_of(
        s,
        "jobsets",
        js,
        {
            "conditions": [
                {
                    **cond("Suspended", reason="SuspendedJobs", message="jobset is suspended"),
                    "lastTransitionTime": minute_ago,
                }
            ]
        },
    )
    s.create("events", event("JobSet", name, "Stopped", KUEUE_PREEMPTED, uid=js["metadata"]["uid"]))
    s.create(
        "events",
        event(
            "Workload",
            f"jobset-{name}-9b7e1",
            "EvictedDueToPreempted",
            KUEUE_PREEMPTED,
            api_version="kueue.x-k8s.io/v1beta2",
        ),
    )


def js_failed_no_pods(s: KubeApiServer, js: dict[str, Any]) -> None:
    patch_status_of(s, "jobsets", js, JOBSET_FAILED)


P, C, R, T, PR = (
    FailureClass.PERMANENT,
    FailureClass.CAPACITY,
    FailureClass.RESOURCES,
    FailureClass.TRANSIENT,
    FailureClass.PREEMPTED,
)
JOB_POD = "{name}-x7k2p"
HEAD_POD = "{name}-pathways-head-0-0-a0q7z"

CASES = [
    Case("job-running", "Job", job_running, "running", None, ("running", "1 running")),
    Case("job-succeeded", "Job", job_succeeded, "succeeded", None, ("succeeded", "CompletionsReached")),
    Case("job-preempted", "Job", job_preempted, "failed", PR, (JOB_POD, "PreemptionByScheduler"), ("exit",)),
    Case("job-node-shutdown", "Job", job_node_shutdown, "failed", PR, (JOB_POD, "imminent node shutdown")),
    Case(
        "job-oom",
        "Job",
        job_oom,
        "failed",
        R,
        (JOB_POD, "workload-container", "OOMKilled", "exit code 137", f"memory limit {REQ.cpu_job.memory}"),
    ),
    Case(
        "job-image-pull-backoff",
        "Job",
        job_image_pull_backoff,
        "failed",
        P,
        (JOB_POD, "workload-container", "ImagePullBackOff", REQ.image),
    ),
    Case(
        "job-err-image-pull",
        "Job",
        job_err_image_pull,
        "failed",
        P,
        (JOB_POD, "workload-container", "ErrImagePull", "not found"),
    ),
    Case(
        "job-err-image-pull-registry-timeout",
        "Job",
        job_err_image_pull_registry_timeout,
        "running",
        None,
        ("i/o timeout",),
    ),
    Case(
        "job-secret-missing",
        "Job",
        job_secret_missing,
        "failed",
        P,
        (JOB_POD, "CreateContainerConfigError", 'secret "hf-token" not found'),
    ),
    Case(
        "job-exit-1",
        "Job",
        _job_exit(1),
        "failed",
        P,
        (JOB_POD, "workload-container", "exited with code 1", "ValueError: checkpoint shape mismatch"),
        (HF_TOKEN_LOOKALIKE, "\n"),
    ),
    Case(
        "job-exit-42-retryable",
        "Job",
        _job_exit(42),
        "failed",
        T,
        (JOB_POD, "workload-container", "exited with code 42", "retryable"),
        retryable=(42, 75),
    ),
    Case(
        "job-exit-42-not-listed", "Job", _job_exit(42), "failed", P, ("exited with code 42",), retryable=(75,)
    ),
    Case(
        "job-failed-no-pods",
        "Job",
        job_failed_no_pods,
        "failed",
        P,
        ("{name}", "DeadlineExceeded", "Job was active longer than specified deadline"),
    ),
    Case(
        "job-unschedulable-before-deadline",
        "Job",
        job_unschedulable,
        "queued",
        None,
        (JOB_POD, "Unschedulable", "3 Insufficient cpu"),
    ),
    Case(
        "job-unschedulable-after-deadline",
        "Job",
        job_unschedulable,
        "failed",
        C,
        (JOB_POD, "3 Insufficient cpu", "deadline 10m"),
        hours_later=1,
    ),
    Case(
        "job-unschedulable-no-deadline",
        "Job",
        job_unschedulable,
        "queued",
        None,
        (JOB_POD,),
        deadline=None,
        hours_later=48,
    ),
    Case(
        "job-kueue-suspended-before-deadline",
        "Job",
        job_kueue_suspended,
        "queued",
        None,
        ("{name}", "'user-queue'", "not admitted", "insufficient unused quota for cpu"),
    ),
    Case(
        "job-kueue-suspended-after-deadline",
        "Job",
        job_kueue_suspended,
        "failed",
        C,
        ("{name}", "not admitted after 2h00m", "deadline 10m", "insufficient unused quota for cpu"),
        hours_later=2,
    ),
    Case(
        "job-kueue-evicted",
        "Job",
        job_kueue_evicted,
        "failed",
        PR,
        ("evicted by Kueue", "Preempted to accommodate"),
    ),
    Case(
        "job-readmitted-after-eviction",
        "Job",
        job_readmitted_after_eviction,
        "queued",
        None,
        ("admitted, waiting for pods",),
        ("evicted",),
    ),
    Case(
        "job-disrupted-not-yet-failed",
        "Job",
        job_disrupted_not_yet_failed,
        "running",
        None,
        (JOB_POD, "EvictionByEvictionAPI"),
    ),
    Case("jobset-running", "JobSet", js_running, "running", None, ("running", "3 running")),
    Case("jobset-succeeded-workers-killed", "JobSet", js_succeeded, "succeeded", None, ("AllJobsCompleted",)),
    Case(
        "jobset-worker-preempted-wins-over-head-exit",
        "JobSet",
        js_worker_preempted_and_head_crashed,
        "failed",
        PR,
        ("{name}-worker-0-1-a1q7z", "DeletionByTaintManager"),
        ("exited with code 1",),
        retryable=(1,),
    ),
    Case(
        "jobset-worker-oom",
        "JobSet",
        js_worker_oom,
        "failed",
        R,
        ("worker pod {name}-worker-0-1-a1q7z", "pathways-worker", "OOMKilled"),
    ),
    Case(
        "jobset-head-exit-42-retryable",
        "JobSet",
        _js_head_exit(42),
        "failed",
        T,
        (HEAD_POD, pathways.MAIN_CONTAINER, "exited with code 42"),
        ("143",),
        retryable=(42,),
    ),
    Case(
        "jobset-head-exit-1",
        "JobSet",
        _js_head_exit(1),
        "failed",
        P,
        (f"head pod {HEAD_POD}", pathways.MAIN_CONTAINER, "exited with code 1"),
        retryable=(42,),
    ),
    # A worker's exit code is never the program's: 42 is retryable for the head only.
    Case(
        "jobset-worker-exit-is-not-the-programs",
        "JobSet",
        js_worker_exit_while_head_runs,
        "failed",
        P,
        ("worker pod {name}-worker-0-0-a0q7z", "pathways-worker", "exited with code 42"),
        retryable=(42,),
    ),
    Case(
        "jobset-sidecar-err-image-pull",
        "JobSet",
        js_sidecar_err_image_pull,
        "failed",
        P,
        (HEAD_POD, "pathways-rm", "ErrImagePull", "manifest unknown"),
    ),
    Case(
        "jobset-kueue-suspended-before-deadline",
        "JobSet",
        js_kueue_suspended,
        "queued",
        None,
        ("'user-queue'", "insufficient quota for google.com/tpu"),
        ("UNRELATED",),
    ),
    Case(
        "jobset-kueue-suspended-after-deadline",
        "JobSet",
        js_kueue_suspended,
        "failed",
        C,
        ("not admitted after 1h00m", "insufficient quota for google.com/tpu"),
        ("UNRELATED",),
        hours_later=1,
    ),
    Case(
        "jobset-workers-unschedulable-before-deadline",
        "JobSet",
        js_workers_unschedulable,
        "queued",
        None,
        ("{name}-worker-0-0-a0q7z", "Insufficient google.com/tpu", "+1 more"),
    ),
    Case(
        "jobset-workers-unschedulable-after-deadline",
        "JobSet",
        js_workers_unschedulable,
        "failed",
        C,
        ("worker pod {name}-worker-0-0-a0q7z", "Insufficient google.com/tpu"),
        hours_later=1,
    ),
    Case(
        "jobset-kueue-evicted-after-hours-of-running",
        "JobSet",
        js_kueue_preempted_after_hours,
        "failed",
        PR,
        ("evicted by Kueue", "Preempted: Preempted to accommodate"),
        ("not admitted",),
        hours_later=3,
    ),
    Case(
        "jobset-admitted-late-is-not-a-capacity-failure",
        "JobSet",
        _admitted_a_minute_ago_after_two_hours_in_kueue,
        "queued",
        None,
        ("admitted, waiting for pods for 1m",),
        hours_later=2,
    ),
    Case(
        "jobset-failed-no-pods",
        "JobSet",
        js_failed_no_pods,
        "failed",
        P,
        ("FailedJobs", "jobset failed due to one or more job failures", "no pod evidence"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_status_table(server: KubeApiServer, h: Harness, case: Case) -> None:
    obj = h.client.apply(rendered("convert" if case.kind == "Job" else "train"))
    name = obj["metadata"]["name"]
    case.setup(server, obj)
    h.clock.offset = timedelta(hours=case.hours_later)

    st = h.client.status(
        name,
        kind=case.kind,
        retryable_exit_codes=case.retryable,  # type: ignore[arg-type]
        queued_deadline_seconds=case.deadline,
    )

    assert (st.phase, st.failure_class) == (case.phase, case.failure_class), st.reason
    for fragment in case.fragments:
        assert fragment.format(name=name) in st.reason, (fragment, st.reason)
    for fragment in case.absent:
        assert fragment.format(name=name) not in st.reason, (fragment, st.reason)
    assert st.uid == obj["metadata"]["uid"] and st.name == name and st.exists
    assert st.admitted == ("suspended" not in case.id and "evicted" not in case.id)
    assert st.queue == REQ.tpu.queue
    json.dumps(st.to_dict())  # the stage function returns it as JSON


def test_preemption_wins_and_the_rest_stays_in_details(server: KubeApiServer, h: Harness) -> None:
    js = h.client.apply(rendered("train"))
    js_worker_preempted_and_head_crashed(server, js)
    st = h.client.status(js["metadata"]["name"], kind="JobSet")

    assert st.failure_class is FailureClass.PREEMPTED
    assert isinstance(st.failure(), Preempted) and st.failure().reason == st.reason  # type: ignore[union-attr]
    # The head's crash is a consequence, kept for the person reading, never the classification.
    assert any("exited with code 1" in d and "head pod" in d for d in st.details)
    assert st.pods == {"Failed": 3}


def test_success_is_not_overridden_by_pod_evidence(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    job_preempted(server, job)  # a disrupted pod and a Failed condition ...
    server.modify(
        "jobs",
        job["metadata"]["name"],
        lambda o: o["status"].__setitem__("conditions", [cond("Complete", reason="CompletionsReached")]),
        namespace=NS,
    )  # ... then a replacement completed
    st = h.client.status(job["metadata"]["name"], kind="Job")
    assert (st.phase, st.failure_class, st.failure()) == ("succeeded", None, None)


def test_pods_of_an_earlier_incarnation_are_ignored(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    stale = job_pod(
        job,
        phase="Failed",
        conditions=STOPPED,
        containers=[terminated("workload-container", 137, "OOMKilled")],
    )
    for key in kinds.JOB_UID_LABELS:
        stale["metadata"]["labels"][key] = "uid-of-a-deleted-job"
    stale["metadata"].pop("ownerReferences")
    server.create("pods", stale)
    patch_status_of(server, "jobs", job, JOB_FAILED)
    st = h.client.status(job["metadata"]["name"], kind="Job")
    assert st.failure_class is FailureClass.PERMANENT and "BackoffLimitExceeded" in st.reason


def test_pods_found_by_run_labels_when_controller_labels_are_missing(
    server: KubeApiServer, h: Harness
) -> None:
    job = h.client.apply(rendered("convert"))
    pod = job_pod(
        job,
        phase="Failed",
        conditions=STOPPED,
        containers=[terminated("workload-container", 137, "OOMKilled")],
    )
    for key in (*kinds.JOB_NAME_LABELS, *kinds.JOB_UID_LABELS):
        pod["metadata"]["labels"].pop(key)
    server.create("pods", pod)
    patch_status_of(server, "jobs", job, JOB_FAILED)
    assert h.client.status(job["metadata"]["name"], kind="Job").failure_class is FailureClass.RESOURCES


def test_missing_workload_is_reported_not_raised(h: Harness) -> None:
    st = h.client.status("rgone0000000-train-a1", kind="JobSet")
    assert (st.phase, st.failure_class, st.exists) == ("failed", FailureClass.PERMANENT, False)
    assert st.reason == "workload rgone0000000-train-a1 not found (deleted?)"


def test_status_rejects_an_unknown_kind(h: Harness) -> None:
    with pytest.raises(ValueError, match="kind"):
        h.client.status("x", kind="Deployment")  # type: ignore[arg-type]


def test_preemption_evidence_survives_on_the_failed_child_job(server: KubeApiServer) -> None:
    """A worker preempted → its Job fails by podFailurePolicy (DisruptionTarget) and the head exits 1
    when it loses the worker; the pods of the worker may be gone, yet the class stays preempted."""
    h = make_harness(server)
    js = h.client.apply(rendered("train"))
    name = js["metadata"]["name"]
    server.create(
        "jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{name}-worker-0",
                "namespace": NS,
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": "worker",
                },
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "pathways-worker", "image": "i"}],
                    }
                }
            },
        },
    )
    server.patch_status(
        "jobs",
        f"{name}-worker-0",
        {
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": f"Pod {NS}/{name}-worker-0-3-abcde has condition DisruptionTarget matching FailJob rule at index 0",
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": f"Pod {NS}/{name}-worker-0-3-abcde has condition DisruptionTarget matching FailJob rule at index 0",
                },
            ]
        },
        namespace=NS,
    )
    server.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-pathways-head-0-0-xyz12",
                "namespace": NS,
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": "pathways-head",
                },
            },
            "spec": {"containers": [{"name": "workload-container", "image": "i"}]},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "workload-container",
                        "ready": False,
                        "restartCount": 0,
                        "image": "i",
                        "imageID": "",
                        "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    }
                ],
            },
        },
    )
    server.patch_status(
        "jobsets",
        name,
        {
            "terminalState": "Failed",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "ReachedMaxRestarts",
                    "message": "jobset failed",
                    "lastTransitionTime": "2026-12-02T00:00:00Z",
                }
            ],
        },
        namespace=NS,
    )
    status = h.client.status(name, kind="JobSet")
    assert status.phase == "failed" and status.failure_class == FailureClass.PREEMPTED
    assert "DisruptionTarget" in status.reason


def test_an_eviction_is_read_while_the_pods_are_still_terminating(server: KubeApiServer, h: Harness) -> None:
    """After a Kueue eviction every pod is still on its node, deleted (deletionTimestamp) and held by
    the Job controller's finalizer while it terminates. A pod being deleted no longer counts as
    scheduled, so the client reads the events and the eviction is seen now, not after the pods
    are gone."""
    js = h.client.apply(rendered("train"))
    name = js["metadata"]["name"]
    js_kueue_preempted_after_hours(server, js)
    pods = [jobset_pod(js, "pathways-head"), jobset_pod(js, "worker", 0, 0)]
    for pod in pods:
        pod["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
        server.create("pods", pod)
        server.delete("pods", pod["metadata"]["name"], namespace=NS)  # held: terminating
    h.clock.offset = timedelta(hours=3)
    try:
        st = h.client.status(name, kind="JobSet", queued_deadline_seconds=600.0)
        assert (st.phase, st.failure_class) == ("failed", FailureClass.PREEMPTED), st.reason
        assert "evicted by Kueue (Preempted" in st.reason and st.pods == {"Running": 2}
    finally:
        for pod in pods:
            server.modify(
                "pods", pod["metadata"]["name"], lambda o: o["metadata"].pop("finalizers", None), namespace=NS
            )
