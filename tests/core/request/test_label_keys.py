"""A request's label keys come from an allowlist: unprefixed keys, and prefixes the deployment lists.

Gap 9 of the adversarial review: a request's labels are copied onto every pod and workload
(``core/manifests/common.py``), and only five prefixes were reserved, so a request could opt its
pods into or out of controls that select pods by label. The keys below are the labels those
controllers document: the coscheduling plugin's pod group (kubernetes-sigs/scheduler-plugins,
``scheduling.x-k8s.io/pod-group``), Istio's sidecar injection and revision
(``sidecar.istio.io/inject``, ``istio.io/rev``), Kueue's queue and JobSet's names (reserved before
too), the recommended ``app.kubernetes.io/*`` labels Services and NetworkPolicies select on, and
GKE's node labels (``cloud.google.com/...``).
"""

from __future__ import annotations

from typing import Any

import pytest

from rlpipe.core.identity import Stage
from rlpipe.core.manifests.common import labels as rendered_labels
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import checks, validate_request
from tests.conftest import minimal_request

CONTROLS = [
    "scheduling.x-k8s.io/pod-group",
    "pod-group.scheduling.sigs.k8s.io",
    "sidecar.istio.io/inject",
    "istio.io/rev",
    "app.kubernetes.io/name",
    "kueue.x-k8s.io/queue-name",
    "jobset.sigs.k8s.io/jobset-name",
    "cloud.google.com/gke-spot",
    "team.example.com/owner",  # a prefix nobody listed: refused until the deployment lists it
]


def _refused(doc: dict[str, Any]) -> dict[str, Problem]:
    try:
        validate_request(doc)
    except RequestInvalid as exc:
        return {p.path: p for p in exc.problems}
    return {}


@pytest.mark.parametrize("key", CONTROLS)
def test_a_prefixed_label_key_is_refused_unless_its_prefix_is_listed(key: str) -> None:
    problems = _refused(minimal_request(labels={key: "true"}))
    assert f"labels.{key}" in problems, problems
    problem = problems[f"labels.{key}"]
    assert "prefix" in problem.message and "without a prefix" in problem.fix


def test_the_fix_for_an_unlisted_prefix_names_the_setting() -> None:
    (problem,) = checks.label_key_problems({"team.example.com/owner": "a"})
    assert problem.path == "labels.team.example.com/owner"
    assert checks.LABEL_PREFIX_SETTING in problem.fix and "owner" in problem.fix


def test_unprefixed_keys_pass_and_reach_the_pods() -> None:
    request = validate_request(minimal_request(labels={"team": "post-training", "experiment": "e1"}))
    stage: Stage = "train"
    pod = rendered_labels(request, "rexample0001", stage, 1, "default")
    assert pod["team"] == "post-training" and pod["experiment"] == "e1"


def test_a_listed_prefix_admits_its_own_keys_only() -> None:
    found = checks.label_key_problems(
        {"team.example.com/owner": "a", "sub.team.example.com/x": "b", "example.com/y": "c"},
        ("team.example.com",),
    )
    assert {p.path for p in found} == {"labels.sub.team.example.com/x", "labels.example.com/y"}


def test_a_prefix_the_system_owns_stays_reserved_even_if_listed() -> None:
    (problem,) = checks.label_key_problems({"kubernetes.io/x": "y"}, ("kubernetes.io",))
    assert "reserved" in problem.message


@pytest.mark.parametrize(
    "prefix",
    [
        "kubernetes.io",
        "node.k8s.io",
        "rlpipe.dev",
        "kueue.x-k8s.io",
        "jobset.sigs.k8s.io",
        "Team.Example.com",
        "a/b",
        "",
    ],
)
def test_a_deployment_cannot_list_a_reserved_or_malformed_prefix(prefix: str) -> None:
    (problem,) = checks.label_prefix_setting_problems((prefix,))
    assert problem.path == checks.LABEL_PREFIX_SETTING


def test_a_deployment_may_list_its_own_prefix() -> None:
    assert checks.label_prefix_setting_problems(("team.example.com", "ml.corp.example")) == []


def test_kubernetes_label_syntax_still_applies() -> None:
    problems = _refused(minimal_request(labels={"team": "x" * 64, "a" * 64: "ok", "-bad": "v"}))
    assert {"labels.team", "labels." + "a" * 64, "labels.-bad"} <= set(problems)


def test_a_slash_with_no_prefix_is_refused_as_kubernetes_refuses_it() -> None:
    assert "labels./team" in _refused(minimal_request(labels={"/team": "a"}))


def test_the_deployments_label_prefixes_let_a_request_use_them_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RLPIPE_ALLOWED_LABEL_PREFIXES reaches the policy intake checks requests with: a listed
    prefix is allowed, another is refused naming the setting; a reserved one cannot be listed."""
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.core.problems import RequestInvalid
    from rlpipe.core.request import validate_request
    from rlpipe.core.request.policy import SettingsInvalid
    from tests.conftest import minimal_request

    monkeypatch.setenv("RLPIPE_ALLOWED_LABEL_PREFIXES", "ml.example.com")
    policy = Settings.from_env().policy()
    ok = validate_request(minimal_request(labels={"ml.example.com/owner": "ana"}), policy)
    assert ok.labels == {"ml.example.com/owner": "ana"}
    with pytest.raises(RequestInvalid) as refused:
        validate_request(minimal_request(labels={"sidecar.istio.io/inject": "false"}), policy)
    (problem,) = refused.value.problems
    assert problem.path == "labels.sidecar.istio.io/inject" and "RLPIPE_ALLOWED_LABEL_PREFIXES" in str(
        problem
    )
    monkeypatch.setenv("RLPIPE_ALLOWED_LABEL_PREFIXES", "x-k8s.io")
    with pytest.raises((SettingsInvalid, RequestInvalid)):
        Settings.from_env().policy()
