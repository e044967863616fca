"""The conversion cache with teams declared, as a user met it: a team's second run converts again,
and a team's run trains on a conversion made before teams were declared (with the deployment's
token). Each conversion here is made the way the stage function makes one: plan, launch, the Job's
own ``base_output_directory=`` argument (what MaxText's converter writes to) filled and the Job
completed, then the status read that publishes the cache entry. Nothing seeds a cache key by hand,
so a test cannot share a mistake of the code's key. Over the Kubernetes API double and
fake-gcs-server, as the stage tests are."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from rlpipe.control.stage.service import StageService
from rlpipe.core.runs.record import Source
from tests.control.stage.test_stage import NS, _conditions, env, hub, kube, rewired  # noqa: F401  (fixtures)

TEAMS = {"vision": {"limits": {"active_runs": 4}}, "speech": {"limits": {"active_runs": 4}}}


def _with_teams(env: dict[str, Any]) -> StageService:
    service: StageService = env["service"]
    return rewired(service, settings=replace(service.settings, teams_json=json.dumps(TEAMS)))


def _claim(env: dict[str, Any], run_id: str, team: str | None) -> None:
    env["claim"](run_id)
    if team is None:
        return

    def of_team(record: Any) -> tuple[str, None]:
        record.source = Source(
            kind="gcs", bucket="b", name=f"requests/{team}/r.json", generation="1", team=team
        )
        return "team", None

    env["ledger"].update(run_id, of_team)


def _convert(env: dict[str, Any], service: StageService, run_id: str) -> dict[str, Any]:
    """Plan the run (→ its plan), and when it must convert, convert it as its Job would."""
    plan = service.plan(run_id, f"{run_id}-exec")
    if "convert" not in plan["stages"]:
        return plan
    service.launch(run_id, "convert", 1, None, f"{run_id}-exec")
    namespace = service._namespace(env["ledger"].get(run_id))
    job = env["kube"].get("jobs", f"{run_id}-convert-a1", namespace=namespace)
    args = " ".join(
        " ".join(c.get("args", []) + c.get("command", []))
        for c in job["spec"]["template"]["spec"]["containers"]
    )
    out = re.search(r"base_output_directory=gs://[^/]+/(\S+/)", args)
    assert out is not None, args
    env["store"].put(out.group(1) + "0/items/_METADATA", b"{}")
    env["store"].put(out.group(1) + "0/commit_success.txt", b"ok")
    env["kube"].patch_status(
        "jobs", f"{run_id}-convert-a1", _conditions("SuccessCriteriaMet", "Complete"), namespace=namespace
    )
    assert service.status(run_id, "convert", 1, f"{run_id}-exec")["phase"] == "succeeded"
    return plan


def test_a_teams_second_run_hits_the_teams_cache_and_no_other_team_reads_it(env: dict[str, Any]) -> None:
    service = _with_teams(env)
    _claim(env, "rvisfirst001", "vision")
    assert _convert(env, service, "rvisfirst001")["cache_hit"] is False
    _claim(env, "rvissecond01", "vision")
    second = service.plan("rvissecond01", "rvissecond01-exec")
    assert second["cache_hit"] is True and "convert" not in second["stages"], second
    first = env["ledger"].get("rvisfirst001")
    assert env["ledger"].get("rvissecond01").lineage.converted_uri == first.lineage.converted_uri
    _claim(env, "rspeechrun01", "speech")  # the same repository at the same commit, another team
    other = service.plan("rspeechrun01", "rspeechrun01-exec")
    assert other["cache_hit"] is False and other["stages"][0] == "convert"


def test_a_conversion_made_before_teams_were_declared_is_read_by_no_teams_run(env: dict[str, Any]) -> None:
    _claim(env, "rbeforeteam1", None)
    assert _convert(env, env["service"], "rbeforeteam1")["cache_hit"] is False
    _claim(env, "rnoteamsrun2", None)  # still without teams: that cache serves the deployment
    assert env["service"].plan("rnoteamsrun2", "rnoteamsrun2-exec")["cache_hit"] is True
    service = _with_teams(env)
    for team in ("vision", "default"):
        run_id = f"r{team[:4]}after01"
        _claim(env, run_id, team)
        plan = service.plan(run_id, f"{run_id}-exec")
        assert plan["cache_hit"] is False and plan["stages"][0] == "convert", (team, plan)
