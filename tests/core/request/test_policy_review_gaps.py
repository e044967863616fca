"""The adversarial review's request-side gaps, each reproduced as the review found it.

1. ``notify`` reached any topic of the project: another team's requests topic (vision's status
   message was read by intake as a speech request), the deployment's requests and tick topics.
3. MaxText's write keys could point into read-only data (a team's ``read_only_gcs``).
4. Path keys took any scheme but ``gs://`` unchecked: ``gcs://``, ``simplecache::gs://``,
   ``https://storage.googleapis.com/…``, ``/gcs/…``.
7. Keys MaxText loads code or files from (``formatting_func_path``, ``chat_template_path``,
   ``quant_cfg_path``) were accepted where the deployment runs no code a request brings.

The policies are built as a deployment builds them (``Settings.policy``, ``Policy.for_team``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.control.adapters.settings import Settings
from rlpipe.core import identity
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy
from tests.conftest import minimal_request

PROJECT = "rlpipe-test"
ARTIFACTS = "rlpipe-artifacts"
TEAMS = {
    "vision": {"read_secrets": ["hf-token:token"], "read_only_gcs": ["gs://vision-data/"]},
    "speech": {"read_secrets": ["hf-token:token"], "allow_user_code": True},
}


def _settings(**fields: Any) -> Settings:
    base: dict[str, Any] = {
        "project": PROJECT,
        "requests_topic": "rlpipe-requests",
        "status_topic": "rlpipe-status",
        "artifacts_bucket": ARTIFACTS,
        "teams_json": json.dumps(TEAMS),
    }
    return Settings(**{**base, **fields})


def _team(name: str, **fields: Any) -> Policy:
    settings = _settings(**fields)
    team = settings.teams().named(name)
    assert team is not None
    return settings.policy().for_team(team)


def _refused(doc: dict[str, Any], policy: Policy) -> dict[str, Problem]:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(doc, policy)
    return {p.path: p for p in caught.value.problems}


def _own_prefix(team: str, request_id: str) -> str:
    """The run's own prefix, as docs/security.md defines it: teams/<team>/runs/<run_id>/ of the
    artifacts bucket (a prefix the team's operators alone may read), the run id derived from the
    request_id in the team's namespace."""
    run_id = identity.run_id_for(identity.key_for_request_id(request_id, team))
    return f"gs://{ARTIFACTS}/teams/{team}/runs/{run_id}/"


# ---- gap 1: notify -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    [
        "rlpipe-requests-speech",  # the review's reproduction: read by intake as a speech request
        f"projects/{PROJECT}/topics/rlpipe-requests-speech",
        "rlpipe-requests-vision",  # its own requests topic is no status topic either
        "rlpipe-requests",
        f"projects/{PROJECT}/topics/rlpipe-requests",
        "rlpipe-upstream-tick",
        f"projects/{PROJECT}/topics/rlpipe-reconcile-tick",
        f"projects/{PROJECT}/topics/some-other-topic",  # in the project, but listed nowhere
    ],
)
def test_a_teams_notify_reaches_no_requests_or_tick_topic_nor_an_unlisted_one(topic: str) -> None:
    problem = _refused(minimal_request(notify=topic), _team("vision"))["notify"]
    assert "RLPIPE_NOTIFY_TOPICS" in problem.fix


@pytest.mark.parametrize("topic", ["rlpipe-status", f"projects/{PROJECT}/topics/rlpipe-status"])
def test_the_deployments_status_topic_may_be_named(topic: str) -> None:
    validate_request(minimal_request(notify=topic), _team("vision"))
    validate_request(minimal_request(notify=topic), _settings(teams_json="").policy())


def test_a_listed_topic_is_matched_with_its_project() -> None:
    listed = "projects/partner-project/topics/team-status"
    policy = _team("vision", notify_topics=(listed,))
    validate_request(minimal_request(notify=listed), policy)
    for other in (
        "team-status",
        f"projects/{PROJECT}/topics/team-status",
        "projects/partner-projectx/topics/team-status",
    ):
        assert "notify" in _refused(minimal_request(notify=other), policy), other


def test_a_listed_bare_topic_is_a_topic_of_the_deployments_project() -> None:
    policy = _team("vision", notify_topics=("team-status",))
    validate_request(minimal_request(notify="team-status"), policy)
    validate_request(minimal_request(notify=f"projects/{PROJECT}/topics/team-status"), policy)
    assert "notify" in _refused(minimal_request(notify="projects/elsewhere/topics/team-status"), policy)


def test_a_requests_topic_stays_refused_even_when_an_operator_lists_it() -> None:
    speech_requests = f"projects/{PROJECT}/topics/rlpipe-requests-speech"
    policy = _team("vision", notify_topics=(speech_requests, "rlpipe-requests"))
    problems = _refused(minimal_request(notify=speech_requests), policy)
    assert "requests" in problems["notify"].message
    assert "notify" in _refused(minimal_request(notify="rlpipe-requests"), policy)


