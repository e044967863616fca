"""A request reaches only what its deployment allows: variables, images, Secrets, data and topics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.intake import Intake
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy, SettingsInvalid
from rlpipe.core.runs.record import Source
from tests.conftest import Buckets, minimal_request, real_intake

ROOT = Path(__file__).resolve().parents[3]

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
# The reproductions: each was accepted and reached the train head (HF_ENDPOINT sent the
# token to the host it names; PYTHONUSERBASE would run the model repo's usercustomize.py), plus
# MaxText's own M_<KEY> config override and the pipeline's own JAX_BACKEND_TARGET.
ESCAPES = [
    "HF_ENDPOINT",
    "HTTP_PROXY",
    "https_proxy",
    "GCE_METADATA_HOST",
    "STORAGE_EMULATOR_HOST",
    "REQUESTS_CA_BUNDLE",
    "HOME",
    "PATH",
    "PYTHONUSERBASE",
    "M_LOAD_PARAMETERS_PATH",
    "JAX_BACKEND_TARGET",
    "TPU_LIBRARY_PATH",
    "VLLM_PLUGINS",
]
ENV_FIELDS = [("training", "command_env"), ("pathways", "env", "workload"), ("pathways", "env", "worker")]


def _with_env(where: tuple[str, ...], env: dict[str, str]) -> dict[str, Any]:
    doc = minimal_request()
    node = doc
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = env
    return doc


def _refused(doc: dict[str, Any], policy: Policy | None = None) -> dict[str, Problem]:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(doc, policy)
    return {p.path: p for p in caught.value.problems}


@pytest.mark.parametrize("name", [*HOOKS, *ESCAPES])
@pytest.mark.parametrize("where", ENV_FIELDS, ids=".".join)
def test_a_variable_outside_the_allowlist_is_refused_naming_it_and_the_setting(
    name: str, where: tuple[str, ...]
) -> None:
    problem = _refused(_with_env(where, {name: "x"}))[f"{'.'.join(where)}.{name}"]
    assert name in problem.message
    assert "RLPIPE_ALLOWED_ENV" in problem.fix or "no deployment setting allows it" in problem.fix


@pytest.mark.parametrize("name", [*ESCAPES, "BASH_ENV", "LD_PRELOAD"])
def test_a_deployment_cannot_allow_a_denied_variable(name: str) -> None:
    """The name itself, or ``*``, is refused when the deployment loads; a family of its first
    word is refused then too when that word is, else the request that names it is refused."""
    for entry in (name, "*"):
        with pytest.raises(SettingsInvalid) as caught:
            Policy(extra_env=(entry,))
        (problem,) = caught.value.problems
        assert problem.path == "RLPIPE_ALLOWED_ENV" and entry in problem.message, entry
    family = name.split("_")[0] + "_*"
    try:
        policy = Policy(extra_env=(family,))
    except SettingsInvalid as exc:
        assert family in exc.problems[0].message
        return
    problem = _refused(_with_env(("training", "command_env"), {name: "x"}), policy)[
        f"training.command_env.{name}"
    ]
    assert "no deployment setting allows it" in problem.fix, problem


def test_a_deployment_adds_names_and_families_of_known_words() -> None:
    doc = _with_env(("training", "command_env"), {"TF_CPP_VMODULE": "a=1", "JAX_LOG_COMPILES": "1"})
    assert set(_refused(doc)) == {
        "training.command_env.TF_CPP_VMODULE",
        "training.command_env.JAX_LOG_COMPILES",
    }
    request = validate_request(doc, Policy(extra_env=("TF_CPP_VMODULE", "JAX_LOG_*")))
    assert request.training.command_env["TF_CPP_VMODULE"] == "a=1"


@pytest.mark.parametrize("value", ["$(curl evil)", "`id`", "${HOME:?x}", "a$(b)c"])
def test_command_substitution_in_an_env_value_is_refused(value: str) -> None:
    doc = _with_env(("training", "command_env"), {"TF_CPP_VMODULE": value})
    assert "training.command_env.TF_CPP_VMODULE" in _refused(doc, Policy(extra_env=("TF_CPP_VMODULE",)))


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("JAX_PLATFORMS", "proxy,cpu", True),
        ("JAX_PLATFORMS", "tpu", False),
        ("ENABLE_PATHWAYS_PERSISTENCE", "1", True),
        ("ENABLE_PATHWAYS_PERSISTENCE", "yes", False),
        (
            "LIBTPU_INIT_ARGS",
            "--xla_tpu_enable_async_collective_fusion=true --xla_enable_async_all_gather=true",
            True,
        ),
        ("LIBTPU_INIT_ARGS", "--xla_dump_to=/tmp/hlo", False),  # writes HLO to a path
        ("LIBTPU_INIT_ARGS", "--flagfile=/x", False),
        ("XLA_FLAGS", "--xla_tpu_x=gs://b/p", False),  # a URL in a value
        ("TPU_STDERR_LOG_LEVEL", "0", True),
        ("TPU_STDERR_LOG_LEVEL", "9", False),
    ],
)
def test_an_allowed_variable_takes_only_the_values_its_tool_accepts(name: str, value: str, ok: bool) -> None:
    doc = _with_env(("training", "command_env"), {name: value})
    if ok:
        assert validate_request(doc).training.command_env[name] == value
    else:
        assert f"training.command_env.{name}" in _refused(doc)


def test_names_differing_only_in_case_are_refused() -> None:
    doc = _with_env(("training", "command_env"), {"JAX_PLATFORMS": "cpu", "jax_platforms": "proxy"})
    assert "training.command_env.jax_platforms" in _refused(doc)


def test_every_preset_and_example_passes_the_default_allowlists() -> None:
    from rlpipe.core import presets

    for preset in presets.PRESET_NAMES:
        validate_request(minimal_request(preset=preset))
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if "rewards" in doc:  # code a request brings: the one thing the defaults refuse
            assert set(_refused(doc)) == {"rewards"}, path
            validate_request(doc, Policy(allow_user_code=True))
        else:
            validate_request(doc)


# ---- Secrets, data and topics -------------------------------------------------------------------


def test_a_request_may_name_only_the_deployments_secrets() -> None:
    """The kubelet resolves a secretKeyRef without RBAC: any Secret of the namespace, another
    team's write token included, would otherwise reach a pod whose network the request shapes."""
    doc = minimal_request(hf_token_secret={"name": "team-b-write", "key": "token"})
    problem = _refused(doc)["hf_token_secret"]
    assert "RLPIPE_READ_TOKEN_SECRETS" in problem.fix and "hf-token:token" in problem.fix
    publish = {"repo": "rlpipe-demo/model", "token_secret": {"name": "team-b-write", "key": "token"}}
    assert "publish.token_secret" in _refused(minimal_request(publish=publish))
    ours = Policy(read_secrets=("team-b-read:token",), write_secrets=("team-b-write:token",))
    validate_request(
        minimal_request(hf_token_secret={"name": "team-b-read", "key": "token"}, publish=publish), ours
    )


