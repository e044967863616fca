"""Bodies no generator of the hostile-input properties reached, each the reproduction of an answer
that was a 500 with a traceback: a non-string ``op`` to the stage function, and JSON nested
deeper than Python's parser recurses (under the size caps) to every entry point that reads JSON.
Each runs in the real functions-framework app, as ``test_entry_points_hostile`` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cloudevents.conversion import to_binary

from tests.functions.test_entry_points_hostile import apps  # noqa: F401
from tests.harness.functions import gcs_event

DEEP = b"[" * 200_000 + b"]" * 200_000  # 400 KB: under the webhook's 1 MiB cap


def _problem(response: Any) -> str:
    body = response.get_json(silent=True) or {}
    error = body.get("error")
    return json.dumps(error) if error is not None else response.get_data(as_text=True)


@pytest.mark.parametrize("op", [["cancel"], {"op": "status"}, 7, None, True])
def test_a_stage_call_whose_op_is_not_a_string_is_a_400_naming_op(apps: Any, op: Any) -> None:
    response = apps["stage"].post("/", json={"op": op, "run_id": "rabc"})
    assert response.status_code == 400, response.get_data(as_text=True)
    assert "op" in _problem(response) and "cancel" in _problem(response), "it names the field and the choices"


def test_a_stage_body_nested_too_deeply_is_a_400(apps: Any) -> None:
    response = apps["stage"].post("/", data=DEEP, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "nested too deeply" in _problem(response)


def test_the_webhooks_deeply_nested_body_under_its_cap_is_a_400(apps: Any) -> None:
    response = apps["upstream_webhook"].post(
        "/", data=DEEP, headers={"X-Webhook-Secret": "s3cret", "Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "nested too deeply" in _problem(response)


@pytest.mark.parametrize("target", ["intake_object", "intake_message", "artifact_event"])
@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_a_cloud_event_nested_too_deeply_is_a_400(apps: Any, target: str, mode: str) -> None:
    if mode == "binary":
        headers, _ = to_binary(gcs_event("rlpipe-artifacts", "runs/r1/x", 1, 1))
        response = apps[target].post("/", headers=headers, data=DEEP)
    else:
        response = apps[target].post("/", data=DEEP, headers={"Content-Type": "application/cloudevents+json"})
    assert response.status_code == 400, (response.status_code, response.get_data(as_text=True)[:300])
    assert "nested too deeply" in _problem(response)
