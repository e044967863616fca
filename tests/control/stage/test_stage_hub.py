"""``stage plan`` against a Hub that cannot be reached or never answers: a retryable 503, fast.

The Hub client's network errors come from its own HTTP library (``httpx2`` in huggingface_hub
2.4.0, ``utils/_http.py:33``), and none of them is an ``OSError`` (``httpx2/_exceptions.py``).
The workflow's ``http.default_retry`` retries a 503, never a 500, so an unclassified one would end
the run's chance to retry. ``auth_check`` takes no timeout (``hf_api.py:12119``) and the client's
session has none (``utils/_http.py:348``): the bound is ``RLPIPE_HUB_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.stage.service import StageService
from rlpipe.core.failures import TransientFailure
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import RunRecord, Source
from rlpipe.local.hub_double import HubDouble
from tests.conftest import ROOT, Buckets, minimal_request

REPO = "google/gemma-4-26b-a4b-it"


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    server.add_repo(REPO)
    server.add_known_datasets()  # plan pins the request's dataset too
    yield server
    server.stop()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _service(buckets: Buckets, run_id: str) -> StageService:
    ledger = buckets.ledger()
    request = validate_request(minimal_request())
    record = RunRecord(
        run_id=run_id, key=f"k:{run_id}", source=Source(kind="cli"), request=request.model_dump(mode="json")
    )
    record.execution.name = f"projects/p/locations/l/workflows/w/executions/{run_id}-exec"
    ledger.claim(record)
    return StageService(
        settings=Settings(project="p", artifacts_bucket=buckets.artifacts, state_bucket=buckets.state),
        ledger=ledger,
        artifacts=buckets.store("artifacts"),
        state=buckets.store("state"),
        cluster=None,  # type: ignore[arg-type]  # plan never reaches the cluster when the Hub fails
        log=Logger("test"),
        publish=lambda topic, message: None,
    )


def _plan_over_http(service: StageService, run_id: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from functions_framework import create_app

    from rlpipe.control import services

    monkeypatch.setattr(services, "stage_service", lambda log: service)
    app = create_app(target="stage", source=str(ROOT / "functions" / "main.py"), signature_type="http")
    return app.test_client().post(
        "/", json={"op": "plan", "run_id": run_id, "execution_id": f"{run_id}-exec"}
    )


def test_a_connect_error_in_plan_is_a_retryable_503_not_a_500(
    buckets: Buckets, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    response = _plan_over_http(_service(buckets, "rhubdown0001"), "rhubdown0001", monkeypatch)
    assert response.status_code == 503
    error = response.get_json()["error"]
    assert error["tag"] == "transient" and "ConnectError" in error["message"]
    run = buckets.ledger().get("rhubdown0001")
    assert run is not None and not run.terminal  # the run waits for the workflow's retry


@pytest.mark.timeout(30)  # before the fix, auth_check waited forever on a silent Hub
@pytest.mark.parametrize("route", ["revision/main", "auth-check"])
def test_a_stalled_hub_makes_plan_fail_fast_as_transient(
    route: str, buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    monkeypatch.setenv("RLPIPE_HUB_TIMEOUT_SECONDS", "1")
    run_id = f"rstall{'info' if route.startswith('rev') else 'auth'}01"
    service = _service(buckets, run_id)
    hub.stall(f"/api/models/{REPO}/{route}")
    try:  # the stall lasts until released: only our timeout can end plan
        with pytest.raises(TransientFailure, match="within 1 s"):
            service.plan(run_id, f"{run_id}-exec")
    finally:
        hub.release_stalls()
    assert hub.paths(f"/api/models/{REPO}/{route}")
    assert service.plan(run_id, f"{run_id}-exec")["stages"][0] == "convert"  # the retry, Hub back


def test_the_classifier_makes_the_hub_clients_network_errors_transient() -> None:
    """stage_http hands unknown exceptions to classify_exception; these are not OSError."""
    from huggingface_hub.utils import httpx

    from rlpipe.control.adapters.client_errors import classify_exception

    for exc in (
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("server disconnected"),
    ):
        assert not isinstance(exc, OSError)
        failure = classify_exception(exc)
        assert isinstance(failure, TransientFailure), type(exc).__name__
    assert classify_exception(httpx.InvalidURL("not a url")) is None  # a bug, not the network
