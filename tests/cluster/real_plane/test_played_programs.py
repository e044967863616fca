"""The programs played inside the real control plane's pods (``rlpipe.local.controlplane.programs``)
and the kubelet log endpoint that serves their output (``log_endpoint``), without a plane.

Which pod runs the program must follow the double's workloads (job_workload.py,
jobset_workload.py); the pods here are the rendered templates with the labels the real Job and
JobSet controllers put on their pods.
"""

from __future__ import annotations

import functools
import ssl
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rlpipe.core import manifests, request
from rlpipe.local.controlplane import programs
from rlpipe.local.controlplane.kubelet import SIGTERM_EXIT
from rlpipe.local.controlplane.log_endpoint import LogEndpoint, node_endpoint
from rlpipe.local.controlplane.pki import CertificateAuthority
from rlpipe.local.controlplane.programs import PlayedContainer, PodLogs, PodRef, Services, role
from rlpipe.local.simulator.gcs_io import GcsIO
from rlpipe.local.simulator.timing import Timing
from tests.conftest import minimal_request

Obj = dict[str, Any]
JS = "jobset.sigs.k8s.io/"


def _rendered(stage: str, **fields: Any) -> Obj:
    req = request.validate_request(minimal_request(**fields))
    return manifests.render(req, stage, 1, manifests.RenderContext(run_id="r1", bucket="artifacts"))


def _job_pod(job: Obj, index: int | None) -> Obj:
    """A pod as the Job controller makes it: the template, plus the completion index when Indexed."""
    template = job["spec"]["template"]
    labels = dict(template["metadata"].get("labels") or {})
    if index is not None:
        labels[programs.COMPLETION_INDEX] = str(index)
    return {
        "metadata": {"name": f"p{index}", "namespace": "rlpipe", "labels": labels},
        "spec": template["spec"],
    }


def _jobset_pod(jobset: Obj, replicated_job: str, job_index: int, index: int) -> Obj:
    """A pod of a JobSet's child Job, with the labels the JobSet and Job controllers put on it."""
    rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == replicated_job)
    pod = _job_pod(rjob["template"], index)
    pod["metadata"]["labels"].update(
        {JS + "jobset-name": jobset["metadata"]["name"], JS + "replicatedjob-name": replicated_job}
    )
    pod["metadata"]["labels"][JS + "job-index"] = str(job_index)
    return pod


def _part(pod: Obj) -> str:
    found = role(pod)
    if found is None:
        return "serves"
    part, program = found
    name = part.func.__name__ if isinstance(part, functools.partial) else part.__name__
    return f"{name}:{program.stage if program else None}"


def test_a_jobs_only_pod_runs_the_program() -> None:
    for stage in ("convert", "export"):
        assert _part(_job_pod(_rendered(stage), None)) == f"play:{stage}"


def test_in_tpu_slice_placement_index_0_converts_and_the_others_exit_0() -> None:
    job = _rendered("convert", placement="tpu-slice")
    assert job["spec"]["completionMode"] == "Indexed"
    assert _part(_job_pod(job, 0)) == "play:convert"
    assert {_part(_job_pod(job, i)) for i in range(1, 8)} == {"_nothing_to_do:convert"}


def test_the_pathways_head_trains_and_the_tpu_workers_serve_until_stopped() -> None:
    jobset = _rendered("train")
    assert _part(_jobset_pod(jobset, "pathways-head", 0, 0)) == "play:train"
    assert {_part(_jobset_pod(jobset, "worker", 0, i)) for i in range(8)} == {"serves"}


def test_a_second_replica_of_the_head_job_does_not_run_the_program() -> None:
    assert _part(_jobset_pod(_rendered("train"), "pathways-head", 1, 0)) == "serves"


def test_a_jobs_pod_without_a_program_exits_0() -> None:
    job = _rendered("convert")
    job["spec"]["template"]["spec"]["containers"][0].update(command=["sleep", "1"], args=[])
    assert _part(_job_pod(job, None)) == "_not_played:None"


