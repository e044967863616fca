"""Plan pins a team's model revision and datasets with the team's own Hub token, or with none, never
with the deployment's: with the deployment's, a team naming a private repository of another
organisation that only the deployment's token can read would get its schema, files, hashes and row
counts in its own ledger (the review's reproduction)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rlpipe.control.adapters import hub_client
from rlpipe.control.lifecycle import data_pins
from rlpipe.core.failures import PermanentFailure
from rlpipe.local.hub_double import HubDouble
from tests.control.stage.test_stage import env, hub, kube  # noqa: F401  (fixtures)
from tests.control.stage.test_stage_team_limits import _team_run, _team_service

DEPLOYMENT_TOKEN = "hf_" + "D" * 34
VISION_TOKEN = "hf_" + "V" * 34


def _recording(service: Any) -> tuple[Any, list[tuple[str, Any]]]:
    asked: list[tuple[str, Any]] = []

    def resolve(repo: str, revision: str, **hub: Any) -> str:
        asked.append(("revision", hub.get("token", "(the deployment's)")))
        return hub_client.resolve_revision(repo, revision, "read-token")  # the Hub double's answer

    def pin_data(req: Any, **hub: Any) -> dict[str, Any]:
        asked.append(("data", hub.get("token", "(the deployment's)")))
        return data_pins.pin(req, token="read-token")

    return replace(service, resolve_revision=resolve, pin_data=pin_data), asked


def test_a_teams_run_is_pinned_with_its_own_token_or_none_never_the_deployments(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hub_client.HF_TOKEN_ENV, DEPLOYMENT_TOKEN)
    monkeypatch.setenv(hub_client.team_token_env("vision"), VISION_TOKEN)
    service, asked = _recording(_team_service(env))
    _team_run(env, "rtokenvis001", "vision")
    service.plan("rtokenvis001", "rtokenvis001-exec")
    assert asked == [("revision", VISION_TOKEN), ("data", VISION_TOKEN)], "vision's own"
    service.finish("rtokenvis001", "cancelled", None, "rtokenvis001-exec")  # its team place back
    asked.clear()
    monkeypatch.delenv(hub_client.team_token_env("vision"))  # a team the deployment gave no token
    _team_run(env, "rtokenvis002", "vision")
    service.plan("rtokenvis002", "rtokenvis002-exec")
    assert asked == [("revision", False), ("data", False)], "none: anonymous, not the deployment's"


def test_a_deployment_without_teams_pins_with_its_own_token_as_before(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(hub_client.HF_TOKEN_ENV, DEPLOYMENT_TOKEN)
    service, asked = _recording(env["service"])
    env["claim"]("rtokendep001")
    service.plan("rtokendep001", "rtokendep001-exec")
    assert asked == [("revision", "(the deployment's)"), ("data", "(the deployment's)")]


def test_anonymous_is_anonymous_on_the_hub_a_gated_repository_is_refused(
    hub: HubDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``False`` reaches the Hub as no token at all (huggingface_hub's meaning), even where the
    deployment's token is set: the gated repository the deployment's token may read is refused."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    monkeypatch.setenv(hub_client.HF_TOKEN_ENV, DEPLOYMENT_TOKEN)
    with pytest.raises(PermanentFailure):
        hub_client.resolve_revision("google/gated-model", "main", False)
