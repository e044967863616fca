"""Conformance: the same scenario on the in-process double and on the real control plane.

On the double, the simulator plays the Job controller, Kueue and the pods from a fault string. On
the real plane (tests/harness/real_cluster.py), the real Kueue admits, the real Job controller
makes the pods, the real scheduler binds them to GKE-shaped nodes, and the pod player
(``rlpipe.local.controlplane.kubelet``) writes only what a kubelet would: the containers' states.
The pipeline's classifier (``ClusterClient.status``) reads both, as the pipeline's identity on the
real one. Where the two disagree, the double is wrong.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.core.failures import FailureClass
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import SIGTERM_EXIT, Outcome, PodPlayer
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_slice
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator, Timing
from rlpipe.local.simulator.pods import DISRUPTIONS
from tests.conftest import Buckets
from tests.harness.patience import wait_until
from tests.harness.real_cluster import PARAMS, real_cluster  # noqa: F401
from tests.test_simulator import NS, create, kube, render, simulate  # noqa: F401

STAGE_USER = PARAMS["STAGE_GSA"]
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
TPU = "google.com/tpu"
SPOT_POOL = "tpu-v6e-spot"


@pytest.fixture(scope="module")
def nodes(real_cluster: ControlPlane) -> set[str]:
    return real_cluster.add_nodes([*cpu_pool(), *tpu_slice("4x8"), *tpu_slice("4x8", SPOT_POOL, spot=True)])


@pytest.fixture
def play(real_cluster: ControlPlane, nodes: set[str]) -> Iterator[Callable[[Outcome], PodPlayer]]:
    players: list[PodPlayer] = []

    def start(outcome: Outcome) -> PodPlayer:
        player = PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: outcome)
        players.append(player.__enter__())
        return player

    yield start
    for player in players:
        player.__exit__(None, None, None)


def _real_client(plane: ControlPlane) -> ClusterClient:
    return ClusterClient(plane.api_client(STAGE_USER), NS)


def _settled(read: Callable[[], WorkloadStatus]) -> WorkloadStatus:
    def verdict() -> WorkloadStatus | None:
        status = read()
        return status if status.phase in ("succeeded", "failed") else None

    return wait_until(verdict, 10, what="a verdict")


def _on_double(
    kube: KubeApiServer, simulate: Callable[..., ClusterSimulator], obj: dict[str, Any], fault: str
) -> WorkloadStatus:
    simulate(*([fault] if fault else []))
    create(kube, obj)
    client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    return _settled(lambda: client.status(obj["metadata"]["name"], kind=obj["kind"]))


def _on_real(
    plane: ControlPlane, play: Callable[[Outcome], PodPlayer], obj: dict[str, Any], outcome: Outcome
) -> WorkloadStatus:
    client = _real_client(plane)
    play(outcome)
    client.apply(obj)
    try:
        return _settled(lambda: client.status(obj["metadata"]["name"], kind=obj["kind"]))
    finally:
        with contextlib.suppress(Exception):
            client.delete(obj["kind"], obj["metadata"]["name"])


# (scenario, the double's fault for the convert Job, what the real pods' containers do, and the
# verdict DESIGN §6 gives it: both clusters must reach it, not merely agree)
CONVERT_SCENARIOS = [
    ("success", "", Outcome(exit_code=0, seconds=0.5), ("succeeded", None)),
    ("exit-1", "convert:exit:1", Outcome(exit_code=1, seconds=0.5), ("failed", FailureClass.PERMANENT)),
    (
        "oom",
        "convert:oom",
        Outcome(exit_code=137, seconds=0.5, reason="OOMKilled"),
        ("failed", FailureClass.RESOURCES),
    ),
    ("image-pull", "convert:image-pull", Outcome(image_pull=True), ("failed", FailureClass.PERMANENT)),
]


@pytest.mark.parametrize(
    ("scenario", "fault", "outcome", "verdict"), CONVERT_SCENARIOS, ids=[s[0] for s in CONVERT_SCENARIOS]
)
def test_the_convert_job_is_judged_alike_on_both_clusters(
    scenario: str,
    fault: str,
    outcome: Outcome,
    verdict: tuple[str, FailureClass | None],
    real_cluster: ControlPlane,
    play: Callable[[Outcome], PodPlayer],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    on_double = _on_double(kube, simulate, render(buckets, "convert", run_id=f"rdbl{scenario[:4]}"), fault)
    on_real = _on_real(real_cluster, play, render(buckets, "convert", run_id=f"rreal{scenario[:4]}"), outcome)
    assert (on_real.phase, on_real.failure_class) == (on_double.phase, on_double.failure_class), (
        f"double: {on_double.reason}\nreal: {on_real.reason}"
    )
    assert (on_real.phase, on_real.failure_class) == verdict, on_real.reason


def _disrupt_worker_0(reason: str) -> Callable[[dict[str, Any]], Outcome]:
    """Worker 0 of the slice is disrupted a moment after it starts; every other container runs."""

    def script(pod: dict[str, Any]) -> Outcome:
        labels = pod["metadata"]["labels"]
        worker_0 = (
            labels.get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
            and labels.get("batch.kubernetes.io/job-completion-index") == "0"
        )
        return Outcome(exit_code=None, seconds=1.0, disruption=reason if worker_0 else None)

    return script


@pytest.mark.parametrize("reason", ["PreemptionByScheduler", "TerminationByKubelet"])
def test_a_disrupted_tpu_worker_fails_the_train_jobset_as_preempted_on_both_clusters(
    reason: str,
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    from tests.test_simulator import program_args, seed

    how = {"PreemptionByScheduler": "scheduler", "TerminationByKubelet": "kubelet"}[reason]
    double_train = render(buckets, "train", run_id="rdblpreempt", training={"num_batches": 10})
    seed(buckets, program_args(double_train)["load_parameters_path"])
    on_double = _on_double(kube, simulate, double_train, f"train:preempt@3:worker:{how}")

    real_train = render(buckets, "train", run_id=f"rrealp{how[:5]}", training={"num_batches": 10})
    client = _real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, _disrupt_worker_0(reason)):
        client.apply(real_train)
        try:
            on_real = _settled(lambda: client.status(real_train["metadata"]["name"], kind="JobSet"))
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", real_train["metadata"]["name"])
    assert (on_real.phase, on_real.failure_class) == (on_double.phase, on_double.failure_class), (
        f"double: {on_double.reason}\nreal: {on_real.reason}"
    )
    assert on_real.failure_class == FailureClass.PREEMPTED, on_real.reason


def _left_behind(kubectl: Callable[..., str], run_id: str) -> list[str]:
    """Every object of the run still in the namespace: Jobs (a JobSet's children included),
    JobSets, pods and Kueue Workloads, by the run's label or its workloads' owner."""
    names = kubectl(
        "get", "jobsets,jobs,pods", "-n", NS, "-l", f"rlpipe.dev/run={run_id}", "-o", "name"
    ).split()
    workloads = kubectl("get", "workloads.kueue.x-k8s.io", "-n", NS, "-o", "name").split()
    return names + [w for w in workloads if run_id in w]


def test_a_cancelled_run_leaves_nothing_behind_on_both_clusters(
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """`rlpipe cancel` deletes the run's JobSet (Background propagation); garbage collection
    removes its child Jobs, their pods and Kueue's Workload. On the real plane that is the real
    garbage collector, Job controller and Kueue."""
    from tests.test_simulator import program_args, seed

    double_train = render(buckets, "train", run_id="rdblcancel", training={"num_batches": 400})
    seed(buckets, program_args(double_train)["load_parameters_path"])
    simulate()
    create(kube, double_train)
    double = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    wait_until(
        lambda: double.status(double_train["metadata"]["name"], kind="JobSet").phase == "running",
        5,
        what="running",
    )
    assert double.delete_run("rdblcancel") == [double_train["metadata"]["name"]]
    wait_until(lambda: not double.list_run_objects("rdblcancel"), 5, what="the double's objects gone")

    real_train = render(buckets, "train", run_id="rrealcancel", training={"num_batches": 400})
    client = _real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None)):
        client.apply(real_train)
        wait_until(
            lambda: client.status(real_train["metadata"]["name"], kind="JobSet").phase == "running",
            10,
            what="running",
        )
        assert client.delete_run("rrealcancel") == [real_train["metadata"]["name"]]
        assert client.delete_run("rrealcancel") == []  # idempotent, as the cancel path relies on
        wait_until(
            lambda: not _left_behind(real_cluster.kubectl, "rrealcancel"), 10, what="everything collected"
        )
    assert client.list_run_objects("rrealcancel") == double.list_run_objects("rdblcancel") == []


# ---- the head/worker race, in both orders -------------------------------------------------------


def _race_script(head_gives_up_after: float) -> Callable[[dict[str, Any]], Outcome]:
    """Worker 0 is preempted by the scheduler a moment after it starts and takes 3 s in its SIGTERM
    handler; the Pathways head loses it and exits 1 ``head_gives_up_after`` seconds later (its
    pipe timeout, plus the hold of ``commands.held_exit`` when that outlasts the worker's grace)."""
    worker_lost = threading.Event()

    def worker_0(sigterm: threading.Event) -> tuple[int, str]:
        sigterm.wait()
        worker_lost.set()
        return SIGTERM_EXIT, "Error"

    def head(sigterm: threading.Event) -> tuple[int, str]:
        while not worker_lost.wait(0.05):
            if sigterm.is_set():
                return SIGTERM_EXIT, "Error"
        return (SIGTERM_EXIT, "Error") if sigterm.wait(head_gives_up_after) else (1, "Error")

    def script(pod: dict[str, Any]) -> Outcome:
        labels = pod["metadata"]["labels"]
        job = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
        if job == "worker" and labels.get("batch.kubernetes.io/job-completion-index") == "0":
            return Outcome(
                exit_code=None,
                seconds=1.0,
                disruption="PreemptionByScheduler",
                terminating_seconds=3.0,
                program=worker_0,
            )
        if job == "pathways-head":
            return Outcome(program=head)
        return Outcome(exit_code=None)

    return script


def _watch_verdicts(
    read: Callable[[], WorkloadStatus],
    objects: Callable[[str], list[dict[str, Any]]],
    name: str,
    until: float,
) -> list[WorkloadStatus]:
    """Every verdict read while the race plays out, as the workflow's polls would see it, until the
    JobSet has failed and none of its pods is still running or terminating; then one more read."""
    seen: list[WorkloadStatus] = []

    def quiet() -> bool:
        seen.append(read())
        (jobset,) = [o for o in objects("jobsets") if o["metadata"]["name"] == name]
        failed = any(c["type"] == "Failed" for c in (jobset.get("status") or {}).get("conditions") or [])
        mine = [p for p in objects("pods") if p["metadata"].get("labels", {}).get(JOBSET_LABEL) == name]
        return failed and all(
            (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
            for p in mine
        )

    wait_until(quiet, until, what=f"JobSet {name} failed with no pod left running")
    seen.append(read())
    return seen


RACE_ORDERS = [
    # (order, the double's fault and head script hold, the real head's delay after losing the
    # worker, whose Job fails first, the verdict read once the race has played out)
    ("worker-first", ("preempt@3:worker:scheduler", True), None, "worker", FailureClass.PREEMPTED),
    (
        "head-first-held",
        ("preempt@3:worker:scheduler:head-first", True),
        6.0,
        "worker",
        FailureClass.PREEMPTED,
    ),
    (
        "head-first-unheld",
        ("preempt@3:worker:scheduler:head-first", False),
        1.0,
        "head",
        FailureClass.PERMANENT,
    ),
]


@pytest.mark.parametrize(
    ("order", "double", "head_delay", "first", "late_class"), RACE_ORDERS, ids=[r[0] for r in RACE_ORDERS]
)
def test_the_head_worker_race_ends_alike_in_both_orders_on_both_clusters(
    order: str,
    double: tuple[str, bool],
    head_delay: float | None,
    first: str,
    late_class: FailureClass,
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """With ``failurePolicy.maxRestarts: 0`` the JobSet fails at its first Failed child Job and
    deletes the others. A disrupted worker's Job is Failed only once its pod has terminated; when
    the head gives up sooner, the head's Job is first and the worker's, with the evidence, is
    deleted (tests/test_preemption_race.py plays this on the double)."""
    from tests.test_preemption_race import without_the_hold
    from tests.test_simulator import program_args, seed

    fault, held = double
    dbl = render(buckets, "train", run_id=f"rdblrace{order[:6]}", training={"num_batches": 10})
    dbl = dbl if held else without_the_hold(dbl)
    seed(buckets, program_args(dbl)["load_parameters_path"])
    simulate(f"train:{fault}")
    create(kube, dbl)
    double_client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    on_double = _watch_verdicts(
        lambda: double_client.status(dbl["metadata"]["name"], kind="JobSet"),
        lambda resource: kube.list(resource, namespace=NS),
        dbl["metadata"]["name"],
        15,
    )

    real = render(buckets, "train", run_id=f"rrealrace{order[:6]}", training={"num_batches": 10})
    name = real["metadata"]["name"]
    client = _real_client(real_cluster)
    script = (
        _race_script(head_delay) if head_delay is not None else _disrupt_worker_0("PreemptionByScheduler")
    )
    with PodPlayer(real_cluster.kubeconfig(), nodes, script):
        client.apply(real)
        try:
            on_real = _watch_verdicts(
                lambda: client.status(name, kind="JobSet"),
                lambda resource: json.loads(real_cluster.kubectl("get", resource, "-n", NS, "-o", "json"))[
                    "items"
                ],
                name,
                20,
            )
            jobset = json.loads(real_cluster.kubectl("get", "jobset", name, "-n", NS, "-o", "json"))
            left = set(
                real_cluster.kubectl(
                    "get", "jobs", "-n", NS, "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "name"
                ).split()
            )
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", name)
    failed = next(c for c in jobset["status"]["conditions"] if c["type"] == "Failed")
    first_job = f"{name}-pathways-head-0" if first == "head" else f"{name}-worker-0"
    assert failed["message"].endswith(f"(first failed job: {first_job})"), failed
    # The worker's Job is kept when it failed first; deleted with its evidence when the head's did.
    assert (f"job.batch/{name}-worker-0" in left) is (first == "worker"), left
    for seen in (on_double, on_real):
        first_failed = next(v for v in seen if v.phase == "failed")
        assert first_failed.failure_class is FailureClass.PREEMPTED, first_failed.reason
    late_double, late_real = on_double[-1], on_real[-1]
    assert (late_real.phase, late_real.failure_class) == (late_double.phase, late_double.failure_class), (
        f"double: {late_double.reason}\nreal: {late_real.reason}"
    )
    assert late_real.failure_class is late_class, late_real.reason


# ---- capacity: unschedulable pods, and a workload Kueue does not admit ------------------------


def _phases(client: ClusterClient, name: str, kind: str) -> tuple[WorkloadStatus, WorkloadStatus]:
    """The verdict without a queued deadline, then with one of a second that has passed."""
    waiting = wait_until(
        lambda: (s := client.status(name, kind=kind)).phase == "queued" and "for 0s" not in s.reason and s,
        10,
        what=f"{kind} {name} waiting a second",
    )
    return waiting, client.status(name, kind=kind, queued_deadline_seconds=0.5)


@contextlib.contextmanager
def _cordoned(plane: ControlPlane, nodes: set[str], pool: str) -> Iterator[None]:
    """The pool's nodes marked unschedulable, as an exhausted or scaled-down pool leaves pods."""
    names = sorted(n for n in nodes if f"-{pool}-" in n)
    for name in names:
        plane.kubectl("cordon", name)
    try:
        yield
    finally:
        for name in names:
            plane.kubectl("uncordon", name)


@contextlib.contextmanager
def _tpu_quota_taken(plane: ControlPlane, priority_class: str | None = None) -> Iterator[None]:
    """Another workload of the queue holds all its TPU quota (PARAMS TPU_CHIPS): a suspended
    Job Kueue admits, whose one pod asks for every chip and never schedules."""
    chips = PARAMS["TPU_CHIPS"]
    labels = {"kueue.x-k8s.io/queue-name": "user-queue"}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    blocker = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "quota-holder",
            "namespace": NS,
            "labels": labels,
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "hold",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {TPU: chips}, "limits": {TPU: chips}},
                        }
                    ],
                }
            },
        },
    }
    plane.apply([blocker])
    try:
        wait_until(
            lambda: (
                "false"
                in plane.kubectl("get", "job", "quota-holder", "-n", NS, "-o", "jsonpath={.spec.suspend}")
            ),
            10,
            what="the quota holder admitted",
        )
        yield
    finally:
        plane.kubectl("delete", "job", "quota-holder", "-n", NS, "--cascade=foreground", "--wait=true")


