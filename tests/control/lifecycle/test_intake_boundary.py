"""Intake at the function boundary: nothing a user or a publisher controls makes a 5xx.

A 5xx on user input is a poison message: Eventarc redelivers it until the dead-letter limit and
the user never gets an error record. The functions are served by functions-framework (in
process) and receive real CloudEvents; storage is fake-gcs-server behind the strict proxy, and
executions go to the recording Executions servicer.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml
from cloudevents.conversion import to_binary
from functions_framework import create_app

from rlpipe.control import services
from rlpipe.control.lifecycle.intake import MAX_PROBLEMS_RECORDED
from rlpipe.core import identity
from tests.conftest import ROOT, Buckets, minimal_request
from tests.harness.functions import gcs_event, pubsub_event

TOPIC = "projects/rlpipe-test/topics/requests"


@pytest.fixture
def intake(buckets: Buckets, executions: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    for key, value in buckets.env(RLPIPE_WORKFLOWS_ENDPOINT=executions.target).items():
        monkeypatch.setenv(key, value)
    services.reset()
    apps = {
        target: create_app(
            target=target, source=str(ROOT / "functions" / "main.py"), signature_type="cloudevent"
        )
        for target in ("intake_object", "intake_message")
    }
    yield {"object": apps["intake_object"].test_client(), "message": apps["intake_message"].test_client()}
    services.reset()


def _post(client: Any, event: Any) -> int:
    headers, body = to_binary(event)
    return client.post("/", headers=headers, data=body).status_code


def _error(buckets: Buckets, run_id: str) -> dict[str, Any] | None:
    store = buckets.store("state")
    try:
        return store.read(f"runs/{run_id}/error.json").json()
    except Exception:
        return None


def _upload(buckets: Buckets, name: str, data: bytes) -> int:
    blob = buckets.client.bucket(buckets.requests).blob(name)
    blob.upload_from_string(data)
    return int(blob.generation)


# ---- the named crashes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        b"model: m\nhf_repo: a/b\nhf_revision: 2024-13-01\n",
        b"model: m\nhf_repo: a/b\nlabels: {d: 2024-02-30}\n",
        b"model: m\nhf_repo: a/b\nlabels: {t: 2024-01-01 10:00:00 +99:00}\n",
        b"model: m\nhf_repo: a/b\ntraining: {num_batches: " + b"9" * 5000 + b"}\n",
        b"\xef\xbb\xbf" + json.dumps({"hf_repo": "a/b"}).encode(),  # BOM, and model missing
    ],
)
def test_documents_yaml_cannot_build_are_rejected_with_an_error_record(
    intake: dict[str, Any], buckets: Buckets, executions: Any, document: bytes
) -> None:
    generation = _upload(buckets, "requests/odd.yaml", document)
    event = gcs_event(buckets.requests, "requests/odd.yaml", generation, len(document))
    assert _post(intake["object"], event) == 200
    run_id = identity.run_id_for(identity.key_for_object(buckets.requests, "requests/odd.yaml", generation))
    record = _error(buckets, run_id)
    assert record is not None and record["problems"], record
    assert executions.creates() == []


def test_thousands_of_unknown_keys_give_a_bounded_readable_error_record(
    intake: dict[str, Any], buckets: Buckets
) -> None:
    doc = minimal_request()
    doc.update({f"unknown_key_{i}": i for i in range(400)})  # under bounds.MAX_ITEMS: each one named
    data = yaml.safe_dump(doc).encode()
    generation = _upload(buckets, "requests/wide.yaml", data)
    assert (
        _post(intake["object"], gcs_event(buckets.requests, "requests/wide.yaml", generation, len(data)))
        == 200
    )
    run_id = identity.run_id_for(identity.key_for_object(buckets.requests, "requests/wide.yaml", generation))
    record = _error(buckets, run_id)
    assert record is not None
    assert record["problem_count"] == 400 and len(record["problems"]) == MAX_PROBLEMS_RECORDED
    assert f"{400 - MAX_PROBLEMS_RECORDED} more" in record["message"]


@pytest.mark.parametrize(
    ("bucket_of_event", "generation"),
    [("other-bucket", None), (None, "0"), (None, "²"), (None, str(2**63)), (None, "-5")],
)
def test_an_event_for_another_bucket_or_an_impossible_generation_starts_nothing(
    intake: dict[str, Any],
    buckets: Buckets,
    executions: Any,
    bucket_of_event: str | None,
    generation: str | None,
) -> None:
    data = yaml.safe_dump(minimal_request()).encode()
    real = _upload(buckets, "requests/x.yaml", data)
    event = gcs_event(bucket_of_event or buckets.requests, "requests/x.yaml", real, len(data))
    if generation is not None:
        event.data["generation"] = generation
    assert _post(intake["object"], event) == 200
    assert executions.creates() == []


@pytest.mark.parametrize(
    "message",
    [
        {"data": 12345, "messageId": "m1"},
        {"data": ["a"], "messageId": "m1"},
        {"data": base64.b64encode(b"model: m").decode(), "messageId": "m1", "attributes": ["a", "b"]},
        {"data": base64.b64encode(b"model: m").decode(), "messageId": {"x": 1}},
        {"data": base64.b64encode(b"model: m").decode(), "messageId": True},
    ],
)
def test_malformed_envelopes_are_acknowledged_and_start_nothing(
    intake: dict[str, Any], executions: Any, message: dict[str, Any]
) -> None:
    event = pubsub_event(TOPIC, b"x", message_id="m1")
    event.data["message"] = message
    assert _post(intake["message"], event) == 200
    assert executions.creates() == []


def test_a_non_cloudevent_post_is_refused_without_echoing_the_body(intake: dict[str, Any]) -> None:
    token = "hf_" + "S" * 34
    response = intake["object"].post(
        "/",
        data=json.dumps({"token": token}),
        headers={"X-Secret": token, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert token not in response.get_data(as_text=True)


@pytest.mark.parametrize("name", ["requests/upper.YAML", "requests/upper.Yml", "requests/upper.JSON"])
def test_request_extensions_are_recognised_in_any_case(
    intake: dict[str, Any], buckets: Buckets, executions: Any, name: str
) -> None:
    doc = minimal_request()
    data = json.dumps(doc).encode() if name.lower().endswith(".json") else yaml.safe_dump(doc).encode()
    generation = _upload(buckets, name, data)
    assert _post(intake["object"], gcs_event(buckets.requests, name, generation, len(data))) == 200
    assert len(executions.creates()) == 1
