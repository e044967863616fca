"""`rlpipe submit` says what intake made of the request, and only what the ledger backs.

The reproduction: submit a request with a request_id, then a copy with one setting changed. Intake
rejects the copy ("request_id is already used by run … with a different request"); `submit` used
to print the old run's id and `follow it with: rlpipe watch …`, exit 0, and the user believed the
new setting ran. Here the CLI's own main runs against fake-gcs-server and the real intake
function, with a thread playing Eventarc (every object dropped under requests/ is delivered
to intake as a GCS finalized CloudEvent, as production's trigger does).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cli.exit_codes import ExitCode
from tests.conftest import ROOT, Buckets, minimal_request
from tests.harness.cli import run_main
from tests.harness.functions import FunctionServer, gcs_event, post
from tests.harness.patience import wait_until


class Eventarc:
    """Delivers each new request object to intake_object once, while ``on``."""

    def __init__(self, buckets: Buckets, url: str) -> None:
        self.buckets, self.url = buckets, url
        self.on = threading.Event()
        self.stop = threading.Event()
        self.delivered: set[tuple[str, int]] = set()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            if not self.on.is_set():
                continue
            for blob in self.buckets.client.list_blobs(self.buckets.requests, prefix="requests/"):
                seen = (blob.name, int(blob.generation))
                if seen not in self.delivered:
                    self.delivered.add(seen)
                    post(self.url, gcs_event(self.buckets.requests, blob.name, blob.generation, blob.size))


@pytest.fixture
def eventarc(buckets: Buckets, executions: Any, tmp_path: Path) -> Iterator[Eventarc]:
    env = buckets.env(RLPIPE_WORKFLOWS_ENDPOINT=executions.target)
    server = FunctionServer("intake_object", "cloudevent", env, tmp_path).start()
    delivery = Eventarc(buckets, server.url)
    delivery.on.set()
    delivery.thread.start()
    yield delivery
    delivery.stop.set()
    delivery.thread.join(timeout=10)
    server.stop()


def rlpipe(
    buckets: Buckets, executions: Any, *args: str, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RLPIPE_LOCAL"}
    env.update(buckets.env(RLPIPE_TARGET="gcp", RLPIPE_WORKFLOWS_ENDPOINT=executions.target))
    return run_main(list(args), env, cwd)


def _request(tmp_path: Path, name: str, **fields: Any) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(minimal_request(**fields)))
    return path


def test_a_changed_request_under_a_used_request_id_is_reported_rejected_not_as_the_old_run(
    buckets: Buckets, executions: Any, eventarc: Eventarc, tmp_path: Path
) -> None:
    first = rlpipe(buckets, executions, "submit", str(_request(tmp_path, "a.yaml", request_id="nightly")))
    assert first.returncode == ExitCode.OK, first.stderr
    [accepted] = [line for line in first.stdout.splitlines() if line.startswith("run id: ")]
    run_id = accepted.split()[2]
    record = buckets.ledger().get(run_id)
    assert record is not None and record.source.kind == "gcs", "the id printed is a run the ledger holds"

    changed = _request(tmp_path, "b.yaml", request_id="nightly", training={"learning_rate": 7e-6})
    second = rlpipe(buckets, executions, "submit", str(changed))
    assert second.returncode == ExitCode.INVALID_INPUT, second.stdout + second.stderr
    assert f"request_id is already used by run {run_id} with a different request" in second.stderr
    assert "run id:" not in second.stdout and "rlpipe watch" not in second.stdout, second.stdout
    # The rejection stays readable from the CLI, under the delivery's own id.
    delivery = second.stderr.split("rlpipe status ")[1].split()[0]
    status = rlpipe(buckets, executions, "status", delivery)
    assert status.returncode == ExitCode.INVALID_INPUT
    assert "rejected" in status.stdout and "already used by run" in status.stdout
    as_json = json.loads(rlpipe(buckets, executions, "status", delivery, "--json").stdout)
    assert as_json["rejected"] is True and as_json["rejection"]["problems"][0]["path"] == "request_id"

    again = rlpipe(buckets, executions, "submit", str(_request(tmp_path, "c.yaml", request_id="nightly")))
    assert again.returncode == ExitCode.OK, again.stderr
    assert f"already names run {run_id}" in again.stdout and "started nothing new" in again.stdout
    assert "run id:" not in again.stdout
    assert len(executions.creates()) == 1, "the identical request started no second execution"


def test_submit_without_an_answer_from_intake_says_so_and_exits_75(
    buckets: Buckets, executions: Any, eventarc: Eventarc, tmp_path: Path
) -> None:
    eventarc.on.clear()  # the trigger is slow or broken: nothing reaches intake
    done = rlpipe(buckets, executions, "submit", str(_request(tmp_path, "a.yaml")), "--wait", "1")
    assert done.returncode == ExitCode.TRANSIENT, done.stderr
    assert "intake has not answered" in done.stderr and "run id:" not in done.stdout
    delivery = done.stderr.split("rlpipe status ")[1].split()[0]
    eventarc.on.set()
    wait_until(lambda: buckets.ledger().get(delivery), 5, what="intake accepts the late delivery")
    status = rlpipe(buckets, executions, "status", delivery)
    assert status.returncode == ExitCode.OK and f"run {delivery}" in status.stdout


def test_set_edits_the_request_and_is_refused_on_a_used_request_id_without_a_new_name(
    buckets: Buckets, executions: Any, eventarc: Eventarc, tmp_path: Path
) -> None:
    path = _request(tmp_path, "a.yaml", request_id="lr-base")
    assert rlpipe(buckets, executions, "submit", str(path)).returncode == ExitCode.OK
    objects = {b.name for b in buckets.client.list_blobs(buckets.requests)}

    refused = rlpipe(buckets, executions, "submit", str(path), "--set", "training.learning_rate=7e-6")
    assert refused.returncode == ExitCode.INVALID_INPUT
    assert "--name" in refused.stderr and "lr-base" in refused.stderr
    assert {b.name for b in buckets.client.list_blobs(buckets.requests)} == objects, "nothing was sent"

    done = rlpipe(
        buckets,
        executions,
        "submit",
        str(path),
        "--set",
        "training.learning_rate=7e-6",
        "--set",
        "maxtext_overrides.rl.num_iterations=2",
        "--name",
        "lr-2e-5",
    )
    assert done.returncode == ExitCode.OK, done.stderr
    run_id = next(line for line in done.stdout.splitlines() if line.startswith("run id: ")).split()[2]
    request = buckets.ledger().get(run_id).request
    # Read as the same lines in the YAML file would be: 7e-6 is the float the field takes.
    assert request["request_id"] == "lr-2e-5" and request["training"]["learning_rate"] == 7e-6
    assert request["maxtext_overrides"]["rl.num_iterations"] == 2
