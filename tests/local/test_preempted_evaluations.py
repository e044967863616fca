"""Every evaluation a preempted training attempt printed is recorded, however its end falls between
two status reads.

The reproduction: attempt 1 trains, the stage reads its head's log while it runs, then a TPU worker
is preempted; the JobSet fails and its controller deletes the head's Job, so by the next status
read the head's pod (and the kubelet's log of it) is gone. The evaluations printed between the two
reads used to be lost (``make demo SCENARIO=preempt`` kept 10-30 one time, 10-40 another). They now
come from Cloud Logging, which the local stack plays from every container line the cluster
produced (``local/cloud_logging.py``).

Deterministic: the simulator's sleep is gated, so the first read happens with the program held right
after its step-10 evaluation, and the second only once the head's pod is gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlpipe.control.adapters import cloud_logs
from rlpipe.control.adapters.settings import Settings
from rlpipe.core import train_log
from rlpipe.local.cloud_logging import CloudLogging, Resource
from rlpipe.local.hub_double import HubDouble
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.pod_logs import ContainerLogFolder
from rlpipe.local.simulator import ClusterSimulator, Scenario, Timing
from tests.conftest import Buckets
from tests.control.stage.test_stage import NS, _convert_done, env, hub, kube  # noqa: F401
from tests.harness.patience import wait_until
from tests.harness.staged_data import seed_training_data
from tests.local.test_simulator import _seed_pinned

JOBSET = "jobset.sigs.k8s.io/"


class Gate:
    """The simulator's sleep: real sleeping, except that once ``hold_after`` is in the head's
    log every simulated pause waits until :meth:`release` (the program stands still)."""

    def __init__(self, kube: KubeApiServer, pod_of: Any, hold_after: str) -> None:
        self.kube, self.pod_of, self.hold_after = kube, pod_of, hold_after
        self.released = threading.Event()
        self.holding = threading.Event()

    def __call__(self, seconds: float) -> None:
        time.sleep(seconds)
        if self.released.is_set():
            return
        pod = self.pod_of()
        if pod is not None and self.hold_after in self.kube.pod_log(pod, namespace=NS):
            self.holding.set()
            self.released.wait()

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def logging_api(tmp_path: Path) -> Iterator[tuple[ContainerLogFolder, CloudLogging]]:
    folder = ContainerLogFolder(tmp_path / "pods")
    api = CloudLogging(folder, Resource("p")).start()
    yield folder, api
    api.stop()


def _head_pod(kube: KubeApiServer, jobset: str) -> str | None:
    pods = kube.list(
        "pods",
        namespace=NS,
        label_selector=f"{JOBSET}jobset-name={jobset},{JOBSET}replicatedjob-name=pathways-head",
    )
    return pods[0]["metadata"]["name"] if pods else None


def _printed_evaluations(folder: ContainerLogFolder, jobset: str) -> list[int]:
    """The steps of the Intermediate Eval lines the head's program printed (its retained log)."""
    text = "\n".join(
        line.text
        for log in folder.logs()
        if log.pod.startswith(f"{jobset}-pathways-head-") and log.container == "workload-container"
        for line in folder.read(log)
    )
    return [e.step for e in train_log.parse(text).intermediate]


def test_a_preemption_between_two_status_reads_keeps_every_evaluation_printed_before_it(
    env: dict[str, Any],
    kube: KubeApiServer,
    hub: HubDouble,
    buckets: Buckets,
    logging_api: tuple[ContainerLogFolder, CloudLogging],
) -> None:
    folder, api = logging_api
    run_id = "rpreempt0001"
    service = env["service"]
    settings = Settings(project="p", namespace=NS, logging_endpoint=api.url)
    service.cloud_logs = cloud_logs.head_reader(settings)  # as services.py wires it from the settings
    env["claim"](run_id, training={"num_batches": 60})
    service.plan(run_id, f"{run_id}-exec")
    service.launch(run_id, "convert", 1, None, f"{run_id}-exec")
    _convert_done(env, run_id)
    service.launch(run_id, "train", 1, None, f"{run_id}-exec")
    jobset = f"{run_id}-train-a1"
    obj = kube.get("jobsets", jobset, namespace=NS)
    _seed_pinned(buckets, obj)
    seed_training_data(buckets.client, obj)

    # A worker preempted at step 25: the evaluations at 10 and 20 were printed before it.
    gate = Gate(kube, lambda: _head_pod(kube, jobset), hold_after="Intermediate Eval (step=10)")
    sim = ClusterSimulator(
        kube,
        buckets.client,
        scenario=Scenario.from_strings(["train:1:preempt@25"]),
        timing=Timing.fast(),
        sleep=gate,
        seed=7,
        hub_url=hub.url,
        container_logs=folder,
    ).start()
    try:
        assert gate.holding.wait(30), "the head printed its step-10 evaluation and stands still"
        first = service.status(run_id, "train", 1, f"{run_id}-exec")
        assert first["phase"] == "running"
        record = env["ledger"].get(run_id)
        assert [(e["attempt"], e["step"]) for e in record.results["intermediate"]] == [(1, 10)]
        gate.release()

        def head_gone() -> bool:
            js = kube.get("jobsets", jobset, namespace=NS)
            failed = any(
                c["type"] == "Failed" and c["status"] == "True"
                for c in (js.get("status") or {}).get("conditions") or []
            )
            return failed and _head_pod(kube, jobset) is None

        wait_until(head_gone, 10, what="the JobSet failed and its head's pod deleted")
        last = service.status(run_id, "train", 1, f"{run_id}-exec")
    finally:
        gate.release()
        sim.stop()
    assert last["phase"] == "failed" and last["failure"]["tag"] == "preempted", last
    printed = _printed_evaluations(folder, jobset)
    assert printed[:2] == [10, 20] and all(step < 25 for step in printed), printed
    record = env["ledger"].get(run_id)
    assert [(e["attempt"], e["step"]) for e in record.results["intermediate"]] == [(1, s) for s in printed]
    assert record.results["pre"] is not None, "the baseline printed before the first read"
    # The retained copy is the kubelet's log, line for line and stamp for stamp (the cursor taken
    # from one is valid in the other).
    (head,) = [log for log in folder.logs() if log.pod.startswith(f"{jobset}-pathways-head-")]
    assert folder.read(head) == kube.pod_log_lines(head.pod, namespace=NS)
