"""Conformance: the head/worker preemption race, in both orders, on the double and the real plane.

The shared shape of every conformance test is in tests/harness/conformance.py.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.core.failures import FailureClass
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import SIGTERM_EXIT, Outcome, PodPlayer
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets
from tests.harness.conformance import (
    JOBSET_LABEL,
    disrupt_worker_0,
    nodes,  # noqa: F401  (a fixture)
    real_client,
)
from tests.harness.patience import ceiling, wait_until
from tests.local.test_simulator import NS, create, kube, render, simulate  # noqa: F401

# ---- the head/worker race, in both orders -------------------------------------------------------


def _race_script(
    head_first: bool, job_failed: Callable[[str], bool], verdict_failed: threading.Event
) -> Callable[[dict[str, Any]], Outcome]:
    """Worker 0 is preempted by the scheduler a moment after it starts; the Pathways head loses it.
    Which Job fails first is ordered by events, never by how fast the machine runs the controllers:

    * ``head_first``: the head exits 1 at once (its pipe timeout ran out before the worker's grace),
      and the worker stays in its SIGTERM handler until the head's Job has failed and the test has
      read a failed verdict while the disrupted worker is still there;
    * else (the hold of ``commands.held_exit`` outlasting the worker's grace): the worker exits at
      once and the head only once the worker's Job has failed.

    ``job_failed(replicated job)``: that child Job has a true Failed condition, the one the JobSet
    controller names its first failed Job by (JobSet v0.10.1 failure_policy.go:309-334)."""
    worker_lost = threading.Event()
    limit = ceiling(30)

    def until(done: Callable[[], bool], sigterm: threading.Event | None = None) -> bool:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if done():
                return True
            if sigterm is not None and sigterm.is_set():
                return False
            time.sleep(0.2)
        return False

    def worker_0(sigterm: threading.Event) -> tuple[int, str]:
        sigterm.wait()
        worker_lost.set()
        if head_first:
            until(lambda: job_failed("pathways-head-0") and verdict_failed.is_set())
        return SIGTERM_EXIT, "Error"

    def head(sigterm: threading.Event) -> tuple[int, str]:
        while not worker_lost.wait(0.05):
            if sigterm.is_set():
                return SIGTERM_EXIT, "Error"
        if head_first or until(lambda: job_failed("worker-0"), sigterm):
            return 1, "Error"
        return SIGTERM_EXIT, "Error"  # the JobSet failed at the worker's Job and deleted the head's

    def script(pod: dict[str, Any]) -> Outcome:
        labels = pod["metadata"]["labels"]
        job = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
        if job == "worker" and labels.get("batch.kubernetes.io/job-completion-index") == "0":
            return Outcome(
                exit_code=None,
                seconds=1.0,
                disruption="PreemptionByScheduler",
                terminating_seconds=None,  # until its program returns
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
    # (order, the double's fault and head script hold, on the real plane whether the head's Job
    # fails first (None: the head never exits), whose Job fails first, the verdict read once the
    # race has played out)
    ("worker-first", ("preempt@3:worker:scheduler", True), None, "worker", FailureClass.PREEMPTED),
    (
        "head-first-held",
        ("preempt@3:worker:scheduler:head-first", True),
        False,
        "worker",
        FailureClass.PREEMPTED,
    ),
    (
        "head-first-unheld",
        ("preempt@3:worker:scheduler:head-first", False),
        True,
        "head",
        FailureClass.PERMANENT,
    ),
]


@pytest.mark.parametrize(
    ("order", "double", "head_first", "first", "late_class"), RACE_ORDERS, ids=[r[0] for r in RACE_ORDERS]
)
def test_the_head_worker_race_ends_alike_in_both_orders_on_both_clusters(
    order: str,
    double: tuple[str, bool],
    head_first: bool | None,
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
    deleted (tests/local/test_preemption_race.py plays this on the double)."""
    from tests.local.test_preemption_race import without_the_hold
    from tests.local.test_simulator import program_args, seed

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
    client = real_client(real_cluster)
    verdict_failed = threading.Event()

    def job_failed(replicated: str) -> bool:
        try:
            job = json.loads(
                real_cluster.kubectl("get", "job", f"{name}-{replicated}", "-n", NS, "-o", "json")
            )
        except Exception:  # not there (yet, or any more)
            return False
        conditions = (job.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)

    def read() -> WorkloadStatus:
        status = client.status(name, kind="JobSet")
        if status.phase == "failed":
            verdict_failed.set()
        return status

    script = (
        _race_script(head_first, job_failed, verdict_failed)
        if head_first is not None
        else disrupt_worker_0("PreemptionByScheduler")
    )
    with PodPlayer(real_cluster.kubeconfig(), nodes, script):
        client.apply(real)
        try:
            on_real = _watch_verdicts(
                read,
                lambda resource: json.loads(real_cluster.kubectl("get", resource, "-n", NS, "-o", "json"))[
                    "items"
                ],
                name,
                40,
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
    # While the race runs, the disrupted worker is still readable and the verdict is `preempted`.
    # Polled here on the real plane, where the worker's SIGTERM handler lasts until that was read;
    # the double plays it in simulated time, so tests/local/test_preemption_race.py holds its first
    # verdict with a listener that sees every write instead (a poll can miss that short window).
    first_failed = next(v for v in on_real if v.phase == "failed")
    assert first_failed.failure_class is FailureClass.PREEMPTED, first_failed.reason
    late_double, late_real = on_double[-1], on_real[-1]
    assert (late_real.phase, late_real.failure_class) == (late_double.phase, late_double.failure_class), (
        f"double: {late_double.reason}\nreal: {late_real.reason}"
    )
    assert late_real.failure_class is late_class, late_real.reason