ARTIFACTS = "gs://rlpipe-artifacts"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("load_full_state_path", f"{ARTIFACTS}/runs/r-of-another-run/checkpoints/actor/30"),
        ("jax_cache_dir", f"{ARTIFACTS}/cache/maxtext/"),
        ("dump_hlo_gcs_dir", "gs://someone-elses-bucket/hlo"),
        ("load_full_state_path", f"{ARTIFACTS}/runs/RUN/../r-other/x"),  # a traversal
    ],
)
def test_a_gcs_value_outside_the_runs_own_prefix_is_refused(key: str, value: str) -> None:
    from rlpipe.core import identity

    run = identity.run_id_for(identity.key_for_request_id("mine-1"))
    doc = minimal_request(request_id="mine-1", maxtext_overrides={key: value.replace("RUN", run)})
    problem = _refused(doc)[f"maxtext_overrides.{key}"]
    assert "RLPIPE_READ_ONLY_GCS_PREFIXES" in problem.fix


def test_a_gcs_value_under_the_runs_own_prefix_or_shared_read_only_data_is_kept() -> None:
    from rlpipe.core import identity

    run = identity.run_id_for(identity.key_for_request_id("mine-1"))
    own = f"{ARTIFACTS}/runs/{run}/extra/"
    doc = minimal_request(request_id="mine-1", maxtext_overrides={"load_full_state_path": own})
    validate_request(doc)
    shared = minimal_request(maxtext_overrides={"hf_data_dir": "gs://team-data/gsm8k/"})
    assert "maxtext_overrides.hf_data_dir" in _refused(shared)
    validate_request(shared, Policy(read_only_gcs=("gs://team-data/",)))


