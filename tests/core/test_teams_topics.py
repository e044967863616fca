"""Where a team's messages arrive, and what a declaration may say about topics and read-only data.

The review's reproductions: a message on ``projects/<any project>/topics/rlpipe-requests-vision``
counted as vision's; a team could be declared on the deployment's own requests or status topic;
``RLPIPE_TEAMS`` naming one team twice kept the last silently; a read-only prefix inside the
artifacts bucket (where every run writes) loaded without a word.
"""

from __future__ import annotations

import json

import pytest

from rlpipe.control.adapters.settings import Settings
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.teams import parse_teams

PROJECT = "rlpipe-test"
VISION = {"read_secrets": ["hf-vision:token"]}
SPEECH = {"read_secrets": ["hf-speech:token"]}


def _settings(teams: str, **fields: object) -> Settings:
    base: dict[str, object] = {
        "project": PROJECT,
        "requests_topic": "rlpipe-requests",
        "status_topic": "rlpipe-status",
        "artifacts_bucket": "rlpipe-artifacts",
        "teams_json": teams,
    }
    return Settings(**{**base, **fields})  # type: ignore[arg-type]


def _problems(settings: Settings) -> list[Problem]:
    with pytest.raises(RequestInvalid) as refused:
        settings.teams()
    return list(refused.value.problems)


# ---- gap 2: a team's topic is matched with the deployment's project ---------------------------


def test_a_teams_topic_in_another_project_is_no_teams_topic() -> None:
    teams = _settings(json.dumps({"vision": VISION, "speech": SPEECH})).teams()
    vision = teams.named("vision")
    assert vision is not None
    assert teams.for_topic(f"projects/{PROJECT}/topics/rlpipe-requests-vision") is vision
    assert teams.for_topic("projects/attacker-project/topics/rlpipe-requests-vision") is None
    assert teams.for_topic("projects/rlpipe-test-2/topics/rlpipe-requests-vision") is None


def test_a_topic_path_is_no_teams_when_the_project_is_not_known() -> None:
    """Without the deployment's project nothing proves a full path is the deployment's topic."""
    teams = parse_teams({"vision": VISION})
    assert teams.for_topic("projects/anything/topics/rlpipe-requests-vision") is None
    assert teams.for_topic("projects/p/topics/rlpipe-requests-vision", project="p") is teams.named("vision")


# ---- gap 11: the deployment's own topics, and a team declared twice --------------------------------


@pytest.mark.parametrize(
    ("topic", "setting"),
    [("rlpipe-requests", "RLPIPE_REQUESTS_TOPIC"), ("rlpipe-status", "RLPIPE_STATUS_TOPIC")],
)
def test_a_team_on_the_deployments_own_topic_is_refused_naming_the_team_and_field(
    topic: str, setting: str
) -> None:
    problems = _problems(_settings(json.dumps({"vision": {**VISION, "topic": topic}})))
    [problem] = [p for p in problems if p.path == "RLPIPE_TEAMS.vision.topic"]
    assert setting in problem.message and topic in problem.message
    assert "leave it out" in problem.fix


def test_a_team_on_the_deployments_own_topic_by_its_full_path_is_refused_too() -> None:
    declared = json.dumps({"vision": {"topic": f"projects/{PROJECT}/topics/rlpipe-requests"}})
    assert any(p.path == "RLPIPE_TEAMS.vision.topic" for p in _problems(_settings(declared)))


def test_a_team_declared_twice_is_refused_naming_it() -> None:
    text = '{"vision": {"read_secrets": ["hf-vision:token"]}, "vision": {"read_secrets": ["hf-token:token"]}}'
    with pytest.raises(RequestInvalid) as refused:
        parse_teams(text)
    [problem] = refused.value.problems
    assert problem.path == "RLPIPE_TEAMS.vision" and "twice" in problem.message


def test_a_setting_given_twice_in_one_team_is_refused_naming_the_team_and_field() -> None:
    text = '{"teams": {"vision": {"read_secrets": ["hf-vision:token"], "read_secrets": ["hf-token:token"]}}}'
    with pytest.raises(RequestInvalid) as refused:
        parse_teams(text)
    assert [p.path for p in refused.value.problems] == ["RLPIPE_TEAMS.vision.read_secrets"]


def test_a_yaml_declaration_naming_a_team_twice_is_refused_too() -> None:
    text = "vision:\n  read_secrets: [hf-vision:token]\nspeech: {}\nvision:\n  allow_user_code: true\n"
    with pytest.raises(RequestInvalid) as refused:
        parse_teams(text, source="teams.yaml")
    assert [p.path for p in refused.value.problems] == ["teams.yaml.vision"]


def test_a_declaration_naming_each_team_once_still_reads() -> None:
    teams = parse_teams(json.dumps({"vision": VISION, "speech": SPEECH}))
    assert teams.names() == ["vision", "speech"]
    assert parse_teams("vision: {read_secrets: ['hf-vision:token']}\n").names() == ["vision"]


# ---- gap 3: read-only data is never inside the artifacts bucket -----------------------------------


@pytest.mark.parametrize(
    "prefix", ["gs://rlpipe-artifacts/runs/", "gs://rlpipe-artifacts/", "gs://rlpipe-artifacts"]
)
def test_a_deployments_read_only_prefix_inside_the_artifacts_bucket_is_refused_when_it_loads(
    prefix: str,
) -> None:
    with pytest.raises(RequestInvalid) as refused:
        _settings("", read_only_gcs_prefixes=(prefix,)).policy()
    [problem] = refused.value.problems
    assert problem.path == "RLPIPE_READ_ONLY_GCS_PREFIXES" and "rlpipe-artifacts" in problem.message
    assert "remove" in problem.fix


def test_a_teams_read_only_prefix_inside_the_artifacts_bucket_is_refused_when_the_teams_load() -> None:
    declared = json.dumps({"vision": {"read_only_gcs": ["gs://rlpipe-artifacts/cache/maxtext/"]}})
    problems = _problems(_settings(declared))
    assert any(
        p.path.startswith("RLPIPE_TEAMS.vision") and "read_only_gcs" in f"{p.path} {p.message}"
        for p in problems
    ), problems


def test_read_only_data_in_another_bucket_still_loads() -> None:
    settings = _settings(
        json.dumps({"vision": {"read_only_gcs": ["gs://vision-data/"]}}),
        read_only_gcs_prefixes=("gs://rlpipe-artifacts-shared/",),
    )
    assert settings.policy().read_only_gcs == ("gs://rlpipe-artifacts-shared/",)
    assert settings.teams().names() == ["vision"]
