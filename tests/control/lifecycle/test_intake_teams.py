"""Teams at intake, through the real function processes: where a request arrives decides its team,
and every allowlist is the team's own. Each cross-team case of docs/teams.md is refused here,
naming the field and the team's allowlist: another team's Secret, publish target, queue and
``gs://`` data, a message on a topic no team owns, and a drop outside every team's folder.

Two teams, ``vision`` and ``speech``, each with its own lists (``RLPIPE_TEAMS``, as Terraform
renders ``var.teams``). A request in vision's folder naming speech's things is vision's request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Buckets, minimal_request
from tests.control.lifecycle.test_intake import (  # noqa: F401  (fixtures: the module's shared processes)
    _error_records,
    _runs,
    _upload,
    buckets,
    executions,
    functions,
    intake_functions,
    module_buckets,
    module_executions,
)
from tests.harness.functions import FunctionServer, gcs_event, post, pubsub_event

TEAMS = {
    "vision": {
        "operators": ["user:ana@example.com"],
        "read_secrets": ["hf-vision:token"],
        "write_secrets": ["hf-vision-write:token"],
        "publish_repos": ["vision-org/"],
        "read_only_gcs": ["gs://vision-data/"],
        "queues": ["user-queue"],
    },
    "speech": {
        "operators": ["user:sam@example.com"],
        "read_secrets": ["hf-speech:token"],
        "write_secrets": ["hf-speech-write:token"],
        "publish_repos": ["speech-org/"],
        "read_only_gcs": ["gs://speech-data/"],
        "queues": ["speech-queue"],
    },
}
PROJECT_TOPICS = "projects/rlpipe-test/topics/"
VISION_WRITE = {"name": "hf-vision-write", "key": "token"}


def vision_request(**fields: Any) -> dict[str, Any]:
    """A request that vision's lists allow: its own token Secret, its own organisation."""
    return minimal_request(hf_token_secret={"name": "hf-vision", "key": "token"}, **fields)


@pytest.fixture(scope="module")
def module_functions(
    module_buckets: Buckets, module_executions: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FunctionServer]]:
    """Both intake functions with the two teams, shared by this module's tests (as test_intake's)."""
    env = module_buckets.env(
        RLPIPE_WORKFLOWS_ENDPOINT=module_executions.target, RLPIPE_TEAMS=json.dumps(TEAMS)
    )
    yield from intake_functions(env, tmp_path_factory.mktemp("teams-intake-functions"))


def _drop(buckets: Buckets, functions: dict[str, FunctionServer], name: str, request: dict[str, Any]) -> None:
    generation, size = _upload(buckets, name, json.dumps(request).encode())
    response = post(functions["object"].url, gcs_event(buckets.requests, name, generation, size))
    assert response.status_code == 200, functions["object"].logs()[-2000:]


def _problems(buckets: Buckets) -> list[dict[str, Any]]:
    [error] = _error_records(buckets)
    return list(error["problems"])


