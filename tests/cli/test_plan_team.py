"""`rlpipe plan --team`: a request planned as a team's run shows the team's namespace and limits and
what the run reserves at plan; with `--usage`, what the team has left this month (read from the
deployment's state bucket) and what plan would decide now, with the refusal's numbers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlpipe.control.adapters import blobstore
from rlpipe.core import layout
from rlpipe.core.team_limits import Holder, TeamUsage, month_of
from tests.conftest import Buckets
from tests.harness.cli import run_main

TEAMS = json.dumps(
    {
        "vision": {"limits": {"active_runs": 2, "monthly_chip_hours": 1000}},
        "speech": {"namespace": "rlpipe-speech-runs", "limits": {"monthly_chip_hours": 500}},
    }
)


def _request(tmp_path: Path) -> str:
    path = tmp_path / "request.yaml"
    path.write_text("model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\nrequest_id: team-plan\n")
    return str(path)


def _env(**extra: str) -> dict[str, str]:
    import os

    return {"PATH": os.environ["PATH"], "RLPIPE_TARGET": "gcp", "RLPIPE_TEAMS": TEAMS, **extra}


def test_a_teams_plan_names_its_namespace_limits_and_reservation(tmp_path: Path) -> None:
    done = run_main(["plan", _request(tmp_path), "--team", "vision"], _env())
    assert done.returncode == 0, done.stderr
    assert "team: vision (namespace rlpipe-vision)" in done.stdout
    assert "limits: 2 active runs, 1000 chip-hours a month (UTC)" in done.stdout
    # the default request: 32 chips (v6e-32) × 24 h of train
    assert "reserves at plan: up to 768 chip-hours (32 chips × 24 h of train" in done.stdout
    as_json = run_main(["plan", _request(tmp_path), "--team", "speech", "--json"], _env())
    plan = json.loads(as_json.stdout)
    assert {s["namespace"] for s in plan["stages"]} == {"rlpipe-speech-runs"}
    team = plan["team"]
    assert (team["name"], team["reserves_chip_hours"], team["usage"]) == ("speech", 768.0, None)
    assert any("more than the team's whole monthly budget (500)" in n for n in team["notes"])


def test_a_team_the_deployment_does_not_declare_is_refused_naming_the_teams(tmp_path: Path) -> None:
    done = run_main(["plan", _request(tmp_path), "--team", "audio"], _env())
    assert done.returncode == 2
    assert "declares no such team (teams: vision, speech)" in done.stderr


def test_usage_says_what_is_left_and_what_plan_would_decide(tmp_path: Path, buckets: Buckets) -> None:
    month = month_of(datetime.now(UTC))
    usage = TeamUsage(
        team="vision",
        month=month,
        used={"rold": 100.0},
        holders=[Holder(run_id="rrunning", since="2026-12-01T00:00:00.000000Z", reserved=200.0)],
    )
    buckets.store("state").create(layout.team_usage("vision"), blobstore.dumps(usage.model_dump(mode="json")))
    done = run_main(
        ["plan", _request(tmp_path), "--team", "vision", "--usage", "--json"], _env(**buckets.env())
    )
    assert done.returncode == 0, done.stderr
    team: dict[str, Any] = json.loads(done.stdout)["team"]
    assert team["usage"] == {
        "month": month,
        "used": 100.0,
        "running": 1,
        "running_sweep_children": 0,
        "running_reserved": 200.0,
        "waiting": 0,
        "left": 700.0,
    }
    # 768 of 900 certain left, 700 once the running run's reservation counts: it would be queued.
    assert team["at_plan"]["outcome"] == "wait" and "may hold up to 768" in team["at_plan"]["reason"]
    text = run_main(["plan", _request(tmp_path), "--team", "vision", "--usage"], _env(**buckets.env())).stdout
    assert f"{month}: 100 chip-hours used by ended runs, 1 running reserving 200, 0 queued; 700 left" in text
    assert "at plan now: wait: queued: team vision's running runs" in text


def test_usage_without_a_team_is_refused(tmp_path: Path) -> None:
    done = run_main(["plan", _request(tmp_path), "--usage"], _env())
    assert done.returncode == 2 and "--usage goes with --team" in done.stderr