CAPACITY = [
    # (scenario, stage, the double's fault, how the real plane lacks the capacity, the words the
    # waiting verdict must hold on both)
    ("unschedulable", "convert", "convert:unschedulable:100000", "cordon", "waiting for capacity"),
    ("not-admitted", "train", "train:no-quota", "quota", "insufficient unused quota for google.com/tpu"),
]


@pytest.mark.parametrize(
    ("scenario", "stage", "fault", "lack", "words"), CAPACITY, ids=[c[0] for c in CAPACITY]
)
def test_a_workload_waiting_for_capacity_is_queued_then_capacity_after_the_deadline_on_both_clusters(
    scenario: str,
    stage: str,
    fault: str,
    lack: str,
    words: str,
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """Pods the scheduler cannot place, and a workload Kueue cannot admit, wait as ``queued``
    until the queued deadline, then fail as ``capacity`` (DESIGN §6): on the double from its
    fault, on the real plane from the real scheduler's and Kueue's own conditions and events."""
    kind = "Job" if stage == "convert" else "JobSet"
    dbl = render(buckets, stage, run_id=f"rdbl{scenario[:8]}")
    simulate(fault, timing=Timing(admission_delay=0.0, schedule_delay=0.0))
    create(kube, dbl)
    double = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    on_double = _phases(double, dbl["metadata"]["name"], kind)

    real = render(buckets, stage, run_id=f"rreal{scenario[:8]}")
    client = _real_client(real_cluster)
    lacking = _cordoned(real_cluster, nodes, "cpu-np") if lack == "cordon" else _tpu_quota_taken(real_cluster)
    with lacking, PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None)):
        client.apply(real)
        try:
            on_real = _phases(client, real["metadata"]["name"], kind)
        finally:
            with contextlib.suppress(Exception):
                client.delete(kind, real["metadata"]["name"])
    for waiting, late in (on_double, on_real):
        assert waiting.phase == "queued" and words in waiting.reason, waiting.reason
        assert (late.phase, late.failure_class) == ("failed", FailureClass.CAPACITY), late.reason
    assert on_double[0].admitted is on_real[0].admitted is (scenario == "unschedulable")
    if scenario == "not-admitted":  # the double's Kueue words it as the real one does, up to the
        # flavors it goes on to list
        assert on_double[0].reason.split("Kueue: ")[1] in on_real[0].reason, on_real[0].reason


