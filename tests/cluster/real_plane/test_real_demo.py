"""``make demo CLUSTER=real``: the whole pipeline on the local stack with the real control plane.

The stack (``cluster="real"``) runs the real API server, controllers, scheduler, JobSet and Kueue
with what a deploy installs; the functions reach them as the pipeline's identity through
``RLPIPE_KUBECONFIG``; only the nodes, the containers and the MaxText programs are played
(``rlpipe.local.controlplane.programs``). One run must succeed end to end, write what the same run
writes on the double (object for object, the run id aside), have its rewards read from the head's
log through the API server, leave nothing behind, and be reported as a run on the real cluster.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cli import runs
from rlpipe.cli import submit as submit_cli
from rlpipe.cli.main import main
from rlpipe.control.adapters.blobstore import BlobStore, make_client
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.runs.record import RunRecord
from rlpipe.local.stack import LocalStack, StackConfig, describe_cluster
from tests.conftest import ROOT
from tests.harness.patience import ceiling, wait_until
from tests.harness.real_cluster import require_real_cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]
EXAMPLE = ROOT / "examples" / "gemma4-26b-v6e-32.yaml"  # the demo's request


@pytest.fixture(scope="module")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    require_real_cluster()
    saved = dict(os.environ)
    config = StackConfig(
        root=tmp_path_factory.mktemp("real-stack"), poll_seconds=1, timing="fast", cluster="real"
    )
    stack = LocalStack(config, say=lambda text: None)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()
        os.environ.clear()
        os.environ.update(saved)


def _request(tmp: Path) -> Path:
    """The demo's request, under a request id of its own."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["request_id"] = f"real-demo-{uuid.uuid4().hex[:10]}"
    path = tmp / f"{doc['request_id']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _run(stack: LocalStack, path: Path, expected: float) -> tuple[RunRecord, set[str]]:
    """Submit by file drop, wait for the end, and list what the run wrote in the artifacts bucket."""
    assert stack.state is not None
    os.environ.update(stack.state.env)
    settings = Settings.from_env()
    client = make_client(settings.project)
    ledger = Ledger(BlobStore(client, settings.state_bucket))
    run_id = submit_cli.submit(settings, path, via="gcs", storage_client=client).run_id
    deadline = time.monotonic() + ceiling(expected)
    record = ledger.get(run_id)
    while time.monotonic() < deadline and not (record is not None and record.terminal):
        time.sleep(0.25)
        record = ledger.get(run_id)
    assert record is not None and record.terminal, f"run {run_id}: {record and runs.describe(record)}"
    names = {b.name for b in client.list_blobs(settings.artifacts_bucket) if run_id in b.name}
    return record, {_normalized(name, run_id) for name in names}


def _normalized(name: str, run_id: str) -> str:
    """An object name without what differs between two runs of one request: the run id, the
    conversion key (the Hub double's commit sha is new on each stack) and tensorboard's clock."""
    name = re.sub(r"^cache/maxtext/[^/]+/", "cache/maxtext/<key>/", name.replace(run_id, "<run>"))
    return re.sub(r"tfevents\.[0-9]+\.", "tfevents.<time>.", name)


def test_the_demo_request_runs_end_to_end_on_the_real_control_plane(
    real_stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    assert real_stack.state is not None and real_stack.state.cluster == "real"
    assert real_stack.state.env["RLPIPE_KUBECONFIG"] and not real_stack.state.env["RLPIPE_KUBE_URL"]
    record, on_real = _run(real_stack, _request(tmp_path), expected=60)
    assert record.state == "succeeded", runs.describe(record)
    assert [(a.stage, a.attempt, a.phase) for a in record.attempts] == [
        ("convert", 1, "succeeded"),
        ("train", 1, "succeeded"),
        ("export", 1, "succeeded"),
    ]
    # The rewards come from the played head's log, read through the real API server's log proxy.
    assert record.progress.get("step") == record.lineage.final_step == 50
    assert record.results and record.results.get("post", {}).get("mean_reward") is not None, record.results
    # Cleanup deleted the run's workloads; the real garbage collector takes the JobSet's children.
    wait_until(
        lambda: not [w for w in real_stack.workloads() if w.startswith(record.run_id)], 5, what="nothing left"
    )
    # `rlpipe status` on this stack names the real cluster.
    monkeypatch.chdir(tmp_path)  # no .rlpipe/local here: the CLI reads the environment set above
    assert main(["status", record.run_id]) == 0
    printed = capsys.readouterr().out
    assert describe_cluster("real") in printed and "were SIMULATED" not in printed, printed

    # The same request on the double writes the same objects.
    os.environ.update(RLPIPE_KUBECONFIG="")
    double_root = tmp_path / "double"
    double = LocalStack(StackConfig(root=double_root, poll_seconds=1, timing="fast"), say=lambda text: None)
    with double:
        double_record, on_double = _run(double, _request(tmp_path), expected=30)
    assert double_record.state == "succeeded", runs.describe(double_record)
    assert on_real == on_double, (
        f"only on the real plane: {sorted(on_real - on_double)}\nonly on the double: {sorted(on_double - on_real)}"
    )
    assert "runs/<run>/hf/model.safetensors.index.json" in on_real
    assert "runs/<run>/trained/rl/checkpoints/actor/50/commit_success.txt" in on_real
