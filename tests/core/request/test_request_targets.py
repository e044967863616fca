"""What a request names outside its run: only what the deployment lists (reproduction 7 of the issue:
``publish.repo`` in any organisation, with the deployment's shared write token; any ``tpu.queue``,
``tpu.reservation`` or node pool). The defaults are what the presets name, and the organisation
examples/ publish to."""

from __future__ import annotations

from typing import Any

import pytest

from rlpipe.control.adapters.settings import Settings
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy, SettingsInvalid
from tests.conftest import minimal_request


def _refused(doc: dict[str, Any], policy: Policy | None = None) -> dict[str, Problem]:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(doc, policy)
    return {p.path: p for p in caught.value.problems}


@pytest.mark.parametrize(
    ("fields", "path", "setting"),
    [
        ({"publish": {"repo": "someone-else/model"}}, "publish.repo", "RLPIPE_ALLOWED_PUBLISH_REPOS"),
        ({"publish": {"repo": "RLPIPE-DEMO/model"}}, "publish.repo", "RLPIPE_ALLOWED_PUBLISH_REPOS"),
        ({"tpu": {"queue": "team-b-queue"}}, "tpu.queue", "RLPIPE_ALLOWED_QUEUES"),
        ({"tpu": {"reservation": "team-b-reservation"}}, "tpu.reservation", "RLPIPE_ALLOWED_RESERVATIONS"),
        ({"cpu_job": {"node_pool": "team-b-pool"}}, "cpu_job.node_pool", "RLPIPE_ALLOWED_NODE_POOLS"),
        (
            {"pathways": {"head_node_pool": "default-pool"}},
            "pathways.head_node_pool",
            "RLPIPE_ALLOWED_NODE_POOLS",
        ),
    ],
)
def test_a_target_the_deployment_does_not_list_is_refused_naming_the_setting(
    fields: dict[str, Any], path: str, setting: str
) -> None:
    assert setting in _refused(minimal_request(**fields))[path].fix


def test_the_defaults_are_what_the_presets_and_examples_name() -> None:
    validate_request(minimal_request(publish={"repo": "rlpipe-demo/any-model"}))
    assert validate_request(minimal_request(tpu={"provisioning": "flex-start"})).tpu.queue == "flex-queue"
    assert validate_request(minimal_request(preset="v6e-64")).cpu_job.node_pool == "cpu-np"


def test_a_deployment_lists_organisations_or_single_repositories() -> None:
    policy = Policy(publish_repos=("acme/", "partner/shared-model"))
    validate_request(minimal_request(publish={"repo": "acme/anything"}), policy)
    validate_request(minimal_request(publish={"repo": "partner/shared-model"}), policy)
    assert "publish.repo" in _refused(minimal_request(publish={"repo": "partner/other"}), policy)
    assert "publish.repo" in _refused(minimal_request(publish={"repo": "rlpipe-demo/x"}), policy)


def test_a_deployment_lists_its_queues_reservations_and_pools() -> None:
    policy = Policy(queues=("team-a",), reservations=("team-a-v6e",), node_pools=("team-a-cpu",))
    doc = minimal_request(
        tpu={"queue": "team-a", "reservation": "team-a-v6e"},
        cpu_job={"node_pool": "team-a-cpu"},
        pathways={"head_node_pool": "team-a-cpu"},
    )
    req = validate_request(doc, policy)
    assert (req.tpu.queue, req.tpu.reservation) == ("team-a", "team-a-v6e")
    assert set(_refused(minimal_request(), policy)) == {
        "tpu.queue",
        "cpu_job.node_pool",
        "pathways.head_node_pool",
    }


def test_the_lists_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLPIPE_ALLOWED_PUBLISH_REPOS", "acme/, partner/model")
    monkeypatch.setenv("RLPIPE_ALLOWED_QUEUES", "team-a")
    monkeypatch.setenv("RLPIPE_ALLOWED_RESERVATIONS", "")  # set but empty: none
    monkeypatch.delenv("RLPIPE_ALLOWED_NODE_POOLS", raising=False)  # unset: the presets' pool
    policy = Settings.from_env().policy()
    assert policy.publish_repos == ("acme/", "partner/model") and policy.queues == ("team-a",)
    assert policy.reservations == () and policy.node_pools == ("cpu-np",)


@pytest.mark.parametrize(
    "fields",
    [
        {"publish_repos": ("*",)},
        {"publish_repos": ("acme",)},
        {"queues": ("*",)},
        {"node_pools": ("Pool_A",)},
    ],
)
def test_an_entry_that_is_not_a_name_of_its_kind_is_refused_when_the_deployment_loads(
    fields: dict[str, Any],
) -> None:
    with pytest.raises(SettingsInvalid) as caught:
        Policy(**fields)
    assert caught.value.problems[0].path.startswith("RLPIPE_ALLOWED_")