class MemoryGcs(GcsIO):
    """GCS in a dict: what a played program writes, in order."""

    def __init__(self) -> None:
        super().__init__(client=None)
        self.objects: dict[str, bytes] = {}

    def write(self, uri: str, data: bytes | str, content_type: str = "application/octet-stream") -> None:
        self.objects[uri] = data.encode() if isinstance(data, str) else data

    def list(self, prefix_uri: str, *, limit: int | None = None) -> list[str]:
        prefix = prefix_uri.rstrip("/") + "/"
        return [u for u in self.objects if u.startswith(prefix)][:limit]

    def exists(self, uri: str) -> bool:
        return uri in self.objects

    def delete(self, uri: str) -> None:
        self.objects.pop(uri, None)


def _container(tmp_path: Path, sigterm: threading.Event, timing: Timing) -> tuple[PlayedContainer, MemoryGcs]:
    pod = _job_pod(_rendered("convert"), None)
    found = role(pod)
    assert found is not None and found[1] is not None
    gcs = MemoryGcs()
    ref = PodRef("rlpipe", "convert-pod", found[1].container, found[1])
    return PlayedContainer(ref, Services(gcs, PodLogs(tmp_path)), timing, sigterm), gcs


def test_a_played_conversion_writes_maxtexts_files_and_logs_them(tmp_path: Path) -> None:
    ctx, gcs = _container(tmp_path, threading.Event(), Timing.zero())
    assert ctx.workload.program is not None
    assert programs.play(ctx, program=ctx.workload.program) == (0, "Completed")
    base = ctx.workload.program.args.require("base_output_directory").rstrip("/")
    assert f"{base}/0/commit_success.txt" in gcs.objects
    assert list(gcs.objects)[-1] == f"{base}/0/commit_success.txt", "the step's commit file is written last"
    log = PodLogs(tmp_path).serve("rlpipe", "convert-pod", "workload-container")
    assert "Conversion complete" in log and all(line.startswith("[played] ") for line in log.splitlines())


def test_sigterm_ends_a_pause_at_once_and_nothing_more_is_written(tmp_path: Path) -> None:
    sigterm = threading.Event()
    ctx, gcs = _container(tmp_path, sigterm, Timing(scale=1.0))  # a conversion of 900 s, for real
    assert ctx.workload.program is not None
    threading.Timer(0.2, sigterm.set).start()
    assert programs.play(ctx, program=ctx.workload.program) == (SIGTERM_EXIT, "Error")
    assert not [u for u in gcs.objects if u.endswith("commit_success.txt")]


def test_the_log_endpoint_serves_a_containers_tail_over_tls(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    logs = PodLogs(tmp_path / "pods")
    for i in range(5):
        logs.played("rlpipe", "head", "workload-container", f"line {i}")
    endpoint = LogEndpoint(logs, ca.issue("kubelet", "kubelet", server=True, hosts=("127.0.0.1",))).start()
    try:
        context = ssl.create_default_context(cafile=str(ca.pair.cert))
        base = f"https://127.0.0.1:{endpoint.port}/containerLogs/rlpipe/head"
        with urllib.request.urlopen(f"{base}/workload-container?tailLines=2", context=context) as answer:
            assert answer.read().decode() == "[played] line 3\n[played] line 4\n"
        with urllib.request.urlopen(f"{base}/other-container", context=context) as answer:
            assert answer.read() == b""
        with urllib.request.urlopen(f"{base}/workload-container?tailLines=0", context=context) as answer:
            assert answer.read() == b""  # no line, not every line
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/workload-container?tailLines=two", context=context)
        assert refused.value.code == 400
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"https://127.0.0.1:{endpoint.port}/pods", context=context)
    finally:
        endpoint.stop()
    assert node_endpoint(10250)["status"] == {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }
