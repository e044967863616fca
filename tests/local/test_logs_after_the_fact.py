"""``rlpipe logs`` after the fact: an ended attempt's log from Cloud Logging (the local stack plays
it), the program's container chosen by its role after a preemption left only a worker's pods, and
``--follow`` waiting for a run that is not accepted yet.

In process, against the Kubernetes API double and the local Cloud Logging, with a ledger in
fake-gcs-server: the CLI's own code, the production readers and clients.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rlpipe.cli import logs as logs_cli
from rlpipe.cli.exit_codes import ExitCode
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.runs.record import Attempt, RunRecord, Source
from rlpipe.local.cloud_logging import CloudLogging, Resource
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.pod_logs import ContainerLogFolder
from tests.conftest import Buckets, minimal_request
from tests.harness.patience import wait_until

NS = "rlpipe"
T0 = datetime(2026, 12, 4, 13, 0, 0, tzinfo=UTC)
JS = "jobset.sigs.k8s.io/"


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


@pytest.fixture
def stack(tmp_path: Path, kube: KubeApiServer, buckets: Buckets) -> Iterator[dict[str, Any]]:
    folder = ContainerLogFolder(tmp_path / "pods")
    api = CloudLogging(folder, Resource("p")).start()
    settings = Settings(
        project="p", namespace=NS, kube_url=kube.url, logging_endpoint=api.url, state_bucket=buckets.state
    )
    yield {"folder": folder, "settings": settings, "ledger": buckets.ledger(), "kube": kube}
    api.stop()


def _record(run_id: str, *attempts: Attempt, state: str = "training") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        key=f"k:{run_id}",
        source=Source(kind="cli"),
        request=minimal_request(),
        state=state,  # type: ignore[arg-type]
        stage="train",
        attempts=list(attempts),
    )


def _attempt(run_id: str, n: int, phase: str) -> Attempt:
    return Attempt(
        stage="train",
        attempt=n,
        workload=f"{run_id}-train-a{n}",
        launched_at="2026-12-04T12:59:00Z",
        phase=phase,
    )


def _pod(kube: KubeApiServer, jobset: str, rjob: str, name: str, containers: list[str], phase: str) -> None:
    status: dict[str, Any] = {"phase": phase}
    if phase == "Succeeded":
        done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        status["containerStatuses"] = [{"name": c, "state": done} for c in containers]
    kube.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {f"{JS}jobset-name": jobset, f"{JS}replicatedjob-name": rjob},
            },
            "spec": {"containers": [{"name": c, "image": "i"} for c in containers]},
            "status": status,
        },
    )


def _args(run: str, **given: Any) -> argparse.Namespace:
    defaults = {"stage": None, "attempt_number": None, "follow": False, "container": None, "timeout": 600.0}
    return argparse.Namespace(run=run, **{**defaults, **given})


def _logs(stack: dict[str, Any], run: str, **given: Any) -> int:
    return logs_cli.cmd_logs(_args(run, **given), lambda: stack["settings"], lambda s: stack["ledger"])


def test_after_a_preemption_the_heads_program_is_read_not_a_workers_container(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The JobSet controller deleted the head with its Job; the failed worker's Job and pods are
    kept (the preemption's evidence). The program's log is the head's, from Cloud Logging."""
    run = "rpreempted01"
    stack["ledger"].claim(_record(run, _attempt(run, 1, "failed"), _attempt(run, 2, "running")))
    _pod(
        stack["kube"],
        f"{run}-train-a1",
        "worker",
        f"{run}-train-a1-worker-0-0-aaaaa",
        ["pathways-worker"],
        "Failed",
    )
    head = f"{run}-train-a1-pathways-head-0-0-bbbbb"
    folder = stack["folder"]
    folder.append(
        NS, head, "workload-container", ["Starting RL training...", "Intermediate Eval (step=60)"], T0
    )
    folder.append(NS, head, "pathways-proxy", ["a sidecar line"], T0)
    folder.append(NS, f"{run}-train-a1-worker-0-0-aaaaa", "pathways-worker", ["a worker line"], T0)
    folder.append(NS, f"{run}-train-a2-pathways-head-0-0-ccccc", "workload-container", ["attempt 2"], T0)

    assert _logs(stack, run, stage="train", attempt_number=1) == ExitCode.OK
    out, err = capsys.readouterr()
    assert out.splitlines() == ["Starting RL training...", "Intermediate Eval (step=60)"]
    assert f'resource.labels.pod_name=~"^{run}-train-a1-pathways-head-"' in err, "the head's role, by name"
    assert 'resource.labels.container_name="workload-container"' in err

    # A container the kept worker has is read from it; one no pod of the workload ever had is refused.
    assert _logs(stack, run, stage="train", attempt_number=1, container="pathways-worker") == ExitCode.OK
    assert (
        "kubectl logs -n rlpipe " + f"{run}-train-a1-worker-0-0-aaaaa -c pathways-worker"
        in capsys.readouterr().err
    )


def test_a_container_no_pod_has_is_refused_naming_those_there_are(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run = "rcontainer01"
    stack["ledger"].claim(_record(run, _attempt(run, 1, "running")))
    head = f"{run}-train-a1-pathways-head-0-0-bbbbb"
    _pod(stack["kube"], f"{run}-train-a1", "pathways-head", head, ["workload-container"], "Running")
    assert _logs(stack, run, container="no-such-container") == ExitCode.NOT_FOUND
    assert "its containers: workload-container" in capsys.readouterr().err


def test_an_ended_attempts_log_is_read_after_its_pods_are_gone(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run = "rended000001"
    stack["ledger"].claim(_record(run, _attempt(run, 1, "succeeded"), state="succeeded"))
    folder = stack["folder"]
    head = f"{run}-train-a1-pathways-head-0-0-bbbbb"
    folder.append(NS, head, "workload-container", ["Post RL Training: ..."], T0)
    assert _logs(stack, run) == ExitCode.OK
    assert capsys.readouterr().out == "Post RL Training: ...\n"
    assert _logs(stack, run, attempt_number=2) == ExitCode.NOT_FOUND
    assert "has no train attempt 2; its train attempts: 1" in capsys.readouterr().err


def test_follow_right_after_submit_waits_for_the_run_and_its_pod(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_cli, "POLL_SECONDS", 0.05)
    run = "rsubmitted01"
    result: dict[str, int] = {}
    follow = threading.Thread(target=lambda: result.update(code=_logs(stack, run, follow=True, timeout=60)))
    follow.start()
    try:
        wait_until(
            lambda: "waiting for run" in capsys.readouterr().err or None, 5, what="a word that it waits"
        )
        stack["ledger"].claim(_record(run, _attempt(run, 1, "launched")))
        head = f"{run}-train-a1-pathways-head-0-0-bbbbb"
        when = datetime.now(UTC)
        _pod(stack["kube"], f"{run}-train-a1", "pathways-head", head, ["workload-container"], "Succeeded")
        stack["kube"].append_pod_log(head, ["RL Training Completed Successfully!"], namespace=NS, when=when)
        follow.join(timeout=30)
    finally:
        follow.join(timeout=30)
    assert result == {"code": ExitCode.OK}
    out, err = capsys.readouterr()
    assert out.endswith(" RL Training Completed Successfully!\n"), "kubectl's --timestamps lines"
    assert "ended (Succeeded): container workload-container exited 0" in err


def test_follow_gives_up_at_its_timeout_for_a_run_that_never_comes(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_cli, "POLL_SECONDS", 0.05)
    assert _logs(stack, "rneverthere1", follow=True, timeout=0.3) == ExitCode.TRANSIENT
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if line.startswith("waiting for")] == [
        "waiting for run rneverthere1 to be accepted (up to 0.3 s; Ctrl-C stops)"
    ], "said once"
    assert err[-1].startswith("gave up after 0.3 s waiting for run rneverthere1")
    assert _logs(stack, "rneverthere1") == ExitCode.NOT_FOUND, "without --follow: no such run"


def test_the_pods_not_started_yet_are_waited_for_with_follow(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_cli, "POLL_SECONDS", 0.05)
    run = "rqueued00001"
    stack["ledger"].claim(_record(run, _attempt(run, 1, "queued")))
    assert _logs(stack, run) == ExitCode.TRANSIENT, "nothing to read yet: ask again later"
    assert "have not started yet (--follow waits for them)" in capsys.readouterr().err
    assert _logs(stack, run, follow=True, timeout=0.3) == ExitCode.TRANSIENT
    err = capsys.readouterr().err
    assert f"waiting for the pods of {run}-train-a1 (train attempt 1) to start" in err
