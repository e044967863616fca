"""The teams declaration (core.teams) and a team's allowlists (Policy.for_team): a declaration that
cannot be right refuses to load, naming the field; a team's lists replace the deployment's, never
add to another team's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy
from rlpipe.core.teams import DEFAULT_TEAM, Teams, parse_teams
from tests.conftest import minimal_request

TWO = {
    "vision": {"operators": ["user:ana@example.com"], "read_secrets": ["hf-vision:token"]},
    "speech": {"operators": ["serviceAccount:ops@p.iam.gserviceaccount.com"], "topic": "speech-in"},
}


def test_no_declaration_is_the_one_default_team() -> None:
    teams = parse_teams("")
    assert not teams.declared and teams == Teams()
    assert DEFAULT_TEAM == "default"


def test_a_declaration_reads_as_terraform_renders_it_and_as_a_local_file_wraps_it() -> None:
    flat, wrapped = parse_teams(json.dumps(TWO)), parse_teams({"teams": TWO})
    assert flat == wrapped and flat.names() == ["vision", "speech"]
    vision, speech = flat.named("vision"), flat.named("speech")
    assert vision is not None and speech is not None
    assert (vision.topic_id, vision.k8s_namespace, vision.folder) == (
        "rlpipe-requests-vision",
        "rlpipe-vision",
        "vision",
    )
    assert speech.topic_id == "speech-in"
    assert flat.for_topic("projects/p/topics/speech-in", project="p") is speech
    assert flat.for_topic("speech-in") is speech
    assert flat.for_topic("projects/p/topics/rlpipe-requests", project="p") is None
    assert (
        flat.for_folder("vision") is vision and flat.for_folder("") is None and flat.for_folder("x") is None
    )


def test_an_operator_is_matched_by_the_verified_email_only() -> None:
    vision = parse_teams(TWO).named("vision")
    assert vision is not None
    assert vision.may_operate("ana@example.com")
    assert not vision.may_operate("ana@example.com.evil") and not vision.may_operate(None)
    assert not vision.may_operate("user:ana@example.com")  # the e-mail, not the IAM member string


@pytest.mark.parametrize(
    ("declaration", "path", "fragment"),
    [
        ({"Vision": {}}, "RLPIPE_TEAMS.Vision", "is not a team name"),
        (
            {"vision": {"operators": ["group:ml@example.com"]}},
            "RLPIPE_TEAMS.vision.operators.0",
            "a group cannot be checked",
        ),
        ({"vision": {"read_secret": ["a:b"]}}, "RLPIPE_TEAMS.vision.read_secret", "is not a team setting"),
        (
            {"vision": {"quota": {"chips": 8, "lending_limit": 16}}},
            "RLPIPE_TEAMS.vision.quota.lending_limit",
            "lend at most",
        ),
        (
            {"vision": {"limits": {"active_runs": 0}}},
            "RLPIPE_TEAMS.vision.limits.active_runs",
            "greater than or equal to 1",
        ),
        ({"a": {"topic": "t"}, "b": {"topic": "t"}}, "RLPIPE_TEAMS", "two teams share a topic: t"),
        ({"default": {}}, "RLPIPE_TEAMS.default.name", "give the team another name"),
        ({"vision": {"namespace": "kube-system"}}, "RLPIPE_TEAMS.vision.namespace", "kube-system"),
    ],
    ids=[
        "name",
        "group-operator",
        "unknown-setting",
        "lends-more-than-it-has",
        "no-runs",
        "shared-topic",
        "the-default-teams-name",
        "a-namespace-outside-rlpipe",
    ],
)
def test_a_declaration_that_cannot_be_right_is_refused_naming_the_field(
    declaration: dict[str, Any], path: str, fragment: str
) -> None:
    with pytest.raises(RequestInvalid) as refused:
        parse_teams(json.dumps(declaration))
    texts = [(p.path, f"{p.message} {p.fix}") for p in refused.value.problems]
    assert any(where == path and fragment in text for where, text in texts), texts


def test_a_teams_lists_replace_the_deployments_and_keep_its_registries() -> None:
    deployment = Policy(read_secrets=("hf-token:token",), extra_env=("TF_CPP_VMODULE",))
    vision = parse_teams(TWO).named("vision")
    assert vision is not None
    policy = deployment.for_team(vision)
    assert policy.read_secrets == ("hf-vision:token",) and policy.publish_repos == ()
    assert policy.image_prefixes == deployment.image_prefixes and policy.extra_env == ("TF_CPP_VMODULE",)
    assert policy.namespace == "vision"
    validate_request(minimal_request(hf_token_secret={"name": "hf-vision", "key": "token"}), policy)
    with pytest.raises(RequestInvalid) as refused:
        validate_request(minimal_request(), policy)  # the deployment's Secret is not vision's
    [problem] = refused.value.problems
    assert problem.path == "hf_token_secret" and "teams.vision.read_secrets" in problem.fix


def test_a_runs_namespace_is_its_teams_and_the_deployments_for_any_other() -> None:
    teams = parse_teams({"vision": {}, "speech": {"namespace": "rlpipe-speech-runs"}})
    assert teams.namespace_of("vision", "rlpipe") == "rlpipe-vision"
    assert teams.namespace_of("speech", "rlpipe") == "rlpipe-speech-runs"
    assert teams.namespace_of("default", "rlpipe") == "rlpipe" and Teams().namespace_of("vision", "x") == "x"


def test_operators_match_without_case() -> None:
    vision = parse_teams(TWO).named("vision")
    assert vision is not None and vision.may_operate("Ana@Example.com")


def test_a_teams_conversions_are_its_own_and_the_deployments_keys_are_unchanged() -> None:
    from rlpipe.core import layout

    args = ("google/gemma", "a" * 40, ["--x"], "img")
    unscoped = layout.conversion_cache_key(*args)
    assert unscoped == layout.conversion_cache_key(*args, scope="")
    vision, speech = (
        layout.conversion_cache_key(*args, scope="vision"),
        layout.conversion_cache_key(*args, scope="speech"),
    )
    assert len({unscoped, vision, speech}) == 3


def test_a_redelivery_is_the_same_delivery_whatever_team_the_deployment_made_of_it() -> None:
    from rlpipe.core.runs.record import Source

    before = Source(kind="gcs", bucket="b", name="requests/vision/a.json", generation="1")
    assert before.same_delivery(before.model_copy(update={"team": "vision"}))
    assert not before.same_delivery(before.model_copy(update={"generation": "2"}))
