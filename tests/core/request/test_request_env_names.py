"""What a deployment may add to the environment allowlist is decided by the words of a name.

Reproduction 5 of the issue: with ``RLPIPE_ALLOWED_ENV='*'`` or a plausible family (``GRPC_*``,
``TENSORSTORE_*``, ``VLLM_*``), 11 of 15 endpoint, CA-bundle and proxy names passed. The names
below are taken from each tool's documentation of the variables it reads (gRPC's
doc/environment_variables.md, TensorStore's GCS driver, huggingface_hub's constants, vLLM's
envs.py, requests, curl, OpenSSL, botocore, google-auth, the GCS emulator convention).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.settings import Settings
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import validate_request
from rlpipe.core.request.env_names import judge, parts
from rlpipe.core.request.policy import Policy, SettingsInvalid
from tests.conftest import ROOT, minimal_request

# Where a client connects and whom it trusts.
REDIRECTS = [
    "TENSORSTORE_GCS_HTTP_URL",
    "TENSORSTORE_CA_BUNDLE",
    "TENSORSTORE_CA_PATH",
    "HUGGINGFACE_CO_RESOLVE_ENDPOINT",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "grpc_proxy",
    "https_proxy",
    "no_proxy",
    "AWS_CA_BUNDLE",
    "VLLM_USAGE_STATS_SERVER",
    "VLLM_HOST_IP",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
    "GCE_METADATA_HOST",
    "STORAGE_EMULATOR_HOST",
]
FAMILIES = ("GRPC_*", "TENSORSTORE_*", "VLLM_*")


def _env(name: str) -> dict[str, Any]:
    return minimal_request(training={"command_env": {name: "x"}})


@pytest.mark.parametrize("name", REDIRECTS)
def test_no_endpoint_ca_or_proxy_name_passes_under_any_family(name: str) -> None:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(_env(name), Policy(extra_env=FAMILIES))
    (problem,) = caught.value.problems
    assert problem.path == f"training.command_env.{name}" and "no deployment setting allows it" in problem.fix


@pytest.mark.parametrize("name", REDIRECTS)
def test_a_deployment_cannot_list_one_by_name_or_with_a_star(name: str) -> None:
    for entry in (name, name.upper(), name.lower(), "*"):
        with pytest.raises(SettingsInvalid) as caught:
            Policy(extra_env=(entry,))
        assert caught.value.problems[0].path == "RLPIPE_ALLOWED_ENV"


@pytest.mark.parametrize(
    "name",
    [
        "HTTPSPROXY",  # no separator: not a word rlpipe knows
        "GRPC_XYZZY_LEVEL",  # a word nobody wrote down the meaning of
        "PYTHONUSERBASE",
        "PS4",
    ],
)
def test_a_word_rlpipe_does_not_know_is_refused_not_guessed(name: str) -> None:
    verdict = judge(name)
    assert not verdict.allowed and not verdict.refused_word and "does not know" in verdict.reason
    with pytest.raises(RequestInvalid):
        validate_request(_env(name), Policy(extra_env=("GRPC_*",)))


def test_a_name_is_split_on_underscores_dashes_and_dots_and_case_folded() -> None:
    assert parts("Grpc-Default.SSL__roots") == ["grpc", "default", "ssl", "roots"]
    assert judge("grpc.proxy") == judge("GRPC_PROXY") == judge("Grpc-Proxy")


def test_a_family_admits_its_members_made_of_known_harmless_words() -> None:
    policy = Policy(extra_env=FAMILIES)
    doc = minimal_request(
        training={"command_env": {"VLLM_LOG_STATS_INTERVAL": "10", "GRPC_TRACE": "connectivity_state"}}
    )
    assert validate_request(doc, policy).training.command_env["GRPC_TRACE"] == "connectivity_state"


def test_settings_asking_for_star_are_refused_when_the_deployment_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLPIPE_ALLOWED_ENV", "*")
    settings = Settings.from_env()
    with pytest.raises(SettingsInvalid) as caught:
        settings.policy()
    assert (
        "deployment settings refused" in caught.value.render()
        and "RLPIPE_ALLOWED_ENV" in caught.value.render()
    )


def test_rlpipe_validate_names_a_refused_setting_without_a_traceback(tmp_path: Path) -> None:
    request = tmp_path / "r.yaml"
    request.write_text(yaml.safe_dump(minimal_request()))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLPIPE_")}, "RLPIPE_ALLOWED_ENV": "*"}
    done = subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "validate", str(request)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "RLPIPE_ALLOWED_ENV" in done.stderr and "deployment settings refused" in done.stderr