# ---- Kueue preemption by a higher priority, and a Spot reclaim ---------------------------------

URGENT = "rlpipe-test-urgent"


@contextlib.contextmanager
def _preemption_within_the_queue(plane: ControlPlane) -> Iterator[None]:
    """The deploy's ClusterQueue never preempts (infra/cluster/k8s/kueue.yaml); an operator who
    shares it with urgent work sets ``withinClusterQueue: LowerPriority``. A Kueue
    WorkloadPriorityClass gives that work its priority (our workloads have none: 0)."""
    plane.apply(
        [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": URGENT},
                "value": 1000,
                "description": "a test's urgent work",
            }
        ]
    )
    patch = '{"spec":{"preemption":{"withinClusterQueue":"%s"}}}'
    plane.kubectl("patch", "clusterqueue", "rlpipe", "--type=merge", "-p", patch % "LowerPriority")
    try:
        yield
    finally:
        plane.kubectl("patch", "clusterqueue", "rlpipe", "--type=merge", "-p", patch % "Never")


def test_kueue_preempting_a_running_jobset_for_higher_priority_work_is_preempted_on_both_clusters(
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """Kueue evicts the running JobSet's Workload (``Preempted``), suspends the JobSet again and
    its controller removes the pods; the classifier reads the eviction from the Workload's events
    and says ``preempted`` (DESIGN §6). On the real plane the JobSet, once the urgent work is gone,
    is admitted again, and the classifier then says ``running``: the eviction is history."""
    from tests.test_simulator import program_args, seed

    dbl = render(buckets, "train", run_id="rdblkueuepre", training={"num_batches": 10})
    seed(buckets, program_args(dbl)["load_parameters_path"])
    on_double = _on_double(kube, simulate, dbl, "train:evict@3:preempted")

    real = render(buckets, "train", run_id="rrealkueuepre", training={"num_batches": 10})
    name = real["metadata"]["name"]
    client = _real_client(real_cluster)
    with (
        _preemption_within_the_queue(real_cluster),
        PodPlayer(real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None)),
    ):
        client.apply(real)
        try:
            wait_until(lambda: client.status(name, kind="JobSet").phase == "running", 10, what="running")
            with _tpu_quota_taken(real_cluster, URGENT):
                on_real = _settled(lambda: client.status(name, kind="JobSet"))
                jobset = json.loads(real_cluster.kubectl("get", "jobset", name, "-n", NS, "-o", "json"))
                wait_until(
                    lambda: (
                        not real_cluster.kubectl(
                            "get", "pods", "-n", NS, "-l", f"{JOBSET_LABEL}={name}", "-o", "name"
                        )
                    ),
                    10,
                    what="the preempted JobSet's pods gone",
                )
            again = wait_until(
                lambda: (s := client.status(name, kind="JobSet")).phase == "running" and s,
                15,
                what="admitted again once the urgent work is gone",
            )
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", name)
    assert jobset["spec"]["suspend"] is True  # suspended again, not failed
    assert not any(
        c["type"] == "Failed" and c["status"] == "True" for c in jobset["status"].get("conditions", [])
    )
    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason
        assert "Preempted to accommodate a workload" in verdict.reason, verdict.reason
    assert again.admitted and not again.failure_class, again.reason


