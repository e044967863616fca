"""A team's run lives in its team's namespace (core.teams): launch applies its workloads there,
where the team's LocalQueue, Secrets and quota are, and status and cleanup look for them there.
Over the Kubernetes API double and fake-gcs-server, as the stage tests are."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tests.control.stage.test_stage import NS, env, hub, kube, rewired  # noqa: F401  (fixtures)

TEAMS = {"vision": {"operators": ["user:ana@example.com"]}, "speech": {"namespace": "rlpipe-speech-runs"}}


def _team_run(env: dict[str, Any], run_id: str, team: str) -> Any:
    from rlpipe.core.runs.record import Source

    env["claim"](run_id)

    def of_team(record: Any) -> tuple[str, None]:
        record.source = Source(
            kind="gcs", bucket="b", name=f"requests/{team}/r.json", generation="1", team=team
        )
        return "team", None

    env["ledger"].update(run_id, of_team)
    service = env["service"]
    return rewired(service, settings=replace(service.settings, teams_json=json.dumps(TEAMS)))


def _names(env: dict[str, Any], namespace: str) -> list[str]:
    return [j["metadata"]["name"] for j in env["kube"].list("jobs", namespace=namespace)]


def test_a_teams_workloads_are_launched_read_and_deleted_in_its_namespace(env: dict[str, Any]) -> None:
    service = _team_run(env, "rteamns00001", "vision")
    service.plan("rteamns00001", "rteamns00001-exec")
    launched = service.launch("rteamns00001", "convert", 1, None, "rteamns00001-exec")
    assert _names(env, "rlpipe-vision") == [launched["workload"]]
    assert _names(env, NS) == [], "nothing in the deployment's own namespace"
    job = env["kube"].list("jobs", namespace="rlpipe-vision")[0]
    assert job["metadata"]["namespace"] == "rlpipe-vision"
    status = service.status("rteamns00001", "convert", 1, "rteamns00001-exec")
    assert status["phase"] != "missing", status  # found where it was applied
    assert service.cleanup("rteamns00001", "rteamns00001-exec")["deleted"] == [launched["workload"]]
    assert _names(env, "rlpipe-vision") == []


def test_a_declared_namespace_is_used_and_a_run_without_teams_stays_in_the_deployments(
    env: dict[str, Any],
) -> None:
    service = _team_run(env, "rteamns00002", "speech")
    service.plan("rteamns00002", "rteamns00002-exec")
    service.launch("rteamns00002", "convert", 1, None, "rteamns00002-exec")
    assert len(_names(env, "rlpipe-speech-runs")) == 1
    env["claim"]("rteamns00003")  # the same service without teams: today's namespace
    env["service"].plan("rteamns00003", "rteamns00003-exec")
    env["service"].launch("rteamns00003", "convert", 1, None, "rteamns00003-exec")
    assert len(_names(env, NS)) == 1


def test_a_run_of_a_team_no_longer_declared_is_never_launched_elsewhere(env: dict[str, Any]) -> None:
    import pytest

    from rlpipe.core.failures import PermanentFailure

    service = _team_run(env, "rteamns00004", "retired")
    service.plan("rteamns00004", "rteamns00004-exec")
    with pytest.raises(PermanentFailure, match="team retired, which this deployment no longer declares"):
        service.launch("rteamns00004", "convert", 1, None, "rteamns00004-exec")
    assert _names(env, NS) == [] and _names(env, "rlpipe-retired") == []
