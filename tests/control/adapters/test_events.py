"""Event parsing and the artifact fast path (no network for non-signal objects)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from cloudevents.conversion import to_binary
from functions_framework import create_app

from rlpipe.control import services
from rlpipe.control.adapters.events import BadEvent, match_artifact, message_event, object_event
from rlpipe.core import layout
from rlpipe.core.runs.record import RunRecord, Source
from tests.conftest import ROOT, Buckets
from tests.harness.functions import gcs_event, pubsub_event


def test_checkpoint_objects_are_not_signals_except_the_commit_markers() -> None:
    run = layout.RunLayout("b", "rabcdefghijk")
    noise = [
        run.step_dir(50) + "model_params/params.decoder.layers_0.mlp.wi.kernel/0.0.0",
        run.step_dir(50) + "model_params/_METADATA",
        run.step_dir(50) + "model_params/_sharding",
        run.step_dir(50) + "_CHECKPOINT_METADATA",
        run.step_dir(50) + "model_params/commit_success.txt",  # an item's marker, not the step's
        run.hf_dir + "config.json",
        run.hf_dir + "model-00001-of-00017.safetensors",
        run.hf_dir + layout.HF_INDEX,  # uploaded before the manifest, which is written last
        run.hf_dir + layout.HF_SINGLE,
        run.hf_dir + "sub/" + layout.EXPORT_MANIFEST,
        run.ledger,
        run.event(4, "launched"),
        "cache/maxtext/ckey/rabcdefghijk-a1/0/items/commit_success.txt",
        "cache/maxtext/ckey/READY.json",
        "pathways/tmp/x",
    ]
    assert [n for n in noise if match_artifact(n)] == []
    step = match_artifact(run.step_commit(50))
    assert step and (step.run_id, step.stage, step.signal, step.step) == (
        "rabcdefghijk",
        "train",
        "checkpoint",
        50,
    )
    exported = match_artifact(run.export_manifest)
    assert exported and (exported.run_id, exported.stage, exported.signal) == (
        "rabcdefghijk",
        "export",
        "exported",
    )
    converted = match_artifact("cache/maxtext/ckey/rabcdefghijk-a2/0/commit_success.txt")
    assert converted and (converted.run_id, converted.stage, converted.attempt_dir) == (
        "rabcdefghijk",
        "convert",
        "cache/maxtext/ckey/rabcdefghijk-a2/",
    )


@pytest.mark.parametrize("scope", ["vision", "ml-ops"])
def test_a_teams_signals_are_read_behind_its_prefix_and_name_the_attempt_there(scope: str) -> None:
    """A declared team's run writes under teams/<team>/ (layout.team_prefix): its commit markers,
    export manifest and conversion commit are the same signals, the conversion's directory the one
    the layout names, prefix included (what READY.json records and train loads)."""
    run = layout.RunLayout("b", "rabcdefghijk", scope=scope)
    cache = layout.ConversionCache("b", "ckey", scope=scope)
    step = match_artifact(run.step_commit(50))
    assert step and (step.run_id, step.stage, step.step) == ("rabcdefghijk", "train", 50)
    exported = match_artifact(run.export_manifest)
    assert exported and (exported.run_id, exported.signal) == ("rabcdefghijk", "exported")
    attempt = cache.attempt_dir("rabcdefghijk", 2)
    converted = match_artifact(layout.converted_step_commit(attempt))
    assert converted and (converted.run_id, converted.attempt_dir, converted.cache_key) == (
        "rabcdefghijk",
        attempt,
        "ckey",
    )
    assert attempt.startswith(f"teams/{scope}/cache/maxtext/ckey/")
    # Nothing else behind a team's prefix is a signal, and no other top-level prefix is one.
    assert match_artifact(run.step_dir(50) + "model_params/_METADATA") is None
    assert match_artifact(f"teams/{scope}/pathways/{layout.COMMIT_MARKER}") is None
    assert match_artifact(f"elsewhere/{run.step_commit(50)}") is None


def test_eventarc_storage_event_shape() -> None:
    ce = gcs_event("bkt", "requests/a b/x.yaml", 1712, 99)
    event = object_event(ce.get_attributes(), ce.data)
    assert (event.bucket, event.name, event.generation, event.size) == (
        "bkt",
        "requests/a b/x.yaml",
        "1712",
        99,
    )
    with pytest.raises(BadEvent):
        object_event({**ce.get_attributes(), "type": "google.cloud.storage.object.v1.deleted"}, ce.data)
    with pytest.raises(BadEvent):
        object_event(ce.get_attributes(), {"bucket": "bkt", "name": "x", "generation": "abc"})


def test_pubsub_event_shape() -> None:
    ce = pubsub_event("projects/p/topics/t", b'{"a": 1}', "42", attributes={"k": "v"})
    event = message_event(ce.get_attributes(), ce.data)
    assert (event.topic, event.message_id, event.data, event.attributes) == (
        "projects/p/topics/t",
        "42",
        b'{"a": 1}',
        {"k": "v"},
    )
    bad = dict(ce.data)
    bad["message"] = {**ce.data["message"], "data": "!!not base64!!"}
    with pytest.raises(BadEvent):
        message_event(ce.get_attributes(), bad)


def _app() -> Any:
    return create_app(
        target="artifact_event", source=str(ROOT / "functions" / "main.py"), signature_type="cloudevent"
    )


def test_non_signal_objects_are_dismissed_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _app().test_client()
    services.reset()

    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("artifact_event touched the network for a non-signal object")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(services, "ledger", no_network)
    for name in (
        "runs/rabcdefghijk/trained/rl/checkpoints/actor/50/model_params/x/0.0",
        "runs/rabcdefghijk/hf/config.json",
        "cache/maxtext/k/r1-a1/0/items/_METADATA",
    ):
        headers, body = to_binary(gcs_event("artifacts", name, 1, 10))
        assert client.post("/", headers=headers, data=body).status_code == 200


class _CallbackReceiver(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).received.append(
            {
                "path": self.path,
                "body": json.loads(self.rfile.read(length)),
                "auth": self.headers.get("Authorization"),
            }
        )
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    _CallbackReceiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CallbackReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _CallbackReceiver.received
    server.shutdown()


def test_completion_signal_sends_the_stage_callback(
    buckets: Buckets, receiver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, received = receiver
    for key, value in buckets.env(RLPIPE_KUBE_URL="http://127.0.0.1:1").items():
        monkeypatch.setenv(key, value)
    services.reset()
    ledger = buckets.ledger()
    record = RunRecord(run_id="rcallback001", key="k", source=Source(kind="cli"), request={})
    execution = f"/v1/{services.settings().workflow_path}/executions/e1"
    record.callbacks = {
        "train": f"{base}{execution}/callbacks/train-1",
        "export": f"{base}{execution}/callbacks/export-1",
    }
    record.lineage.final_step = 100
    ledger.claim(record)
    client = _app().test_client()
    run = layout.RunLayout(buckets.artifacts, "rcallback001")
    for name in (run.step_commit(50), run.step_commit(100), run.export_manifest):
        headers, body = to_binary(gcs_event(buckets.artifacts, name, 1, 10))
        assert client.post("/", headers=headers, data=body).status_code == 200
    assert [r["path"] for r in received] == [
        f"{execution}/callbacks/train-1",
        f"{execution}/callbacks/export-1",
    ], "step 50 is not final"
    assert received[0]["body"]["signal"] == "checkpoint" and received[0]["auth"] is None
    assert received[0]["body"]["object"] == layout.gs(buckets.artifacts, run.step_commit(100))
    services.reset()


@pytest.mark.parametrize(
    "url",
    [
        "{base}/collect",  # anywhere else on a loopback port
        "https://attacker.example/v1/{workflow}/executions/e1/callbacks/c1",
        "{base}/v1/projects/other/locations/us-central1/workflows/w/executions/e1/callbacks/c1",
        "{base}/v1/{workflow}/executions/e1/callbacks/c1?next=https://attacker.example",
    ],
)
def test_a_callback_url_outside_this_workflow_is_never_posted_to(
    url: str, buckets: Buckets, receiver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, received = receiver
    for key, value in buckets.env(RLPIPE_KUBE_URL="http://127.0.0.1:1").items():
        monkeypatch.setenv(key, value)
    services.reset()
    ledger = buckets.ledger()
    record = RunRecord(run_id="rforeign0001", key="k", source=Source(kind="cli"), request={})
    record.callbacks = {"export": url.format(base=base, workflow=services.settings().workflow_path)}
    ledger.claim(record)
    run = layout.RunLayout(buckets.artifacts, "rforeign0001")
    headers, body = to_binary(gcs_event(buckets.artifacts, run.export_manifest, 1, 10))
    assert _app().test_client().post("/", headers=headers, data=body).status_code == 200
    assert received == []
    services.reset()