def test_a_spot_reclaim_runs_on_spot_nodes_and_is_preempted_on_both_clusters(
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """A Spot run is admitted to the Spot flavor and its workers land on the Spot pool only; GCE
    reclaims a Spot VM with a shutdown the kubelet turns into ``TerminationByKubelet`` on the
    node's pods (failed, not deleted), the worker's Job fails by its ``podFailurePolicy`` and the
    JobSet with it: ``preempted``."""
    from tests.test_simulator import program_args, seed

    spot = {"tpu": {"provisioning": "spot"}, "training": {"num_batches": 10}}
    dbl = render(buckets, "train", run_id="rdblspot", **spot)
    seed(buckets, program_args(dbl)["load_parameters_path"])
    on_double = _on_double(kube, simulate, dbl, "train:preempt@3:worker:kubelet")

    real = render(buckets, "train", run_id="rrealspot", **spot)
    name = real["metadata"]["name"]
    client = _real_client(real_cluster)
    with PodPlayer(real_cluster.kubeconfig(), nodes, _disrupt_worker_0("TerminationByKubelet")):
        client.apply(real)
        try:
            on_real = _settled(lambda: client.status(name, kind="JobSet"))
            pods = json.loads(
                real_cluster.kubectl("get", "pods", "-n", NS, "-l", f"{JOBSET_LABEL}={name}", "-o", "json")
            )["items"]
        finally:
            with contextlib.suppress(Exception):
                client.delete("JobSet", name)
    workers = [
        p for p in pods if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "worker"
    ]
    assert workers and all(f"-{SPOT_POOL}-" in p["spec"]["nodeName"] for p in workers), [
        p["spec"].get("nodeName") for p in workers
    ]
    reclaimed = [p for p in workers if p["status"].get("reason") == "Terminated"]
    assert reclaimed and reclaimed[0]["status"]["phase"] == "Failed"  # failed in place, not deleted
    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason


# ---- disruptions the real control plane itself writes -------------------------------------------


def _evict(plane: ControlPlane, pod: str) -> None:
    """The Eviction API (what `kubectl drain` and the cluster autoscaler call): the API server
    writes the DisruptionTarget condition itself, then deletes the pod gracefully."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(plane.api_client())
    core.create_namespaced_pod_eviction(
        pod, NS, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NS}}
    )


@contextlib.contextmanager
def _no_execute(plane: ControlPlane, node: str) -> Iterator[None]:
    """A NoExecute taint on the pod's node (a node being repaired or drained by GKE): the real
    taint-eviction controller deletes the pods that do not tolerate it."""
    plane.kubectl("taint", "node", node, "rlpipe.dev/test-repair=true:NoExecute")
    try:
        yield
    finally:
        plane.kubectl("taint", "node", node, "rlpipe.dev/test-repair=true:NoExecute-")


@pytest.mark.parametrize(
    ("by", "reason"), [("eviction-api", "EvictionByEvictionAPI"), ("taint", "DeletionByTaintManager")]
)
def test_a_disruption_the_real_control_plane_writes_is_preempted_as_the_double_plays_it(
    by: str,
    reason: str,
    real_cluster: ControlPlane,
    nodes: set[str],
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """Here the pod player writes no condition: the API server's eviction subresource or the
    controller manager's taint-eviction controller does, and deletes the pod; the container's
    SIGTERM exit and the Job's ``podFailurePolicy`` follow. The double plays the same reason from
    its fault; both must say ``preempted``, and the real pod must carry the reason the double
    writes."""
    on_double = _on_double(
        kube, simulate, render(buckets, "convert", run_id=f"rdbl{by[:6]}"), f"convert:preempt:{by}"
    )

    real = render(buckets, "convert", run_id=f"rreal{by[:6]}")
    name = real["metadata"]["name"]
    client = _real_client(real_cluster)
    with PodPlayer(
        real_cluster.kubeconfig(), nodes, lambda pod: Outcome(exit_code=None, terminating_seconds=1.0)
    ):
        client.apply(real)
        try:

            def running_pod() -> dict[str, Any] | None:
                pods = json.loads(
                    real_cluster.kubectl("get", "pods", "-n", NS, "-l", f"job-name={name}", "-o", "json")
                )["items"]
                return next((p for p in pods if p["status"].get("phase") == "Running"), None)

            pod = wait_until(running_pod, 10, what="the conversion pod running")
            disrupt = (
                _no_execute(real_cluster, pod["spec"]["nodeName"])
                if by == "taint"
                else contextlib.nullcontext(_evict(real_cluster, pod["metadata"]["name"]))
            )
            with disrupt:

                def conditioned() -> dict[str, Any] | None:
                    got = json.loads(
                        real_cluster.kubectl("get", "pods", "-n", NS, "-l", f"job-name={name}", "-o", "json")
                    )["items"]
                    return next(
                        (
                            c
                            for p in got
                            for c in p["status"].get("conditions", [])
                            if c["type"] == "DisruptionTarget"
                        ),
                        None,
                    )

                condition = wait_until(conditioned, 10, what="a DisruptionTarget condition")
                on_real = _settled(lambda: client.status(name, kind="Job"))
        finally:
            with contextlib.suppress(Exception):
                client.delete("Job", name)
    assert condition["reason"] == reason, condition
    assert condition["message"] == DISRUPTIONS[reason][0]  # the double words it as the real one
    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason
