"""The preemption race, in both orders: the worker's Job fails first, or the head's does.

With ``failurePolicy: {maxRestarts: 0}`` (the rendered training JobSet) the JobSet controller fails
the JobSet at its first ``Failed`` child Job and then deletes every Job still active, with
foreground propagation (JobSet v0.10.1 ``da72d32b``: failure_policy.go:220-226,
jobset_controller.go:162-176 and 589-612). A disrupted worker's Job is ``Failed`` only after its
other pods have terminated (k8s pkg/controller/job/job_controller.go ``enactJobFinished``, "Delaying
marking the Job as finished, because there are still terminating pod(s)", since 1.31), and the
head gives up on the lost worker after its Pathways pipe timeout (60 s). When the workers take their
grace periods (30 s each) the head's Job fails first and the worker's Job, still at
``FailureTarget``, is deleted with the evidence. The classifier says ``preempted`` before that, and
the head's script holds a failed exit (core/commands.held_exit) so that the worker's Job is Failed
first and the evidence outlives the JobSet's failure (docs/simulator.md).

Shapes: pod ``DisruptionTarget`` reasons and messages (k8s.io/api v0.34.10 core/v1/types.go:3511,
3544-3548; scheduler preemption "<scheduler>: preempting to accommodate a higher priority pod"),
the Job controller's FailJob message (pod_failure_policy.go @ 95f08499 L73: "Pod %s/%s has condition
%v matching %v rule at index %d"), BackoffLimitExceeded "Job has reached the specified backoff
limit", JobSet ReachedMaxRestarts "jobset failed due to reaching max number of restarts (first
failed job: <job>)" (JobSet constants.go:41-42, failure_policy.go:337-338).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.cluster import ClusterClient
from rlpipe.cluster.status import WorkloadStatus, summarize
from rlpipe.core.failures import FailureClass
from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.request import validate_request
from rlpipe.local.kube_api import KubeApiServer, WatchEvent
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets, minimal_request
from tests.local.test_simulator import capture, create, events_for, kube, program_args, seed, simulate  # noqa: F401
from tests.local.test_simulator import render as render_for

NS = "rlpipe"
NAME = "r1-train-a1"
T = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
REQ = validate_request(minimal_request())
Obj = dict[str, Any]


def ts(seconds: float) -> str:
    return (T + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(type_: str, reason: str, message: str, at: float, status: str = "True") -> Obj:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": ts(at),
    }


def the_jobset(failed_on: str | None = None) -> Obj:
    js = copy.deepcopy(render(REQ, "train", 1, RenderContext(run_id="r1", bucket="b", namespace=NS)))
    js["metadata"].update(name=NAME, uid="js-uid", creationTimestamp=ts(-7200))
    conditions = [
        cond(
            "StartupPolicyCompleted",
            "InOrderStartupPolicyCompleted",
            "in order startup policy has completed",
            -7000,
        )
    ]
    js["status"] = {"conditions": conditions, "restarts": 0, "restartsCountTowardsMax": 0}
    if failed_on:
        message = f"jobset failed due to reaching max number of restarts (first failed job: {failed_on})"
        conditions.append(cond("Failed", "ReachedMaxRestarts", message, 90))
        js["status"]["terminalState"] = "Failed"
    return js


def pod(
    name: str,
    rjob: str,
    *,
    phase: str = "Running",
    disrupted: bool = False,
    deleting: bool = False,
    code: int | None = None,
) -> Obj:
    conditions = [{"type": "PodScheduled", "status": "True"}]
    if disrupted:
        conditions.append(
            cond(
                "DisruptionTarget",
                "PreemptionByScheduler",
                "default-scheduler: preempting to accommodate a higher priority pod",
                0,
            )
        )
    container = "workload-container" if rjob == "pathways-head" else "pathways-worker"
    state = {"terminated": {"exitCode": code, "reason": "Error"}} if code is not None else {"running": {}}
    meta: Obj = {
        "name": name,
        "namespace": NS,
        "labels": {"jobset.sigs.k8s.io/jobset-name": NAME, "jobset.sigs.k8s.io/replicatedjob-name": rjob},
        "finalizers": ["batch.kubernetes.io/job-tracking"],
    }
    if deleting:
        meta["deletionTimestamp"] = ts(30)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": f"node-{name}", "containers": [{"name": container, "image": "i"}]},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"name": container, "state": state}],
        },
    }


def job(rjob: str, *conditions: Obj, deleting: bool = False) -> Obj:
    meta: Obj = {
        "name": f"{NAME}-{rjob}-0",
        "namespace": NS,
        "labels": {"jobset.sigs.k8s.io/jobset-name": NAME, "jobset.sigs.k8s.io/replicatedjob-name": rjob},
    }
    if deleting:
        meta.update(deletionTimestamp=ts(91), finalizers=["foregroundDeletion"])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "status": {"conditions": list(conditions)},
    }


W0, W1, HEAD = f"{NAME}-worker-0-0-aaaaa", f"{NAME}-worker-0-1-bbbbb", f"{NAME}-pathways-head-0-0-ccccc"
FAILJOB = f"Pod {NS}/{W0} has condition DisruptionTarget matching FailJob rule at index 0"
WORKER_TARGET = cond("FailureTarget", "PodFailurePolicy", FAILJOB, 30)
WORKER_FAILED = cond("Failed", "PodFailurePolicy", FAILJOB, 60)
BACKOFF = "Job has reached the specified backoff limit"
HEAD_FAILED = (
    cond("FailureTarget", "BackoffLimitExceeded", BACKOFF, 60),
    cond("Failed", "BackoffLimitExceeded", BACKOFF, 60),
)

# What a status read sees, step by step: (the JobSet, its pods, its child Jobs).
START = [
    # 0 s: the scheduler preempts worker 0 (DisruptionTarget, then DELETE; SIGTERM, 30 s grace).
    (
        the_jobset(),
        [pod(HEAD, "pathways-head"), pod(W0, "worker", disrupted=True, deleting=True), pod(W1, "worker")],
        [job("pathways-head"), job("worker")],
    ),
    # 30 s: worker 0 exited (143), phase Failed: the Job controller judges it now.
    (
        the_jobset(),
        [
            pod(HEAD, "pathways-head"),
            pod(W0, "worker", phase="Failed", disrupted=True, deleting=True, code=143),
            pod(W1, "worker"),
        ],
        [job("pathways-head"), job("worker")],
    ),
    # 30 s: FailureTarget; worker 0 counted (gone), worker 1 deleted and terminating.
    (
        the_jobset(),
        [pod(HEAD, "pathways-head"), pod(W1, "worker", deleting=True)],
        [job("pathways-head"), job("worker", WORKER_TARGET)],
    ),
]
WORKER_FIRST = [
    *START,
    # 60 s: worker 1 gone, the worker's Job Failed; the JobSet fails on it and deletes the head's Job.
    (
        the_jobset(f"{NAME}-worker-0"),
        [pod(HEAD, "pathways-head", deleting=True)],
        [job("pathways-head", deleting=True), job("worker", WORKER_TARGET, WORKER_FAILED)],
    ),
    # later: the head is gone; the failed worker Job is kept (only active Jobs are deleted).
    (the_jobset(f"{NAME}-worker-0"), [], [job("worker", WORKER_TARGET, WORKER_FAILED)]),
]
HEAD_FIRST = [
    *START,
    # 60 s: the head's pipe timeout fires before worker 1 has terminated: it exits 1, its Job fails
    # first, the JobSet fails on it and deletes the worker's Job, still at FailureTarget.
    (
        the_jobset(f"{NAME}-pathways-head-0"),
        [pod(HEAD, "pathways-head", phase="Failed", code=1), pod(W1, "worker", deleting=True)],
        [job("pathways-head", *HEAD_FAILED), job("worker", WORKER_TARGET, deleting=True)],
    ),
    # later: the worker's Job and its pods are gone; only the head's exit code is left.
    (
        the_jobset(f"{NAME}-pathways-head-0"),
        [pod(HEAD, "pathways-head", phase="Failed", code=1)],
        [job("pathways-head", *HEAD_FAILED)],
    ),
]


def verdicts(steps: list[tuple[Obj, list[Obj], list[Obj]]], *, read_child_jobs: bool) -> list[WorkloadStatus]:
    """``read_child_jobs``: the client lists the child Jobs of a running JobSet too (today it does
    only for a failed one, cluster/client.py ``_status_of``)."""
    out = []
    for js, pods, jobs in steps:
        failed = js["status"].get("terminalState") == "Failed"
        out.append(
            summarize(
                "JobSet",
                js,
                pods,
                [],
                now=T + timedelta(minutes=5),
                queued_deadline_seconds=600.0,
                child_jobs=jobs if (read_child_jobs or failed) else [],
            )
        )
    return out


@pytest.mark.parametrize("order", ["worker-first", "head-first"])
@pytest.mark.parametrize("read_child_jobs", [True, False], ids=["client-reads-child-jobs", "client-as-is"])
def test_preempted_from_the_disruption_on_in_both_orders(order: str, read_child_jobs: bool) -> None:
    steps = WORKER_FIRST if order == "worker-first" else HEAD_FIRST
    seen = verdicts(steps, read_child_jobs=read_child_jobs)
    # From the moment the worker is disrupted the failure is certain: a TPU worker never exits 0,
    # and its Job's podFailurePolicy fails on DisruptionTarget, and maxRestarts 0 fails the JobSet.
    assert (seen[0].phase, seen[0].failure_class) == ("failed", FailureClass.PREEMPTED), seen[0].reason
    assert "DisruptionTarget" in seen[0].reason or "PreemptionByScheduler" in seen[0].reason
    first_failed = next(s for s in seen if s.phase == "failed")
    assert first_failed.failure_class is FailureClass.PREEMPTED
    # Every read while any evidence exists says preempted; the JobSet's own verdict comes later.
    with_evidence = seen[:-1] if order == "head-first" else seen
    for i, st in enumerate(with_evidence):
        if not read_child_jobs and i == 2:
            continue  # FailureTarget is on the child Job only, which the client reads only once failed
        assert (st.phase, st.failure_class) == ("failed", FailureClass.PREEMPTED), (i, st.reason)


def test_the_job_failing_first_is_reproduced() -> None:
    worker_first, head_first = WORKER_FIRST[3][0], HEAD_FIRST[3][0]
    assert worker_first["status"]["conditions"][-1]["message"].endswith(
        f"(first failed job: {NAME}-worker-0)"
    )
    assert head_first["status"]["conditions"][-1]["message"].endswith(
        f"(first failed job: {NAME}-pathways-head-0)"
    )
    # Once the worker's Job is gone, nothing but the head's exit is left: why the verdict must come first.
    assert verdicts(HEAD_FIRST, read_child_jobs=True)[-1].failure_class is FailureClass.PERMANENT


def test_a_disrupted_program_pod_is_judged_only_once_failed() -> None:
    """The head (and a conversion pod) might still exit 0 in its grace period: not yet certain."""
    js = the_jobset()
    head = pod(HEAD, "pathways-head", disrupted=True, deleting=True)
    st = summarize("JobSet", js, [head, pod(W0, "worker")], [], now=T, queued_deadline_seconds=600.0)
    assert st.phase == "running", st.reason
    head = pod(HEAD, "pathways-head", phase="Failed", disrupted=True, deleting=True, code=143)
    st = summarize("JobSet", js, [head, pod(W0, "worker")], [], now=T, queued_deadline_seconds=600.0)
    assert (st.phase, st.failure_class) == ("failed", FailureClass.PREEMPTED), st.reason


def test_a_jobset_that_restarts_is_not_failed_early() -> None:
    """With restarts left, RestartJobSet restarts instead of failing (failure_policy.go:220-226)."""
    js = the_jobset()
    js["spec"]["failurePolicy"]["maxRestarts"] = 3
    st = summarize(
        "JobSet", js, START[0][1], [], now=T, queued_deadline_seconds=600.0, child_jobs=START[2][2]
    )
    assert st.phase == "running", st.reason
    assert any("DisruptionTarget" in d or "PreemptionByScheduler" in d for d in st.details)


# ------------------------------------------------------------------------------ on the simulator


class Mirror:
    """What a status read would see at every moment: the objects as watchers saw them, and the
    classifier's verdict after each change (as if the pipeline asked right then)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.objects: dict[tuple[str, str], Obj] = {}
        self.verdicts: list[WorkloadStatus] = []
        self.lock = threading.Lock()

    def __call__(self, event: WatchEvent) -> None:
        plural, obj = event.resource.plural, event.object
        if plural not in ("jobsets", "jobs", "pods"):
            return
        with self.lock:
            key = (plural, obj["metadata"]["name"])
            if event.type == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            js = self.objects.get(("jobsets", self.name))
            if js is None:
                return

            def mine(o: Obj) -> bool:
                return (o["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == self.name

            pods = sorted(
                (o for (p, _), o in self.objects.items() if p == "pods" and mine(o)),
                key=lambda o: o["metadata"]["name"],
            )
            jobs = [o for (p, _), o in self.objects.items() if p == "jobs" and mine(o)]
            self.verdicts.append(summarize("JobSet", js, pods, [], now=datetime.now(UTC), child_jobs=jobs))


RACES = [
    # (fault, the head's script holds a failed exit?, whose Job fails first)
    ("preempt@3:worker:scheduler", True, "worker"),  # prompt exits: the worker's Job is Failed first
    ("preempt@3:worker:scheduler:head-first", True, "worker"),  # the program gives up first; held
    ("preempt@3:worker:scheduler:head-first", False, "head"),  # no hold: the evidence is deleted
]


def without_the_hold(train: Obj) -> Obj:
    """The rendered JobSet with a head script that exits at once (the lost-evidence order)."""
    head = train["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert "hold_seconds=90\n" in head["command"][2]
    head["command"][2] = head["command"][2].replace("hold_seconds=90\n", "hold_seconds=0\n")
    return train


@pytest.mark.parametrize(
    ("fault", "held", "first"), RACES, ids=["prompt", "head-first-held", "head-first-unheld"]
)
def test_the_simulator_plays_both_orders_and_the_evidence_survives_the_held_exit(
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
    fault: str,
    held: bool,
    first: str,
) -> None:
    train = render_for(buckets, "train", training={"num_batches": 10})
    train = train if held else without_the_hold(train)
    name = train["metadata"]["name"]
    mirror = Mirror(name)
    kube.add_listener(mirror)
    pods = capture(kube, "pods")
    sim = simulate(f"train:{fault}")
    seed(buckets, program_args(train)["load_parameters_path"])
    create(kube, train)
    assert sim.wait_finished(name, 15)
    js = kube.get("jobsets", name, namespace=NS)
    failed = next(c for c in js["status"]["conditions"] if c["type"] == "Failed")
    first_job = f"{name}-pathways-head-0" if first == "head" else f"{name}-worker-0"
    assert failed["message"].endswith(f"(first failed job: {first_job})"), failed
    remaining = {
        j["metadata"]["name"]
        for j in kube.list("jobs", namespace=NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
    }
    # Failed, the worker's Job is kept; at FailureTarget when the head's fails, it is deleted.
    assert (f"{name}-worker-0" in remaining) is (first == "worker")
    with mirror.lock:
        states = list(mirror.verdicts)
    first_failed = next(v for v in states if v.phase == "failed")
    assert first_failed.failure_class is FailureClass.PREEMPTED, first_failed.reason
    # The verdict came while the JobSet was still running, before any child Job was Failed.
    assert "the JobSet fails next" in first_failed.reason
    # A status read at any later time (the workflow polls every few minutes): what is left.
    late = ClusterClient(kube.api_client(), NS, sleep=lambda s: None).status(name, kind="JobSet")
    if first == "worker":
        assert (late.phase, late.failure_class) == ("failed", FailureClass.PREEMPTED), late.reason
    else:  # the race the hold closes: only the head's exit code 1 is left to read
        assert (late.phase, late.failure_class) == ("failed", FailureClass.PERMANENT), late.reason
    head_pod = next(p["metadata"]["name"] for p in pods if "-pathways-head-0-" in p["metadata"]["name"])
    program_gave_up = fault.endswith("head-first")
    assert ("rlpipe-hold:" in kube.pod_log(head_pod, namespace=NS)) is (program_gave_up and held)
    (cs,) = next(p for p in reversed(pods) if p["metadata"]["name"] == head_pod)["status"][
        "containerStatuses"
    ]
    # The head's container ends with the program's code (1) when it gave up, else with SIGTERM's.
    assert cs["state"]["terminated"]["exitCode"] == (1 if program_gave_up else 143)


DISRUPTIONS = [
    # (fault modifier, DisruptionTarget reason, is the pod object deleted?, event on the pod)
    ("kubelet", "TerminationByKubelet", False, None),  # node shutdown: phase Failed, reason Terminated
    ("scheduler", "PreemptionByScheduler", True, "Preempted"),
    ("taint", "DeletionByTaintManager", True, "TaintManagerEviction"),
    ("eviction-api", "EvictionByEvictionAPI", True, None),
    ("podgc", "DeletionByPodGC", True, None),  # node gone: Failed at once, force-deleted
]


@pytest.mark.parametrize(("by", "reason", "deleted", "event"), DISRUPTIONS, ids=[d[0] for d in DISRUPTIONS])
def test_each_disruption_reason_is_played_and_classified_preempted(
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
    by: str,
    reason: str,
    deleted: bool,
    event: str | None,
) -> None:
    pods, jobs = capture(kube, "pods"), capture(kube, "jobs")
    sim = simulate(f"convert:preempt:{by}")
    job = render_for(buckets, "convert")
    name = job["metadata"]["name"]
    create(kube, job)
    assert sim.wait_finished(name, 15)
    disrupted = [
        p
        for p in pods
        if any(
            c["type"] == "DisruptionTarget" and c["status"] == "True"
            for c in p["status"].get("conditions") or []
        )
    ]
    assert disrupted and all(
        next(c for c in p["status"]["conditions"] if c["type"] == "DisruptionTarget")["reason"] == reason
        for p in disrupted
    )
    pod_name = disrupted[0]["metadata"]["name"]
    assert any(p["metadata"].get("deletionTimestamp") for p in disrupted) == deleted
    assert (kube.find("pods", pod_name, namespace=NS) is None) == deleted  # counted, then gone
    if reason != "DeletionByPodGC":
        final = [p for p in disrupted if p["status"]["phase"] == "Failed"][-1]
        (cs,) = final["status"]["containerStatuses"]
        assert cs["state"]["terminated"]["exitCode"] == 143
    if event:
        assert event in events_for(kube, pod_name)
    # FailureTarget, then Failed with the same reason and message.
    states = [
        [
            (c["type"], c["reason"])
            for c in j["status"].get("conditions") or []
            if c["type"] in ("FailureTarget", "Failed")
        ]
        for j in jobs
        if j["metadata"]["name"] == name
    ]
    assert [("FailureTarget", "PodFailurePolicy")] in states and states[-1] == [
        ("FailureTarget", "PodFailurePolicy"),
        ("Failed", "PodFailurePolicy"),
    ]
    st = ClusterClient(kube.api_client(), NS, sleep=lambda s: None).status(name, kind="Job")
    assert (st.phase, st.failure_class) == ("failed", FailureClass.PREEMPTED), st.reason


def test_failed_is_written_only_after_the_terminating_pods_are_gone(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    """The worker's Job at FailureTarget deletes its other pods; they linger, Running with a
    deletionTimestamp, exit 143, and only then is the Job Failed (status.terminating back to 0)."""
    pods, jobs = capture(kube, "pods"), capture(kube, "jobs")
    sim = simulate("train:preempt@3:worker:eviction-api")
    train = render_for(buckets, "train", training={"num_batches": 10})
    name = train["metadata"]["name"]
    seed(buckets, program_args(train)["load_parameters_path"])
    create(kube, train)
    assert sim.wait_finished(name, 15)
    worker = [j for j in jobs if j["metadata"]["name"] == f"{name}-worker-0"]

    def types(j: Obj) -> set[str]:
        return {c["type"] for c in j["status"].get("conditions") or [] if c["status"] == "True"}

    gap = [j for j in worker if "FailureTarget" in types(j) and "Failed" not in types(j)]
    assert gap and max(j["status"].get("terminating", 0) for j in gap) >= 1
    assert worker[-1]["status"].get("terminating", 0) == 0 and "Failed" in types(worker[-1])
    others = [
        p
        for p in pods
        if p["metadata"]["name"].startswith(f"{name}-worker-0-")
        and not any(c["type"] == "DisruptionTarget" for c in p["status"].get("conditions") or [])
    ]
    lingering = {
        p["metadata"]["name"]
        for p in others
        if p["metadata"].get("deletionTimestamp") and p["status"]["phase"] == "Running"
    }
    exited = {
        p["metadata"]["name"]
        for p in others
        if p["metadata"].get("deletionTimestamp")
        and p["status"]["phase"] == "Failed"
        and p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    }
    assert len(lingering) == 7 and lingering == exited  # the other seven hosts of the 4x8 slice


def with_pipe_timeout(train: Obj, seconds: int) -> Obj:
    """The rendered JobSet with the head's program giving up on a lost worker after ``seconds``
    (its ABSL flag, as a request's environment may set it)."""
    program = train["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    flags = next(e for e in program["env"] if e["name"] == "ABSL_FLAGS")
    flags["value"] = flags["value"].replace("=60s", f"={seconds}s")
    return train


def test_a_head_that_gives_up_before_the_disrupted_worker_exits_holds_its_exit_and_ends(
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """The head's pipe timeout (5 s) shorter than the worker's grace period (30 s, the worker
    killed at its end): the program gives up while the worker still terminates, and its exit is
    held as on every other path. This path once called the give-up without the hold and crashed
    the simulation (a TypeError), so the JobSet never ended."""
    train = with_pipe_timeout(render_for(buckets, "train", training={"num_batches": 10}), 5)
    name = train["metadata"]["name"]
    pods = capture(kube, "pods")
    sim = simulate("train:preempt@3:worker:scheduler:head-first")
    seed(buckets, program_args(train)["load_parameters_path"])
    create(kube, train)
    assert sim.wait_finished(name, 15)
    js = kube.get("jobsets", name, namespace=NS)
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in js["status"]["conditions"]), js[
        "status"
    ]
    head_pod = next(p["metadata"]["name"] for p in pods if "-pathways-head-0-" in p["metadata"]["name"])
    assert "rlpipe-hold:" in kube.pod_log(head_pod, namespace=NS)
