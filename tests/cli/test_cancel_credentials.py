"""``rlpipe cancel`` with an operator's credentials: the ID token for the stage function, and a cancel
that always reaches cleanup and finish.

No network: Google's token endpoints are answered by a fake transport (``requests.Session.send``
for the IAM Credentials call and the stage POST, a fake ``google.auth.transport.Request`` for the
metadata server), so what is tested is exactly which credentials the CLI uses and what it sends.
"""

from __future__ import annotations

import base64
import json
import time
from types import SimpleNamespace
from typing import Any

import google.auth
import google.auth.credentials
import google.oauth2.credentials
import google.oauth2.id_token
import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions
from google.auth import impersonated_credentials

from rlpipe.cli import runs
from rlpipe.control.adapters.settings import Settings
from tests.harness import operator_answers

STAGE_URL = "https://rlpipe-stage-abc123-uc.a.run.app"
OPERATOR_SA = "rlpipe-operator@my-project.iam.gserviceaccount.com"
IAM_URL = (  # IAM Credentials API generateIdToken, as google-auth calls it
    f"https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/{OPERATOR_SA}:generateIdToken"
)


def unsigned_jwt(**claims: Any) -> str:
    def part(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.{part('sig')}"


ID_TOKEN = unsigned_jwt(aud=STAGE_URL, email=OPERATOR_SA, exp=int(time.time()) + 3600)


class UserCredentials(google.auth.credentials.Credentials):
    """Stands for the operator's ADC after ``gcloud auth application-default login``: an access
    token for the APIs, but no way to sign an ID token."""

    def __init__(self) -> None:
        super().__init__()
        self.token = "operator-access-token"

    def refresh(self, request: Any) -> None:
        self.token = "operator-access-token"


class Transport:
    """Fake HTTP for requests: the IAM Credentials call and the stage function."""

    def __init__(self) -> None:
        self.sent: list[requests.PreparedRequest] = []

    def __call__(
        self, session: requests.Session, prepared: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        self.sent.append(prepared)
        response = requests.Response()
        response.status_code = 200
        response.headers["Content-Type"] = "application/json"
        if prepared.url == IAM_URL:
            response._content = json.dumps({"token": ID_TOKEN}).encode()
        elif prepared.url and prepared.url.startswith(STAGE_URL):
            op = json.loads(prepared.body or b"{}")["op"]
            response._content = json.dumps(
                {"deleted": ["r1-train-a1"]} if op == "cleanup" else {"state": "cancelled"}
            ).encode()
        else:
            response.status_code = 404
            response._content = b"{}"
        response.url = prepared.url or ""
        return response


@pytest.fixture
def transport(monkeypatch: pytest.MonkeyPatch) -> Transport:
    fake = Transport()

    def send(
        session: requests.Session, prepared: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        return fake(session, prepared, **kwargs)

    monkeypatch.setattr(requests.Session, "send", send)
    return fake


def no_metadata_server(*args: Any, **kwargs: Any) -> Any:
    raise auth_exceptions.TransportError("no metadata server here")


# ------------------------------------------------------------------------------ the token


def test_fetch_id_token_alone_fails_for_the_documented_user_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """What cancel did before: ``fetch_id_token`` with the ADC ``gcloud auth application-default
    login`` writes (type authorized_user) and no metadata server raises."""
    adc = tmp_path / "application_default_credentials.json"
    adc.write_text(
        json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"})
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    monkeypatch.setattr("google.auth.compute_engine._metadata.is_on_gce", lambda request: False)
    with pytest.raises(auth_exceptions.DefaultCredentialsError):
        google.oauth2.id_token.fetch_id_token(no_metadata_server, STAGE_URL)


def test_user_credentials_impersonate_the_operator_account(transport: Transport) -> None:
    token = runs.id_token(STAGE_URL, impersonate=OPERATOR_SA, credentials=UserCredentials())
    assert token == ID_TOKEN
    (call,) = transport.sent
    assert call.url == IAM_URL
    assert call.headers["authorization"] == "Bearer operator-access-token"  # the operator's own token
    assert json.loads(call.body or b"{}") == {"audience": STAGE_URL, "delegates": None, "includeEmail": True}


def test_impersonated_adc_need_no_setting(transport: Transport) -> None:
    """``gcloud auth application-default login --impersonate-service-account=SA`` gives ADC of type
    impersonated_service_account: they sign for the stage URL as they are."""
    adc = impersonated_credentials.Credentials(
        source_credentials=UserCredentials(),
        target_principal=OPERATOR_SA,
        target_scopes=[runs.CLOUD_PLATFORM],
    )
    assert runs.id_token(STAGE_URL, credentials=adc) == ID_TOKEN
    assert [c.url for c in transport.sent] == [IAM_URL]


def test_plain_user_credentials_are_refused_with_the_fix() -> None:
    user = google.oauth2.credentials.Credentials(
        token="t",
        refresh_token="r",
        client_id="c",
        client_secret="s",
        token_uri="https://oauth2.googleapis.com/token",
    )
    with pytest.raises(RuntimeError) as info:
        runs.id_token(STAGE_URL, credentials=user)
    assert runs.IMPERSONATE_ENV in str(info.value) and "--impersonate-service-account" in str(info.value)


def test_call_stage_sends_the_impersonated_token(
    monkeypatch: pytest.MonkeyPatch, transport: Transport
) -> None:
    for var in ("RLPIPE_LOCAL", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(runs.IMPERSONATE_ENV, OPERATOR_SA)
    monkeypatch.setattr(google.auth, "default", lambda scopes=None: (UserCredentials(), "my-project"))
    settings = Settings(project="my-project", stage_url=STAGE_URL)
    assert not settings.local
    assert runs.call_stage(settings, {"op": "cleanup", "run_id": "r1"}) == {"deleted": ["r1-train-a1"]}
    iam, stage = transport.sent
    assert iam.url == IAM_URL
    assert stage.url == STAGE_URL + "/" or stage.url == STAGE_URL
    assert stage.headers["Authorization"] == f"Bearer {ID_TOKEN}"


# ------------------------------------------------------------------------------ the cancel path


def _ledger() -> Any:
    record = SimpleNamespace(
        execution=SimpleNamespace(name="projects/p/locations/l/workflows/w/executions/e1"), sweep=None
    )
    return SimpleNamespace(get=lambda run_id: record, store=None)  # a run alone: no group's policy acts


def test_a_refused_execution_cancel_is_reported_and_the_run_is_still_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []

    def fake_stage(settings: Settings, body: dict[str, Any]) -> dict[str, Any]:
        calls.append(body)
        if body.get("check_only"):
            return {"run_id": body["run_id"], "allowed": True}
        return operator_answers.cancelled(body["run_id"], deleted=["r1-train-a1"]).model_dump()

    class Refusing:
        def cancel(self, name: str) -> bool:
            raise gexc.PermissionDenied("Permission 'workflows.executions.cancel' denied on resource")

    monkeypatch.setattr(runs, "call_stage", fake_stage)
    result = runs.cancel(Settings(stage_url=STAGE_URL), _ledger(), "r1", orchestrator=Refusing())
    # Whether this operator may, then the operation: the stage function cleans up and finishes
    # (control/stage/service.py cancel).
    assert calls == [{"op": "cancel", "run_id": "r1", "check_only": True}, {"op": "cancel", "run_id": "r1"}]
    assert result["execution_cancelled"] is False and result["state"] == "cancelled"
    assert result["deleted"] == ["r1-train-a1"]
    assert (
        "PermissionDenied" in result["execution_error"]
        and "roles/workflows.invoker" in result["execution_error"]
    )


def test_a_cleanup_the_stage_function_reports_failed_is_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_stage(settings: Settings, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("check_only"):
            return {"run_id": body["run_id"], "allowed": True}
        return operator_answers.cancelled(
            body["run_id"], cleanup_error="ApiException: (503) unavailable"
        ).model_dump()

    monkeypatch.setattr(runs, "call_stage", fake_stage)
    ok = SimpleNamespace(cancel=lambda name: True)
    result = runs.cancel(Settings(stage_url=STAGE_URL), _ledger(), "r1", orchestrator=ok)
    assert result["state"] == "cancelled" and result["execution_cancelled"] is True
    assert "503" in result["cleanup_error"]


def test_the_cli_prints_why_the_execution_was_not_cancelled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlpipe.cli import main as cli

    result = {
        "state": "cancelled",
        "execution_cancelled": False,
        "deleted": ["r1-train-a1"],
        "execution_error": "PermissionDenied: denied (needs roles/workflows.invoker)",
    }
    monkeypatch.setattr(runs, "cancel", lambda settings, ledger, run_id: result)
    monkeypatch.setattr(cli, "_ledger", lambda settings: None)
    assert cli.main(["cancel", "r1"]) == 0
    out, err = capsys.readouterr()
    assert "run r1: cancelled" in out
    assert "the execution was not cancelled: PermissionDenied" in err and "roles/workflows.invoker" in err


def test_an_operator_the_stage_function_refuses_cancels_no_execution(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a deployment with teams, the stage function decides whose run it is before the CLI
    touches the run's Workflows execution (IAM lets any operator cancel any execution of the one
    workflow): its refusal stops everything."""
    refusal = runs.StageRefused(
        "cancel", 403, "forbidden", "sam@example.com is not an operator of team vision"
    )
    calls: list[dict[str, Any]] = []

    def refusing_stage(settings: Settings, body: dict[str, Any]) -> dict[str, Any]:
        calls.append(body)
        raise refusal

    class Recording:
        def __init__(self) -> None:
            self.cancelled: list[str] = []

        def cancel(self, name: str) -> bool:
            self.cancelled.append(name)
            return True

    monkeypatch.setattr(runs, "call_stage", refusing_stage)
    executions = Recording()
    with pytest.raises(runs.StageRefused) as refused:
        runs.cancel(Settings(stage_url=STAGE_URL), _ledger(), "r1", orchestrator=executions)
    assert refused.value is refusal and executions.cancelled == []
    assert calls == [{"op": "cancel", "run_id": "r1", "check_only": True}]