def test_a_request_in_a_teams_folder_is_that_teams_run(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    _drop(
        buckets,
        functions,
        "requests/vision/a.json",
        vision_request(publish={"repo": "vision-org/tuned", "token_secret": VISION_WRITE}),
    )
    assert _error_records(buckets) == []
    [run_id] = _runs(buckets)
    record = buckets.ledger().get(run_id)
    assert record is not None and record.team == "vision" and record.source.team == "vision"
    assert _error_records(buckets) == [] and len(executions.creates()) == 1


@pytest.mark.parametrize(
    ("fields", "path", "allowlist"),
    [
        (
            {"hf_token_secret": {"name": "hf-speech", "key": "token"}},
            "hf_token_secret",
            "teams.vision.read_secrets",
        ),
        (
            {"publish": {"repo": "speech-org/tuned", "token_secret": VISION_WRITE}},
            "publish.repo",
            "teams.vision.publish_repos",
        ),
        ({"tpu": {"queue": "speech-queue"}}, "tpu.queue", "teams.vision.queues"),
        (
            {"maxtext_overrides": {"hf_data_dir": "gs://speech-data/gsm8k/"}},
            "maxtext_overrides.hf_data_dir",
            "teams.vision.read_only_gcs",
        ),
    ],
    ids=["secret", "publish-target", "queue", "gcs-prefix"],
)
def test_a_request_naming_another_teams_thing_is_refused_naming_the_field_and_the_teams_list(
    fields: dict[str, Any],
    path: str,
    allowlist: str,
    buckets: Buckets,
    executions: Any,
    functions: dict[str, FunctionServer],
) -> None:
    request = {**vision_request(), **fields}
    _drop(buckets, functions, "requests/vision/theirs.json", request)
    [problem] = [p for p in _problems(buckets) if p["path"] == path]
    assert allowlist in problem["fix"] and "team vision" in problem["message"]
    assert _runs(buckets) == [] and executions.creates() == []


def test_the_same_request_in_its_own_teams_folder_is_accepted(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    """What vision may not name, speech may: the refusal above is by team, not by the value."""
    speech = minimal_request(
        hf_token_secret={"name": "hf-speech", "key": "token"},
        publish={"repo": "speech-org/tuned", "token_secret": {"name": "hf-speech-write", "key": "token"}},
        tpu={"queue": "speech-queue"},
        maxtext_overrides={"hf_data_dir": "gs://speech-data/gsm8k/"},
    )
    _drop(buckets, functions, "requests/speech/ours.json", speech)
    assert _error_records(buckets) == []
    [run_id] = _runs(buckets)
    assert buckets.ledger().get(run_id).team == "speech"  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["requests/nobody/a.json", "requests/a.json"], ids=["unknown-folder", "top"])
def test_a_drop_outside_every_teams_folder_is_refused(
    name: str, buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    _drop(buckets, functions, name, vision_request())
    [problem] = _problems(buckets)
    assert "no team's folder" in problem["message"] and "vision, speech" in problem["fix"]
    assert _runs(buckets) == []


def test_a_message_decides_its_team_by_its_topic_and_one_on_no_teams_topic_is_refused(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    body = json.dumps(vision_request()).encode()
    on_speech = post(
        functions["message"].url, pubsub_event(PROJECT_TOPICS + "rlpipe-requests-speech", body, "m-1")
    )
    assert on_speech.status_code == 200
    # vision's Secret (and the queue speech does not list), on speech's topic: speech's request
    [problem] = [p for p in _problems(buckets) if p["path"] == "hf_token_secret"]
    assert "teams.speech.read_secrets" in problem["fix"]

    stray = post(functions["message"].url, pubsub_event(PROJECT_TOPICS + "requests", body, "m-2"))
    assert stray.status_code == 200
    messages = sorted(p["message"] for e in _error_records(buckets) for p in e["problems"])
    assert any("a topic no team owns" in m for m in messages)

    ok = post(functions["message"].url, pubsub_event(PROJECT_TOPICS + "rlpipe-requests-vision", body, "m-3"))
    assert ok.status_code == 200
    [run_id] = _runs(buckets)
    assert buckets.ledger().get(run_id).team == "vision"  # type: ignore[union-attr]


def test_an_upstream_release_runs_for_its_watch_entrys_team_and_one_without_a_team_is_refused(
    buckets: Buckets, executions: Any
) -> None:
    from rlpipe.core.request import validate_request
    from rlpipe.core.request.policy import Policy
    from rlpipe.core.runs.record import Source
    from rlpipe.core.teams import parse_teams
    from tests.conftest import real_intake

    teams = parse_teams(TEAMS)
    intake = real_intake(buckets, executions, teams=teams)
    request = validate_request(vision_request(), Policy().for_team(teams.named("vision")))  # type: ignore[arg-type]
    body = json.dumps(vision_request()).encode()
    ours = intake.submit(
        body,
        Source(kind="upstream", name="google/x", generation="a" * 40, team="vision"),
        "up:1",
        request=request,
    )
    assert ours.outcome == "started" and buckets.ledger().get(ours.run_id).team == "vision"  # type: ignore[union-attr]
    for team, fragment in ((None, "belongs to no team"), ("nobody", "does not declare")):
        refused = intake.submit(
            body,
            Source(kind="upstream", name="google/x", generation="b" * 40, team=team),
            f"up:{team}",
            request=request,
        )
        assert refused.outcome == "rejected"
        messages = [p["message"] for e in _error_records(buckets) for p in e["problems"]]
        assert any(fragment in m for m in messages), messages


def test_a_teams_list_no_request_could_satisfy_refuses_the_declaration_naming_the_team() -> None:
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.core.problems import RequestInvalid

    declared = Settings(teams_json=json.dumps({"vision": {"extra_env": ["*"]}, "speech": {}}))
    with pytest.raises(RequestInvalid) as refused:
        declared.teams()
    [problem] = refused.value.problems
    assert problem.path == "RLPIPE_TEAMS.vision" and "*" in problem.message