def test_without_teams_the_deployments_requests_and_tick_topics_are_refused_too() -> None:
    policy = _settings(teams_json="").policy()
    for topic in ("rlpipe-requests", "rlpipe-upstream-tick", "rlpipe-reconcile-tick", "rlpipe-dead-letter"):
        assert "notify" in _refused(minimal_request(notify=topic), policy), topic


# ---- gap 3: write keys only into the run's own prefix --------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["tensorboard_dir", "checkpoint_dir", "metrics_file", "save_quantized_params_path", "dump_hlo_gcs_dir"],
)
def test_a_write_key_into_the_teams_read_only_data_is_refused(key: str) -> None:
    doc = minimal_request(request_id="r1", maxtext_overrides={key: "gs://vision-data/out/"})
    problem = _refused(doc, _team("vision"))[f"maxtext_overrides.{key}"]
    assert "writes" in problem.message and _own_prefix("vision", "r1") in problem.fix


def test_a_write_key_into_the_deployments_read_only_data_is_refused() -> None:
    policy = _settings(teams_json="", read_only_gcs_prefixes=("gs://shared-data/",)).policy()
    doc = minimal_request(request_id="r1", maxtext_overrides={"tensorboard_dir": "gs://shared-data/tb/"})
    assert "maxtext_overrides.tensorboard_dir" in _refused(doc, policy)
    # reading that data stays allowed
    validate_request(
        minimal_request(request_id="r1", maxtext_overrides={"hf_data_dir": "gs://shared-data/d/"}), policy
    )


def test_a_write_key_into_the_runs_own_prefix_is_allowed() -> None:
    own = _own_prefix("vision", "r1")
    doc = minimal_request(request_id="r1", maxtext_overrides={"tensorboard_dir": own + "tb/"})
    validate_request(doc, _team("vision"))


# ---- gap 4: path keys take gs:// (or a plain relative path where the key allows it) ---------------


@pytest.mark.parametrize(
    "value",
    [
        "gcs://vision-data/tok",
        "simplecache::gs://vision-data/tok",
        "https://storage.googleapis.com/other-bucket/tok",
        "/gcs/other-bucket/tok",
        "file:///etc/passwd",
        "GS://other-bucket/tok",
        "../../gcs/other-bucket/tok",
        "~/tok",
    ],
)
def test_a_path_in_another_scheme_is_refused_naming_the_key(value: str) -> None:
    for doc, where in (
        (minimal_request(request_id="r1", training={"tokenizer_path": value}), "training.tokenizer_path"),
        (
            minimal_request(request_id="r1", maxtext_overrides={"hf_data_dir": value}),
            "maxtext_overrides.hf_data_dir",
        ),
    ):
        problem = _refused(doc, _team("vision"))[where]
        assert "gs://" in problem.fix, problem


def test_a_write_key_takes_no_local_path() -> None:
    doc = minimal_request(request_id="r1", maxtext_overrides={"tensorboard_dir": "tb/"})
    assert "maxtext_overrides.tensorboard_dir" in _refused(doc, _team("vision"))


def test_a_read_key_still_takes_a_hub_id_or_a_path_in_the_image_and_read_only_data() -> None:
    policy = _team("vision")
    validate_request(
        minimal_request(request_id="r1", training={"tokenizer_path": "google/gemma-3-1b-it"}), policy
    )
    validate_request(
        minimal_request(request_id="r1", maxtext_overrides={"hf_data_dir": "gs://vision-data/d/"}), policy
    )


# ---- gap 7: keys that load code or files are user code ------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("formatting_func_path", "mypkg.formatters.fmt"),
        ("chat_template_path", "templates/chat.json"),
        ("quant_cfg_path", "quant.json"),
    ],
)
def test_a_key_that_loads_code_or_a_file_is_refused_without_user_code(key: str, value: str) -> None:
    doc = minimal_request(request_id="r1", maxtext_overrides={key: value})
    problem = _refused(doc, _team("vision"))[f"maxtext_overrides.{key}"]
    assert "teams.vision.allow_user_code" in problem.fix
    validate_request(doc, _team("speech"))  # speech runs code its requests bring


def test_a_code_key_still_goes_through_the_gs_rules_where_code_is_allowed() -> None:
    doc = minimal_request(
        request_id="r1", maxtext_overrides={"chat_template_path": "gs://vision-data/t.json"}
    )
    assert "maxtext_overrides.chat_template_path" in _refused(doc, _team("speech"))  # not speech's data
    doc = minimal_request(request_id="r1", maxtext_overrides={"quant_cfg_path": "gcs://x/q.json"})
    assert "maxtext_overrides.quant_cfg_path" in _refused(doc, _team("speech"))
