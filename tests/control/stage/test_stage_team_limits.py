"""The stage plan under a team's limits (core.team_limits): a run over active_runs is queued with the
count, and goes on when a place is given back at the end of another; a run its team's monthly
budget cannot hold fails at plan with the numbers and its rule, before any workload exists. Over
the Kubernetes API double and fake-gcs-server, as the stage tests are."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from rlpipe.core import layout
from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.runs.record import Source
from tests.control.stage.test_stage import NS, env, hub, kube, rewired  # noqa: F401  (fixtures)

TEAMS = {
    "vision": {"limits": {"active_runs": 1}},
    "speech": {"limits": {"monthly_chip_hours": 500}},
}


def _team_service(env: dict[str, Any]) -> Any:
    service = env["service"]
    return rewired(service, settings=replace(service.settings, teams_json=json.dumps(TEAMS)))


def _team_run(env: dict[str, Any], run_id: str, team: str) -> None:
    env["claim"](run_id)

    def of_team(record: Any) -> tuple[str, None]:
        record.source = Source(
            kind="gcs", bucket="b", name=f"requests/{team}/r.json", generation="1", team=team
        )
        return "team", None

    env["ledger"].update(run_id, of_team)


def test_a_run_over_the_teams_active_runs_waits_and_goes_on_when_one_ends(env: dict[str, Any]) -> None:
    service = _team_service(env)
    _team_run(env, "rlimita0001", "vision")
    _team_run(env, "rlimitb0001", "vision")
    assert service.plan("rlimita0001", "rlimita0001-exec")["skip"] is False
    queued = service.plan("rlimitb0001", "rlimitb0001-exec")
    assert queued["wait"] is True and queued["wait_seconds"] == service.settings.callback_timeout_seconds
    assert "team vision has 1 of 1 active runs" in queued["wait_reason"]
    admission = env["ledger"].get("rlimitb0001").admission  # rlpipe status shows it
    assert (admission.waits_for, admission.reason) == ("team-place", queued["wait_reason"])
    service.finish("rlimita0001", "cancelled", None, "rlimita0001-exec")  # its end gives the place back
    going = service.plan("rlimitb0001", "rlimitb0001-exec")
    assert going.get("wait") is None and going["stages"], going
    assert env["ledger"].get("rlimitb0001").admission is None
    service.launch("rlimitb0001", "convert", 1, None, "rlimitb0001-exec")
    (job,) = env["kube"].list("jobs", namespace="rlpipe-vision")
    assert job["metadata"]["labels"]["rlpipe.dev/team"] == "vision"
    assert job["spec"]["template"]["metadata"]["labels"]["rlpipe.dev/team"] == "vision"
    service.cleanup("rlimitb0001", "rlimitb0001-exec")


def test_a_queued_run_asks_the_hub_for_its_commits_once_however_often_it_plans(env: dict[str, Any]) -> None:
    """A run waiting for its team's place re-plans every poll; its commits are resolved at the
    first plan and kept, so a queue of waiting runs does not ask the Hub again each time (the
    combination suite's stack was rate-limited, 429, and the plan that failed ended its execution)."""
    asked: list[tuple[str, str]] = []

    def resolve(repo: str, revision: str, **hub: Any) -> str:
        asked.append((repo, revision))
        return "c" * 40

    service = replace(_team_service(env), resolve_revision=resolve)
    _team_run(env, "rholdhub0001", "vision")
    _team_run(env, "rwaithub0001", "vision")
    assert service.plan("rholdhub0001", "rholdhub0001-exec")["skip"] is False
    for _ in range(3):
        assert service.plan("rwaithub0001", "rwaithub0001-exec")["wait"] is True
    assert len(asked) == 2, asked  # once per run, not once per plan
    service.finish("rholdhub0001", "cancelled", None, "rholdhub0001-exec")
    going = service.plan("rwaithub0001", "rwaithub0001-exec")
    assert going.get("wait") is None and len(asked) == 2
    assert env["ledger"].get("rwaithub0001").lineage.hf_sha == "c" * 40


def test_a_run_its_teams_budget_cannot_hold_fails_at_plan_with_the_numbers(env: dict[str, Any]) -> None:
    service = _team_service(env)
    _team_run(env, "rbudget0001", "speech")  # reserves 32 chips × 24 h = 768 of 500
    with pytest.raises(PermanentFailure, match="cannot hold this run") as refused:
        service.plan("rbudget0001", "rbudget0001-exec")
    assert (
        "768 chip-hours" in refused.value.reason
        and "500.0 of the team's 500 chip-hours" in refused.value.reason
    )
    record = env["ledger"].get("rbudget0001")
    assert record.state == "failed" and record.failure is not None
    assert (record.failure.rule, record.failure.stage) == (reported.TEAM_BUDGET_EXCEEDED, "plan")
    assert record.attempts == [] and env["kube"].list("jobs", namespace="rlpipe-speech") == []
    assert env["published"][-1][1]["failure"]["rule"] == reported.TEAM_BUDGET_EXCEEDED


def test_a_deployment_without_teams_keeps_no_usage(env: dict[str, Any]) -> None:
    env["claim"]("rnoteams001")
    env["service"].plan("rnoteams001", "rnoteams001-exec")
    assert list(env["state"].list(layout.TEAMS_PREFIX)) == []


def _sweep_of(env: dict[str, Any], team: str) -> list[str]:
    """A sweep of two children claimed for ``team`` (as intake claims them), its conversion cached."""
    from rlpipe.control.adapters import blobstore
    from rlpipe.core.manifests import RenderContext, conversion_cache
    from tests.control.stage.test_stage import REPO
    from tests.harness.sweeps import claim_sweep, sweep_request

    req = sweep_request(
        request_id=f"team-sweep-{team}", grid={"training.num_generations": [2, 4]}, max_parallel=2
    )
    _, children = claim_sweep(
        env["ledger"], req, f"team-sweep-{team}", Source(kind="gcs", team=team), executions=True
    )
    ids = [c.run_id for c in children]
    sha = env["service"].resolve_revision(REPO, "main")
    # The team's own cache (docs/teams.md: a team's conversions are its own), as its plan reads it.
    scoped = RenderContext(run_id="x", bucket=env["store"].bucket_name, hf_revision=sha, cache_scope=team)
    cache = conversion_cache(req, scoped)
    env["state"].create(cache.ready, blobstore.dumps({"attempt_dir": cache.attempt_dir("rother000001", 1)}))
    return ids


def test_a_sweeps_child_over_the_teams_sweep_children_waits_and_a_plain_run_goes_on(
    env: dict[str, Any],
) -> None:
    service = _team_service(env)
    service = rewired(
        service,
        settings=replace(
            service.settings,
            teams_json=json.dumps({"vision": {"limits": {"active_runs": 3, "sweep_children": 1}}}),
        ),
    )
    first, second = _sweep_of(env, "vision")
    assert service.plan(first, f"{first}-exec").get("wait") is None  # the sweep's slot, then the team's
    queued = service.plan(second, f"{second}-exec")
    assert queued["wait"] is True and "team vision has 1 of 1 sweep children running" in queued["wait_reason"]
    _team_run(env, "rplainrun001", "vision")
    assert service.plan("rplainrun001", "rplainrun001-exec").get("wait") is None


def test_a_run_queued_longer_than_timeouts_waiting_fails_naming_what_it_waited_for(
    env: dict[str, Any],
) -> None:
    """Every wait of the workflow ends: plan queues the run while its team's one place is held,
    and ends it once it has waited past ``timeouts.waiting`` (the first plan that finds it so)."""
    import time

    now = [time.time()]
    service = rewired(_team_service(env), clock=lambda: now[0])
    _team_run(env, "rholdsplace1", "vision")
    _team_run(env, "rwaitsbound", "vision")
    assert service.plan("rholdsplace1", "rholdsplace1-exec")["skip"] is False
    assert service.plan("rwaitsbound", "rwaitsbound-exec")["wait"] is True
    bound = env["ledger"].get("rwaitsbound").request["timeouts"]["waiting"]
    now[0] += bound / 2
    assert service.plan("rwaitsbound", "rwaitsbound-exec")["wait"] is True  # still within its bound
    now[0] += bound / 2 + 1
    with pytest.raises(PermanentFailure, match=r"longer than timeouts\.waiting") as ended:
        service.plan("rwaitsbound", "rwaitsbound-exec")
    assert (
        "a place under its team's limits" in ended.value.reason and "1 of 1 active runs" in ended.value.reason
    )
    record = env["ledger"].get("rwaitsbound")
    assert record.state == "failed" and record.failure is not None and record.admission is None
    assert (record.failure.rule, record.failure.stage) == (reported.WAIT_BOUND, "plan")
    assert env["published"][-1][1]["failure"]["rule"] == reported.WAIT_BOUND
    # Its end gave nothing back that it did not hold: the holder still goes on.
    assert service.plan("rholdsplace1", "rholdsplace1-exec").get("wait") is None