@pytest.mark.parametrize(
    ("key", "fate"),
    [
        # What MaxText 0.2.4 does with each (pyconfig.py:239-271; the nested models drop extras):
        ("x.base_output_directory", "stops at start"),
        ("a.b.load_parameters_path", "stops at start"),
        ("Load_Parameters_Path", "stops at start"),
        ("rl.run_name", "drops it silently"),
    ],
)
def test_protected_keys_are_refused_under_dotted_spellings(key: str, fate: str) -> None:
    problem = _refused(minimal_request(maxtext_overrides={key: "v"}))[f"maxtext_overrides.{key}"]
    assert "set by the pipeline" in problem.message and fate in problem.message


def test_notify_reaches_only_the_status_topic_or_listed_topics() -> None:
    other = "projects/someone-else/topics/leak"
    ours = Policy(project="rlpipe-test", status_topic="status")
    assert "notify" in _refused(minimal_request(notify=other), ours)
    # a topic of the project is no longer enough: it could be one the deployment reads (gap 1)
    assert "notify" in _refused(minimal_request(notify="projects/rlpipe-test/topics/mine"), ours)
    validate_request(minimal_request(notify="projects/rlpipe-test/topics/status"), ours)
    validate_request(minimal_request(notify="status"), ours)
    validate_request(minimal_request(notify=other), Policy(project="rlpipe-test", notify_topics=(other,)))


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


@pytest.mark.parametrize(
    ("variable", "setting"),
    [
        ("allowed_env", "allowed_env"),
        ("read_token_secrets", "read_token_secrets"),
        ("write_token_secrets", "write_token_secrets"),
        ("read_only_gcs_prefixes", "read_only_gcs_prefixes"),
        ("notify_topics", "notify_topics"),
    ],
)
def test_each_allowlist_has_a_terraform_variable_whose_default_is_the_settings_default(
    variable: str, setting: str
) -> None:
    text = (ROOT / "infra" / "terraform" / "variables.tf").read_text()
    block = re.search(rf'variable "{variable}" \{{(.*?)\n\}}', text, re.DOTALL)
    assert block, f"no terraform variable {variable}"
    default = re.search(r"default\s+= (\[.*?\])", block.group(1))
    assert default and tuple(yaml.safe_load(default.group(1))) == getattr(Settings(), setting)
    env_name = "RLPIPE_" + setting.upper()
    functions = (ROOT / "infra" / "terraform" / "functions.tf").read_text()
    assert re.search(rf"{env_name}\s+= join\(\",\", var\.{variable}\)", functions), env_name


def test_rlpipe_validate_applies_the_deployments_allowlists_and_says_which(tmp_path: Path) -> None:
    """It once accepted docker.io/library/busybox, which intake then refused."""
    import os
    import subprocess
    import sys

    def rlpipe(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "rlpipe.cli.main", *args]
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, check=False)

    request = tmp_path / "r.yaml"
    request.write_text(yaml.safe_dump(minimal_request(image="docker.io/library/busybox:1.36")))
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("RLPIPE_")}
    refused = rlpipe("validate", str(request), env=env_free)
    assert refused.returncode == 1
    assert "RLPIPE_ALLOWED_IMAGE_PREFIXES" in refused.stderr and "the built-in defaults" in refused.stderr
    ours = rlpipe(
        "validate",
        str(request),
        env={
            **env_free,
            "RLPIPE_ALLOWED_IMAGE_PREFIXES": "docker.io/library/,us-docker.pkg.dev/cloud-tpu-v2-images/",
        },
    )
    assert ours.returncode == 0, ours.stderr
    assert "this deployment's settings (RLPIPE_ALLOWED_IMAGE_PREFIXES)" in ours.stdout
