"""Offline checks of infra/: Terraform (fmt, tfparse, checkov), the cluster add-ons, the scripts.

Nothing here talks to Google Cloud or a cluster. The tools that are not project dependencies run
from their own virtualenvs and are found through environment variables, else under .tools/:

    RLPIPE_TFPARSE_PYTHON   a Python with `tfparse` installed      (.tools/bin/python)
    RLPIPE_CHECKOV          the `checkov` executable                (.tools/bin/checkov)

`terraform` and `kubectl` (for `kubectl kustomize`) are used when they are on PATH. A test that
needs a missing tool is skipped and says which one and how to get it.

Why the tables below exist: the entry points, environment variables and RBAC verbs are read from
the code (main.py's decorators, Settings.from_env and every os.environ read, rlpipe.cluster's
RBAC_RULES), so a new entry point, variable or API call fails here until infra/ provides it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.core import layout

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "terraform"
K8S_DIR = ROOT / "infra" / "cluster" / "k8s"
SCHEMAS = ROOT / "tests" / "schemas"
MAIN_PY = ROOT / "functions" / "main.py"
LIBRARY = ROOT / "shared" / "rlpipe"
PIPELINE = ROOT / "workflows" / "pipeline.yaml"
K8S_VERSION = "1.32"  # the floor rlpipe.local.kube_api.validation validates against too

TEST_TFVARS = """\
project_id           = "test-project"
region               = "us-east5"
gke_cluster_name     = "tpu-cluster"
gke_cluster_location = "us-east5"
"""
TEST_PROJECT = "test-project"

# ------------------------------------------------------------------------------ what infra must provide

# Entry point -> (trigger, source). source: the bucket role for "storage", the topic for "pubsub".
EXPECTED_TRIGGERS: dict[str, tuple[str, str | None]] = {
    "intake_object": ("storage", "requests"),
    "intake_message": ("pubsub", "requests"),
    "artifact_event": ("storage", "artifacts"),
    "stage": ("http", None),
    "upstream_poll": ("pubsub", "upstream-tick"),
    "upstream_webhook": ("http", None),
    "reconcile": ("pubsub", "reconcile-tick"),
}
# Entry points infra deploys before they land in functions/main.py (with their decorator kind).
UPCOMING = {"upstream_poll": "cloud_event", "upstream_webhook": "http", "reconcile": "cloud_event"}
PUBLIC_FUNCTIONS = {"upstream_webhook"}

# Variables the code reads that must NOT be set on a deployed function: they point the code at the
# local stack's emulators (anonymous credentials) or only steer the CLI.
LOCAL_ONLY_ENV = {
    "RLPIPE_KUBE_URL",
    "RLPIPE_KUBECONFIG",  # the local stack's real control plane (a client certificate)
    "RLPIPE_WORKFLOWS_ENDPOINT",
    "RLPIPE_LOGGING_ENDPOINT",  # the local stack's Cloud Logging stand-in (no credentials)
    "RLPIPE_LOCAL",
    "RLPIPE_ID_TOKEN_CERTS_URL",  # the local stack publishes its own signing key; production: Google's
    "RLPIPE_INTAKE_MESSAGE_URL",
    "RLPIPE_TARGET",
    "RLPIPE_IMPERSONATE_SERVICE_ACCOUNT",  # the CLI's ID token for stage (cli_env sets it)
    "RLPIPE_DEBUG",  # the CLI's: an unexpected error prints its traceback (cli/errors.py)
    "RLPIPE_PAGES_DIR",  # the CLI's: where report and compare write a page without -o (cli/output_files.py)
}
# Programs that run in a workload's container, whose environment its manifest sets (the publish
# Job's RLPIPE_MODEL_CARD: tests/golden/*-publish/publish.yaml), never a function's.
WORKLOAD_PROGRAMS = {Path("publisher/program.py")}
# Set on the workflow (user_env_vars), not on the functions: only the workflow calls stage.
WORKFLOW_ONLY_ENV = {"RLPIPE_STAGE_URL"}
# Secret values come from Secret Manager, only to the functions that need them.
SECRET_ENV = {
    # hub.resolve_revision (stage's plan) and the upstream poll, which the webhook runs too
    "RLPIPE_HF_TOKEN": {"stage", "upstream_poll", "upstream_webhook"},
    "RLPIPE_WEBHOOK_SECRET": {"upstream_webhook"},
}

# checkov findings accepted on purpose; each is an inline `#checkov:skip=<id>:<reason>` at its
# resource (the reason lives there). A new skip must be added here, with a reason, to pass.
ACCEPTED_CHECKOV = {
    "CKV_GCP_62": "bucket access logs: Cloud Audit Logs cover access; usage logs need another bucket",
    "CKV_GCP_78": "no versioning on artifacts (huge checkpoints, lifecycle deletes) or content-named sources",
    "CKV_GCP_83": "Google-managed encryption for Pub/Sub topics (no secrets in messages)",
    "CKV_GCP_124": "external ingress only for the public webhook and the IAM-only stage function",
}
BASIC_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}


# ------------------------------------------------------------------------------ reading the code


def _decorated_entry_points() -> dict[str, str]:
    """name -> "cloud_event" | "http" for every @functions_framework.<kind> function in main.py."""
    found: dict[str, str] = {}
    for node in ast.parse(MAIN_PY.read_text()).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "functions_framework"
            ):
                found[node.name] = target.attr
    return found


def expected_entry_points() -> dict[str, str]:
    found = _decorated_entry_points()
    return {**UPCOMING, **found}


def _module_string_constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out[node.targets[0].id] = node.value.value
    return out


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def code_env_names() -> dict[str, set[str]]:
    """Every RLPIPE_* variable the deployed code reads -> the files that read it.

    Sources: Settings.from_env's `_env("NAME")` calls (prefixed with ENV_PREFIX) and any
    os.environ.get / os.getenv / os.environ[...] whose key is a literal or a module constant.
    The local stack (rlpipe/local/) is not deployed and is left out.
    """
    files = [
        MAIN_PY,
        *sorted(
            p
            for p in LIBRARY.rglob("*.py")
            if "local" not in p.relative_to(LIBRARY).parts and p.relative_to(LIBRARY) not in WORKLOAD_PROGRAMS
        ),
    ]
    names: dict[str, set[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text())
        consts = _module_string_constants(tree)
        prefix = consts.get("ENV_PREFIX", "")

        def key_of(arg: ast.AST, consts: dict[str, str] = consts) -> str | None:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return arg.value
            if isinstance(arg, ast.Name):
                return consts.get(arg.id)
            return None

        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if isinstance(func, ast.Name) and func.id == "_env" and prefix:
                    inner = key_of(node.args[0])
                    key = prefix + inner if inner else None
                elif isinstance(func, ast.Attribute) and (
                    (func.attr == "get" and _is_environ(func.value)) or func.attr == "getenv"
                ):
                    key = key_of(node.args[0])
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                key = key_of(node.slice)
            if key and key.startswith("RLPIPE_"):
                names.setdefault(key, set()).add(str(path.relative_to(ROOT)))
    return names


def required_function_env() -> set[str]:
    """What every function must have as a plain environment variable."""
    return set(code_env_names()) - LOCAL_ONLY_ENV - WORKFLOW_ONLY_ENV - set(SECRET_ENV)


# ------------------------------------------------------------------------------ tools


def _tool(env_var: str, candidates: list[Path]) -> str | None:
    value = os.environ.get(env_var)
    if value:
        return value if (Path(value).exists() or shutil.which(value)) else None
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    return None


def tfparse_python() -> str | None:
    return _tool(
        "RLPIPE_TFPARSE_PYTHON",
        [ROOT / ".tools/bin/python", ROOT / ".tools/tfparse/bin/python", ROOT / ".tools/venv/bin/python"],
    )


def checkov_bin() -> str | None:
    return _tool(
        "RLPIPE_CHECKOV",
        [ROOT / ".tools/bin/checkov", ROOT / ".tools/checkov/bin/checkov", ROOT / ".tools/venv/bin/checkov"],
    )


TOOLS_HINT = (
    "create the tools venv: python3 -m venv .tools && .tools/bin/pip install tfparse checkov "
    "(or point {var} at an existing one)"
)

_TFPARSE = r"""
import json, sys
import tfparse
print(json.dumps(tfparse.load_from_path(sys.argv[1], vars_paths=[sys.argv[2]]), default=str))
"""


@pytest.fixture(scope="module")
def tf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """infra/terraform as tfparse evaluates it, with test values for the required variables."""
    python = tfparse_python()
    if python is None:
        pytest.skip("tfparse not found: " + TOOLS_HINT.format(var="RLPIPE_TFPARSE_PYTHON"))
    tfvars = tmp_path_factory.mktemp("tfvars") / "test.tfvars"
    tfvars.write_text(TEST_TFVARS)
    # tfparse resolves var files relative to the module directory.
    rel = os.path.relpath(tfvars, TF_DIR)
    proc = subprocess.run(
        [python, "-c", _TFPARSE, str(TF_DIR), rel], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        if "No module named 'tfparse'" in proc.stderr:
            pytest.skip(f"{python} has no tfparse: " + TOOLS_HINT.format(var="RLPIPE_TFPARSE_PYTHON"))
        pytest.fail(f"tfparse failed on infra/terraform:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def resources(tf: dict[str, Any], rtype: str) -> list[dict[str, Any]]:
    return list(tf.get(rtype) or [])


def by_path(tf: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {r["__tfmeta"]["path"]: r for r in resources(tf, rtype)}


def ids_to_paths(tf: dict[str, Any]) -> dict[str, str]:
    """tfparse replaces references to unknown attributes with the referenced block's id."""
    out = {}
    for key, blocks in tf.items():
        if isinstance(blocks, list):
            for block in blocks:
                if isinstance(block, dict) and "id" in block and "__tfmeta" in block:
                    out[block["id"]] = block["__tfmeta"].get("path", key)
    return out


def local_value(tf: dict[str, Any], name: str) -> Any:
    for block in tf.get("locals") or []:
        if name in block:
            return block[name]
    raise KeyError(f"local.{name} not found")


def resolve(tf: dict[str, Any], value: Any) -> Any:
    """A tfparse reference to a local (`{"__attribute__": "local.x"}`) -> the local's value."""
    if isinstance(value, dict) and str(value.get("__attribute__", "")).startswith("local."):
        return local_value(tf, value["__attribute__"].split(".", 1)[1])
    return value


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def functions_by_entry_point(tf: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for fn in resources(tf, "google_cloudfunctions2_function"):
        entry = (fn.get("build_config") or {}).get("entry_point")
        assert isinstance(entry, str), (
            f"{fn['__tfmeta']['path']}: entry_point {entry!r} is not a plain value tfparse can read"
        )
        out.setdefault(entry, []).append(fn)
    return out


def function_key(fn: dict[str, Any]) -> str:
    m = re.search(r'\["([^"]+)"\]$', fn["__tfmeta"]["path"])
    assert m, f"expected a for_each instance, got {fn['__tfmeta']['path']}"
    return m.group(1)


def function_table(fn: dict[str, Any]) -> dict[str, Any]:
    """The row of local.functions this instance was made from (for_each value)."""
    return fn["for_each"][function_key(fn)]


# ------------------------------------------------------------------------------ terraform: format


def test_terraform_fmt() -> None:
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("terraform is not on PATH (terraform fmt -check needs only the binary, no provider)")
    proc = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-diff", str(TF_DIR)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, (
        f"run `terraform fmt -recursive infra/terraform`:\n{proc.stdout}{proc.stderr}"
    )


# ------------------------------------------------------------------------------ terraform: functions


def test_code_reads_known_entry_points() -> None:
    found = _decorated_entry_points()
    assert {"intake_object", "intake_message", "artifact_event", "stage"} <= set(found)
    unknown = set(found) - set(EXPECTED_TRIGGERS)
    assert not unknown, (
        f"new entry points {sorted(unknown)}: deploy them in infra/terraform/functions.tf "
        "and add them to EXPECTED_TRIGGERS here"
    )
    for name, kind in found.items():
        want = "http" if EXPECTED_TRIGGERS[name][0] == "http" else "cloud_event"
        assert kind == want, f"{name} is @functions_framework.{kind} but infra gives it a {want} trigger"


def test_every_entry_point_has_exactly_one_function(tf: dict[str, Any]) -> None:
    fns = functions_by_entry_point(tf)
    expected = expected_entry_points()
    assert set(fns) == set(expected), (
        f"functions without an entry point: {sorted(set(fns) - set(expected))}; "
        f"entry points without a function: {sorted(set(expected) - set(fns))}"
    )
    for entry, found in fns.items():
        assert len(found) == 1, f"{entry} is deployed {len(found)} times"


def test_function_triggers(tf: dict[str, Any]) -> None:
    ids = ids_to_paths(tf)
    buckets = {path.split(".")[1]: b["name"] for path, b in by_path(tf, "google_storage_bucket").items()}
    topics = {b["id"]: b["name"] for b in resources(tf, "google_pubsub_topic")}
    eventarc_sa = by_path(tf, "google_service_account")["google_service_account.eventarc"]["id"]
    for entry, (fn,) in functions_by_entry_point(tf).items():
        kind, source = EXPECTED_TRIGGERS[entry]
        trigger = fn.get("event_trigger")
        where = fn["__tfmeta"]["path"]
        assert re.fullmatch(r"python3(1[1-9]|[2-9]\d)", str(fn["build_config"].get("runtime"))), where
        if kind == "http":
            assert not trigger, f"{where}: an HTTP function must have no event trigger"
            continue
        assert isinstance(trigger, dict), f"{where}: {entry} needs an event trigger"
        assert trigger.get("retry_policy") == "RETRY_POLICY_RETRY", f"{where}: events must be retried"
        assert trigger.get("trigger_region") == "us-east5", f"{where}: trigger must be in the buckets' region"
        assert eventarc_sa in json.dumps(trigger["__tfmeta"].get("references", [])), (
            f"{where}: the trigger must deliver as the Eventarc service account"
        )
        if kind == "storage":
            assert trigger["event_type"] == "google.cloud.storage.object.v1.finalized", where
            filters = {f["attribute"]: f["value"] for f in as_list(trigger.get("event_filters"))}
            assert filters == {"bucket": buckets[source]}, (
                f"{where}: expected bucket {buckets[source]}, got {filters}"
            )
            assert not trigger.get("pubsub_topic"), where
        else:
            assert trigger["event_type"] == "google.cloud.pubsub.topic.v1.messagePublished", where
            topic = topics.get(trigger.get("pubsub_topic"), ids.get(trigger.get("pubsub_topic")))
            assert topic == f"rlpipe-{source}", f"{where}: expected topic rlpipe-{source}, got {topic}"


def test_each_function_has_its_own_service_account(tf: dict[str, Any]) -> None:
    seen: dict[str, str] = {}
    for fn in resources(tf, "google_cloudfunctions2_function"):
        refs = [
            r["name"]
            for r in fn["service_config"]["__tfmeta"].get("references", [])
            if r.get("label") == "google_service_account"
        ]
        assert refs == [f'fn["{function_key(fn)}"]'], f"{fn['__tfmeta']['path']}: service account refs {refs}"
        assert refs[0] not in seen, (
            f"{fn['__tfmeta']['path']} shares its service account with {seen.get(refs[0])}"
        )
        seen[refs[0]] = fn["__tfmeta"]["path"]


def test_ingress(tf: dict[str, Any]) -> None:
    for entry, (fn,) in functions_by_entry_point(tf).items():
        ingress = fn["service_config"].get("ingress_settings")
        if entry in PUBLIC_FUNCTIONS:
            assert ingress == "ALLOW_ALL", entry
        elif entry == "stage":
            assert ingress in {"ALLOW_ALL", "ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB"}, ingress
        else:
            assert ingress == "ALLOW_INTERNAL_ONLY", f"{entry} is only reached by Eventarc: ingress {ingress}"


def test_function_environment(tf: dict[str, Any]) -> None:
    code_names = code_env_names()
    assert {
        "RLPIPE_PROJECT",
        "RLPIPE_ARTIFACTS_BUCKET",
        "RLPIPE_STATE_BUCKET",
        "RLPIPE_HF_TOKEN",
        "RLPIPE_GKE_ENDPOINT",
    } <= set(code_names), "the scan of the code's environment reads found too little"
    required = required_function_env()
    for entry, (fn,) in functions_by_entry_point(tf).items():
        env = resolve(tf, fn["service_config"].get("environment_variables"))
        assert isinstance(env, dict), f"{entry}: environment_variables is not readable: {env!r}"
        missing = required - set(env)
        assert not missing, (
            f"{entry} lacks {sorted(missing)} (read by {[sorted(code_names[m]) for m in missing]})"
        )
        assert not (LOCAL_ONLY_ENV & set(env)), (
            f"{entry} sets local-stack variables {LOCAL_ONLY_ENV & set(env)}"
        )
        assert not (set(SECRET_ENV) & set(env)), (
            f"{entry}: secrets must come from Secret Manager, not plain env"
        )
        # tfparse does not expand a dynamic block nested in service_config, so the secret
        # references are read from the function's row of local.functions (for_each value).
        secrets = set(function_table(fn)["secrets"])
        wanted = {name for name, users in SECRET_ENV.items() if entry in users}
        assert secrets == wanted, f"{entry}: secret env {sorted(secrets)}, expected {sorted(wanted)}"
        assert env.get("RLPIPE_PROJECT") == TEST_PROJECT
        assert (
            env.get("RLPIPE_STATE_BUCKET")
            == f"{TEST_PROJECT}-rlpipe-state"
            != env.get("RLPIPE_ARTIFACTS_BUCKET")
        )
        assert env.get("RLPIPE_NAMESPACE") == "rlpipe"
        assert env.get("RLPIPE_WORKLOAD_SERVICE_ACCOUNT") == "rlpipe-workload"


@pytest.mark.parametrize(
    ("variable", "env_name", "default"),
    [
        ("allowed_publish_repos", "RLPIPE_ALLOWED_PUBLISH_REPOS", "DEFAULT_PUBLISH_REPOS"),
        ("allowed_queues", "RLPIPE_ALLOWED_QUEUES", "DEFAULT_QUEUES"),
        ("allowed_reservations", "RLPIPE_ALLOWED_RESERVATIONS", "DEFAULT_RESERVATIONS"),
        ("allowed_node_pools", "RLPIPE_ALLOWED_NODE_POOLS", "DEFAULT_NODE_POOLS"),
    ],
)
def test_each_target_allowlist_reaches_every_function_with_the_checks_defaults(
    tf: dict[str, Any], variable: str, env_name: str, default: str
) -> None:
    """The publish, queue, reservation and node pool allowlists (core/request/targets.py): a
    Terraform variable whose default is what the request check defaults to, joined into each
    function's environment (and so into cli_env, which is built from the same table)."""
    from rlpipe.core.request import targets

    text = (TF_DIR / "variables.tf").read_text()
    block = re.search(rf'variable "{variable}" \{{(.*?)\n\}}', text, re.DOTALL)
    assert block, f"no terraform variable {variable}"
    declared = re.search(r"default\s+= (\[.*?\])", block.group(1))
    assert declared and tuple(yaml.safe_load(declared.group(1))) == getattr(targets, default)
    functions = (TF_DIR / "functions.tf").read_text()
    assert re.search(rf"{env_name}\s+= join\(\",\", var\.{variable}\)", functions), env_name
    for entry, (fn,) in functions_by_entry_point(tf).items():
        env = resolve(tf, fn["service_config"].get("environment_variables"))
        assert env_name in env, f"{entry} lacks {env_name}"


def test_function_resource_wires_the_table() -> None:
    """What tfparse cannot expand, read from the source: the env and secret blocks use the table."""
    text = (TF_DIR / "functions.tf").read_text()
    body = text[text.index('resource "google_cloudfunctions2_function" "fn"') :]
    body = body[: body.index("\n}\n")]
    assert re.search(r"environment_variables\s*=\s*local\.function_env\b", body)
    block = body[body.index('dynamic "secret_environment_variables"') :]
    assert re.search(r"for_each\s*=\s*\[for env, secret in each\.value\.secrets", block)
    assert re.search(r"key\s*=\s*secret_environment_variables\.value\.env", block)
    assert re.search(r"version\s*=\s*var\.secret_version", block)
    assert "secret_data" not in "".join(p.read_text() for p in TF_DIR.glob("*.tf")), (
        "no secret values in Terraform"
    )


def test_secrets_hold_no_values(tf: dict[str, Any]) -> None:
    assert not resources(tf, "google_secret_manager_secret_version"), (
        "secret versions (values) are added with gcloud, never by Terraform (they would be in the state)"
    )
    ids = {s["secret_id"] for s in resources(tf, "google_secret_manager_secret")}
    assert ids == {"rlpipe-hf-token", "rlpipe-webhook-secret"}


# ------------------------------------------------------------------------------ terraform: workflow


def test_workflow(tf: dict[str, Any]) -> None:
    (wf,) = resources(tf, "google_workflows_workflow")
    assert wf["source_contents"] == PIPELINE.read_text(), (
        "the workflow must deploy workflows/pipeline.yaml as is"
    )
    text = (TF_DIR / "workflow.tf").read_text()
    m = re.search(r'source_contents\s*=\s*file\("(?:\$\{path\.module\}/)?([^"]+)"\)', text)
    assert m and m.group(1) == "../../workflows/pipeline.yaml", m and m.group(1)
    assert (TF_DIR / m.group(1)).resolve() == PIPELINE
    assert wf["call_log_level"] == "LOG_ERRORS_ONLY"
    assert wf["name"] == "rlpipe-pipeline" and wf["region"] == "us-east5"
    wanted = set(re.findall(r'sys\.get_env\("(RLPIPE_[A-Z0-9_]+)"\)', PIPELINE.read_text()))
    assert wanted == WORKFLOW_ONLY_ENV | {"RLPIPE_STAGE_AUDIENCE"}
    assert wanted <= set(wf["user_env_vars"]), f"user_env_vars lacks {wanted - set(wf['user_env_vars'])}"
    assert ids_to_paths(tf)[wf["service_account"]] == "google_service_account.workflow"
    assert re.search(r'RLPIPE_STAGE_URL\s*=\s*google_cloudfunctions2_function\.fn\["stage"\]', text)


def test_the_workflows_tokens_name_the_audience_the_stage_function_verifies() -> None:
    """The stage function verifies a token's audience (control/adapters/callers.py) against
    RLPIPE_STAGE_AUDIENCE; the workflow's OIDC auth names that audience explicitly, from the same
    value, which is the stage service's deterministic run.app URL (the service's own uri cannot be
    handed to the function: a cycle). tfparse leaves the project number unresolved: read the source."""
    functions = (TF_DIR / "functions.tf").read_text()
    workflow = (TF_DIR / "workflow.tf").read_text()
    assert re.search(r"RLPIPE_STAGE_AUDIENCE\s*=\s*local\.stage_audience", functions)
    assert re.search(r"RLPIPE_STAGE_AUDIENCE\s*=\s*local\.stage_audience", workflow)
    assert re.search(
        r'stage_audience\s*=\s*"https://\$\{var\.name_prefix\}-stage-\$\{data\.google_project\.this\.number\}'
        r'\.\$\{var\.region\}\.run\.app"',
        functions,
    ), "the deterministic URL of the service named like the function (name_prefix-stage)"
    posts = _http_posts(yaml.safe_load(PIPELINE.read_text()))
    assert posts and all(
        p["args"]["auth"] == {"type": "OIDC", "audience": '${sys.get_env("RLPIPE_STAGE_AUDIENCE")}'}
        for p in posts
    )


def _http_posts(node: Any) -> list[dict[str, Any]]:
    """Every ``call: http.post`` in a workflow document, however deeply nested."""
    if isinstance(node, dict):
        own = [node] if node.get("call") == "http.post" else []
        return own + [p for value in node.values() for p in _http_posts(value)]
    if isinstance(node, list):
        return [p for value in node for p in _http_posts(value)]
    return []


def test_the_stage_function_names_the_account_the_workflow_runs_as_its_workflow_identity() -> None:
    """RLPIPE_WORKFLOW_IDENTITY (control/adapters/identities.py) is the only caller the stage function takes
    the workflow's operations from: the service account the workflow runs as (asserted above:
    google_service_account.workflow). tfparse leaves an account's e-mail unresolved: read the source."""
    text = (TF_DIR / "functions.tf").read_text()
    assert re.search(r"\bRLPIPE_WORKFLOW_IDENTITY\s*=\s*google_service_account\.workflow\.email\b", text)


def test_workflow_identity_may_only_invoke_stage(tf: dict[str, Any]) -> None:
    member = f"serviceAccount:rlpipe-workflow@{TEST_PROJECT}.iam.gserviceaccount.com"
    grants = [
        (rtype, r.get("role"), r.get("name") or r.get("bucket") or r.get("topic") or r.get("project"))
        for rtype, r in iam_grants(tf)
        if member in members_of(tf, r)
    ]
    assert sorted(grants) == [
        ("google_cloud_run_v2_service_iam_member", "roles/run.invoker", "rlpipe-stage"),
        ("google_project_iam_member", "roles/logging.logWriter", TEST_PROJECT),
    ], grants


# ------------------------------------------------------------------------------ terraform: IAM


def iam_grants(tf: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for rtype, blocks in tf.items():
        if re.search(r"_iam_(member|binding|policy)$", rtype):
            for block in blocks:
                yield rtype, block


def members_of(tf: dict[str, Any], grant: dict[str, Any]) -> list[str]:
    members = [resolve(tf, m) for m in as_list(grant.get("member")) + as_list(grant.get("members"))]
    for member in members:
        assert isinstance(member, str), f"{grant['__tfmeta']['path']}: member {member!r} is not readable"
    return members


def test_iam_is_readable_and_additive(tf: dict[str, Any]) -> None:
    grants = list(iam_grants(tf))
    assert len(grants) > 30, "IAM grants were not expanded by tfparse (a for_each table that is not static?)"
    for rtype, grant in grants:
        assert rtype.endswith("_iam_member"), (
            f"{rtype}: use additive *_iam_member grants, not authoritative ones"
        )
        assert isinstance(grant.get("role"), str), grant["__tfmeta"]["path"]


def test_no_public_access_except_the_webhook(tf: dict[str, Any]) -> None:
    public = {"allUsers", "allAuthenticatedUsers"}
    for rtype, grant in iam_grants(tf):
        if public & set(members_of(tf, grant)):
            assert rtype == "google_cloud_run_v2_service_iam_member", grant["__tfmeta"]["path"]
            assert grant["role"] == "roles/run.invoker"
            assert grant["name"] == "rlpipe-upstream-webhook", f"{grant['__tfmeta']['path']} is public"
    for bucket in resources(tf, "google_storage_bucket"):
        assert bucket["uniform_bucket_level_access"] is True, bucket["name"]
        assert bucket["public_access_prevention"] == "enforced", bucket["name"]


def test_no_service_account_is_owner_editor_or_admin_of_the_project(tf: dict[str, Any]) -> None:
    project_grants = [g for rtype, g in iam_grants(tf) if rtype.startswith("google_project_iam")]
    assert project_grants
    for grant in project_grants:
        role = grant["role"]
        for member in members_of(tf, grant):
            if member.startswith("serviceAccount:"):
                assert role not in BASIC_ROLES and "admin" not in role.lower(), (
                    f"{grant['__tfmeta']['path']}: {member} gets {role} on the project"
                )


def _condition(grant: dict[str, Any]) -> str:
    return str((grant.get("condition") or {}).get("expression", ""))


def _prefixes_allowed(expression: str, bucket: str) -> set[str]:
    """The object prefixes a condition allows (resource.name), each also allowed as a listing prefix."""
    objects = set(
        re.findall(
            rf'resource\.name\.startsWith\("projects/_/buckets/{re.escape(bucket)}/objects/([^"]*)"\)',
            expression,
        )
    )
    listings = set(re.findall(r'objectListPrefix", ""\)\.startsWith\("([^"]*)"\)', expression))
    assert objects == listings, (expression, objects, listings)
    assert len(re.findall(r"/objects/", expression)) == len(objects), expression  # no other bucket
    return objects


def _bucket_grants(tf: dict[str, Any], resource: str) -> dict[str, dict[str, Any]]:
    """google_storage_bucket_iam_member.<resource>["key"] → grant, by key."""
    head = f"google_storage_bucket_iam_member.{resource}["
    return {
        p[len(head) :].strip('[]"'): g
        for p, g in by_path(tf, "google_storage_bucket_iam_member").items()
        if p.startswith(head)
    }


def test_least_privilege_on_the_buckets(tf: dict[str, Any]) -> None:
    state_bucket = by_path(tf, "google_storage_bucket")["google_storage_bucket.state"]["name"]
    artifacts_bucket = by_path(tf, "google_storage_bucket")["google_storage_bucket.artifacts"]["name"]
    # The control plane's records (core.layout), each only to the functions that need it.
    expected_state = {
        "intake-object": ("roles/storage.objectUser", {"runs/"}),
        "intake-message": ("roles/storage.objectUser", {"runs/"}),
        "artifact-event": ("roles/storage.objectViewer", {"runs/"}),
        "stage": ("roles/storage.objectUser", {"runs/", "cache/maxtext/", "teams/"}),  # READY.json, usage
        "reconcile": ("roles/storage.objectUser", {"runs/", "reconcile/"}),
        "upstream-poll": ("roles/storage.objectUser", {"runs/", "upstream/"}),
        "upstream-webhook": ("roles/storage.objectUser", {"runs/", "upstream/"}),
    }
    state = _bucket_grants(tf, "state")
    assert set(state) == set(expected_state)
    for key, (role, prefixes) in expected_state.items():
        assert state[key]["role"] == role, key
        assert _prefixes_allowed(_condition(state[key]), state_bucket) == prefixes, key
    assert {p for _, allowed in expected_state.values() for p in allowed} == set(layout.STATE_PREFIXES)
    # What workloads write is read by the functions that decide completeness, written by nobody else.
    artifacts = _bucket_grants(tf, "artifacts")
    assert set(artifacts) == {
        "stage",
        "reconcile",
        "workload",
        "workload/bucket",
        "intake-object",
        "intake-message",
    }
    assert artifacts["stage"]["role"] == artifacts["reconcile"]["role"] == "roles/storage.objectViewer"
    # intake writes a request's own files into the run's inputs/ and nowhere else: the condition,
    # read as the regular expression it is, takes a copy's name and refuses every other object.
    for run in (
        layout.RunLayout(artifacts_bucket, "rabc123"),
        layout.RunLayout(artifacts_bucket, "rabc123", "ml-ops"),
    ):
        for key in ("intake-object", "intake-message"):
            expression = _condition(artifacts[key])
            [pattern] = re.findall(r'resource\.name\.matches\("(.+)"\)$', expression)
            assert re.match(
                pattern, f"projects/_/buckets/{artifacts_bucket}/objects/{run.user_file('rewards', '.py')}"
            ), run
            for other in (
                run.ledger,
                run.step_commit(10),
                run.data_file("train", 0),
                "cache/maxtext/k/READY.json",
            ):
                assert not re.match(pattern, f"projects/_/buckets/{artifacts_bucket}/objects/{other}"), other
    # A team's runs and conversions are under teams/<team>/ (layout.team_prefix).
    assert _prefixes_allowed(_condition(artifacts["stage"]), artifacts_bucket) == {
        "runs/",
        "cache/maxtext/",
        "teams/",
    }
    assert _prefixes_allowed(_condition(artifacts["reconcile"]), artifacts_bucket) == {"runs/", "teams/"}

    requests = _bucket_grants(tf, "requests")
    assert set(requests) == {"intake-object", "upstream-poll", "upstream-webhook"}
    for key, grant in requests.items():
        assert grant["role"] == "roles/storage.objectViewer", key
        assert (
            "/objects/requests/" in grant["condition"]["expression"]
            or "/objects/config/" in grant["condition"]["expression"]
        ), key


def test_workloads_cannot_touch_the_control_planes_state(tf: dict[str, Any]) -> None:
    """The workload identity has no grant on the state bucket (nor on the project's storage), and on
    the artifacts bucket may write only where workloads write: runs/, cache/maxtext/, pathways/."""
    workload = f"serviceAccount:rlpipe-workload@{TEST_PROJECT}.iam.gserviceaccount.com"
    buckets = {b["__tfmeta"]["path"]: b["name"] for b in resources(tf, "google_storage_bucket")}
    state_bucket, artifacts_bucket = (
        buckets["google_storage_bucket.state"],
        buckets["google_storage_bucket.artifacts"],
    )
    mine = [(rtype, g) for rtype, g in iam_grants(tf) if workload in members_of(tf, g)]
    assert mine, "the workload identity's grants were not found"
    for rtype, grant in mine:
        path = grant["__tfmeta"]["path"]
        assert rtype != "google_project_iam_member" or "storage" not in grant["role"], path
        if rtype != "google_storage_bucket_iam_member":
            continue
        assert grant["bucket"] != state_bucket, f"{path}: the workload identity may touch the state bucket"
        assert grant["bucket"] == artifacts_bucket, path
        if grant["role"] == "roles/storage.bucketViewer":  # bucket metadata, no object
            continue
        expression = _condition(grant)
        assert expression, f"{path}: {grant['role']} on the whole artifacts bucket"
        assert _prefixes_allowed(expression, artifacts_bucket) == set(layout.WORKLOAD_PREFIXES), path
    objects = [
        g
        for rtype, g in mine
        if rtype == "google_storage_bucket_iam_member" and g["role"] != "roles/storage.bucketViewer"
    ]
    assert [g["role"] for g in objects] == ["roles/storage.objectUser"]
    expression = _condition(objects[0])
    for prefix in ("runs/", "cache/maxtext/"):
        assert (
            f'resource.name.startsWith("projects/_/buckets/{artifacts_bucket}/objects/{prefix}")'
            in expression
        )
    # No identity with a grant on the state bucket is one a workload runs as.
    for grant in _bucket_grants(tf, "state").values():
        assert workload not in members_of(tf, grant)


# ------------------------------------------------------------------------------ terraform: the rest


def test_buckets(tf: dict[str, Any]) -> None:
    buckets = by_path(tf, "google_storage_bucket")
    requests = buckets["google_storage_bucket.requests"]
    assert (requests.get("versioning") or {}).get("enabled") is True
    assert buckets["google_storage_bucket.artifacts"]["location"] == "US-EAST5"
    state = buckets["google_storage_bucket.state"]
    assert state["name"] == f"{TEST_PROJECT}-rlpipe-state" and state["location"] == "US-EAST5"
    assert (state.get("versioning") or {}).get("enabled") is True, (
        "the control plane's records keep old versions"
    )
    variables = {v["__tfmeta"]["label"]: v for v in tf["variable"]}
    rules = variables["artifact_lifecycle_rules"]["default"]
    assert {"cache/maxtext/"} <= {p for r in rules for p in r["prefixes"]}
    attempts_age = min(
        x["age_days"] for x in rules if x["prefixes"] == ["cache/maxtext/"] and not x.get("suffixes")
    )
    ready_rules = [
        r["condition"]
        for r in as_list(state.get("lifecycle_rule"))
        if r["condition"].get("matches_suffix") == ["/READY.json"]
        and r["condition"].get("matches_prefix") == ["cache/maxtext/"]
        and (r.get("action") or {}).get("type") == "Delete"
    ]
    assert [r["age"] for r in ready_rules] == [variables["conversion_ready_days"]["default"]]
    assert ready_rules[0]["age"] < attempts_age, (
        "cache markers must expire before the attempt directories they name"
    )
    for name in ("state_bucket", "artifacts_bucket"):  # what an operator needs after apply
        assert any(o["__tfmeta"]["label"] == name for o in tf["output"]), name


def test_topics_scheduler_and_dead_letters(tf: dict[str, Any]) -> None:
    topics = {t["id"]: t["name"] for t in resources(tf, "google_pubsub_topic")}
    assert set(topics.values()) == {
        "rlpipe-requests",
        "rlpipe-status",
        "rlpipe-upstream-tick",
        "rlpipe-reconcile-tick",
        "rlpipe-dead-letter",
    }
    jobs = {j["name"]: j for j in resources(tf, "google_cloud_scheduler_job")}
    assert jobs["rlpipe-upstream-tick"]["schedule"] == "*/10 * * * *"
    assert topics[jobs["rlpipe-upstream-tick"]["pubsub_target"]["topic_name"]] == "rlpipe-upstream-tick"
    assert jobs["rlpipe-reconcile-tick"]["schedule"] == "*/5 * * * *"
    assert topics[jobs["rlpipe-reconcile-tick"]["pubsub_target"]["topic_name"]] == "rlpipe-reconcile-tick"
    (sub,) = resources(tf, "google_pubsub_subscription")
    assert topics[sub["topic"]] == "rlpipe-dead-letter"
    event_keys = {
        function_key(f) for f in resources(tf, "google_cloudfunctions2_function") if f.get("event_trigger")
    }
    dlq = {
        re.search(r'\["([^"]+)"\]', d["__tfmeta"]["path"]).group(1): d
        for d in resources(tf, "terraform_data")
    }
    assert set(dlq) == event_keys, "every Eventarc trigger gets the dead-letter topic and a bounded retry"
    for d in dlq.values():
        env = d["provisioner"]["environment"]
        assert 5 <= int(env["MAX_DELIVERY_ATTEMPTS"]) <= 100
        assert topics[env["DEAD_LETTER_TOPIC"]] == "rlpipe-dead-letter"
        assert env["MIN_RETRY_DELAY"] and env["MAX_RETRY_DELAY"]
    script = TF_DIR / "scripts" / "eventarc-dead-letter.sh"
    assert os.access(script, os.X_OK)
    granted = {(g["role"], g.get("topic")) for g in resources(tf, "google_pubsub_topic_iam_member")}
    assert ("roles/pubsub.publisher", "rlpipe-dead-letter") in granted


def test_source_archive_path_matches_bundle_script(tf: dict[str, Any]) -> None:
    source_zip = local_value(tf, "source_zip")
    assert (TF_DIR / source_zip).resolve() == ROOT / "build" / "functions-source.zip"
    assert "build/functions-source.zip" in (ROOT / "infra" / "bundle.sh").read_text()


# ------------------------------------------------------------------------------ checkov


def test_checkov(tmp_path: Path) -> None:
    checkov = checkov_bin()
    if checkov is None:
        pytest.skip("checkov not found: " + TOOLS_HINT.format(var="RLPIPE_CHECKOV"))
    proc = subprocess.run(
        [checkov, "--config-file", str(TF_DIR / ".checkov.yaml"), "-d", str(TF_DIR), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
        cwd=tmp_path,
    )
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"checkov gave no JSON report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    reports = report if isinstance(report, list) else [report]
    failed, skipped = [], []
    for rep in reports:
        assert rep["summary"]["parsing_errors"] == 0, rep["summary"]
        failed += rep["results"].get("failed_checks", [])
        skipped += rep["results"].get("skipped_checks", [])
    assert not failed, (
        "checkov findings (fix them, or accept one with an inline #checkov:skip=<id>:<reason> "
        "and add it to ACCEPTED_CHECKOV):\n"
        + "\n".join(f"{c['check_id']} {c['resource']} {c['file_path']}: {c['check_name']}" for c in failed)
    )
    for check in skipped:
        assert check["check_id"] in ACCEPTED_CHECKOV, (
            f"{check['check_id']} skipped on {check['resource']} but not listed in ACCEPTED_CHECKOV"
        )
        assert len(check["check_result"].get("suppress_comment", "").strip()) > 20, (
            f"{check['check_id']} on {check['resource']}: the skip needs a reason"
        )


# ------------------------------------------------------------------------------ Kubernetes add-ons


def _raw_manifests() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    objs = []
    for name in kustomization["resources"]:
        objs += [d for d in yaml.safe_load_all((K8S_DIR / name).read_text()) if d]
    return objs


def _params() -> dict[str, str]:
    out = {}
    for line in (K8S_DIR / "params.env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]] | None:
    """`kubectl kustomize` of a copy of infra/cluster/k8s with params.env.example as params.env."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    work = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S_DIR, work, ignore=shutil.ignore_patterns("params.env"))
    shutil.copy(K8S_DIR / "params.env.example", work / "params.env")
    proc = subprocess.run(
        [kubectl, "kustomize", str(work)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _substitute(value: Any, params: dict[str, str]) -> Any:
    """What kustomization.yaml's replacements do, for machines without kubectl."""
    if isinstance(value, dict):
        return {k: _substitute(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, params) for v in value]
    if isinstance(value, str):
        for key, replacement in params.items():
            value = value.replace(key, replacement)
    return value


@pytest.fixture(scope="module")
def manifests(rendered: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if rendered is not None:
        return rendered
    return [_substitute(obj, _params()) for obj in _raw_manifests()]


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def test_kustomize_substitutes_every_placeholder(rendered: list[dict[str, Any]] | None) -> None:
    if rendered is None:
        pytest.skip("kubectl is not on PATH (kubectl kustomize renders infra/cluster/k8s)")
    params = _params()
    text = yaml.safe_dump_all(rendered)
    for key, value in params.items():
        assert key not in text, f"placeholder {key} left in the rendered manifests"
        assert value in text or key in {"TPU_CHIPS", "CPU_NP_CPU"}, f"{key}={value} never used"
    assert not find(rendered, "ConfigMap"), "the parameters ConfigMap is local-config and must not be applied"
    raw = _raw_manifests()
    assert len(rendered) == len(raw)


def test_params_keys_match_terraform_output() -> None:
    outputs = (TF_DIR / "outputs.tf").read_text()
    block = outputs[outputs.index('output "k8s_params_env"') :]
    block = block[: block.index("\n}\n")]
    tf_keys = re.findall(r'"([A-Z_]+)=\$\{', block)
    assert tf_keys == list(_params()), "params.env.example and the k8s_params_env output list the same keys"
    kustomization = (K8S_DIR / "kustomization.yaml").read_text()
    assert set(re.findall(r"fieldPath: data\.([A-Z_]+)", kustomization)) == set(tf_keys)


def _schema_for(obj: dict[str, Any]) -> Path:
    group, _, version = obj["apiVersion"].rpartition("/")
    return SCHEMAS / f"{group}_{version}_{obj['kind'].lower()}.json"


def test_manifests_validate_strictly(manifests: list[dict[str, Any]]) -> None:
    import jsonschema
    import kubernetes_validate

    kinds = set()
    for obj in manifests:
        kinds.add(obj["kind"])
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        schema_path = _schema_for(obj)
        if schema_path.exists():  # a custom resource: our schema from its API reference
            schema = json.loads(schema_path.read_text())
            errors = sorted(
                jsonschema.Draft202012Validator(schema).iter_errors(obj), key=lambda e: list(e.path)
            )
            assert not errors, f"{where}: " + "; ".join(
                f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors
            )
            continue
        try:  # a built-in kind: Kubernetes' own schema, unknown fields rejected
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(
                f"{where}: {obj['apiVersion']} is neither built in nor described in tests/schemas "
                f"(expected {schema_path.name})"
            )
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc}")
    assert {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "SecretProviderClass",
        "SecretSync",
    } <= kinds


def test_schemas_reject_unknown_fields() -> None:
    import jsonschema

    schema = json.loads((SCHEMAS / "kueue.x-k8s.io_v1beta2_clusterqueue.json").read_text())
    cq = find(_raw_manifests(), "ClusterQueue")[0]
    bad = json.loads(json.dumps(cq))
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuotaa"] = 1
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(bad))
    bad = json.loads(json.dumps(cq))
    bad["spec"]["cohort"] = "x"  # v1beta1's name for cohortName
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(bad))
    for path in SCHEMAS.glob("*.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_rbac_role_equals_cluster_role_rules(manifests: list[dict[str, Any]]) -> None:
    from rlpipe.cluster import RBAC_RULES, role_rules

    (role,) = find(manifests, "Role", "rlpipe-pipeline")

    def norm(rules: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
        return sorted(
            (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in rules
        )

    assert norm(role["rules"]) == norm(role_rules())
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    missing = {(r.api_group, r.resource, r.verb) for r in RBAC_RULES} - granted
    assert not missing, f"rlpipe.cluster calls the API with {sorted(missing)}, which the Role does not allow"
    assert role["metadata"]["namespace"] == "rlpipe"
    (binding,) = find(manifests, "RoleBinding", "rlpipe-pipeline")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "rlpipe-pipeline",
    }
    assert [s["kind"] for s in binding["subjects"]] == ["User", "User"]


def test_identities_match_settings(manifests: list[dict[str, Any]]) -> None:
    from rlpipe.control.adapters.settings import Settings

    settings = Settings()
    (ns,) = find(manifests, "Namespace")
    assert ns["metadata"]["name"] == settings.namespace
    (sa,) = find(manifests, "ServiceAccount", settings.workload_service_account)
    assert sa["metadata"]["namespace"] == settings.namespace
    assert "iam.gke.io/gcp-service-account" in sa["metadata"]["annotations"]
    variables = (TF_DIR / "variables.tf").read_text()
    for var, value in (
        ("k8s_namespace", settings.namespace),
        ("k8s_workload_service_account", settings.workload_service_account),
        ("k8s_secret_sync_service_account", "rlpipe-secret-sync"),
    ):
        assert re.search(rf'variable "{var}" {{[^}}]*default\s*=\s*"{re.escape(value)}"', variables), var
    for obj in manifests:
        if obj["kind"] not in {"Namespace", "ResourceFlavor", "ClusterQueue"}:
            assert obj["metadata"].get("namespace") == settings.namespace, (
                f"{obj['kind']}/{obj['metadata']['name']}"
            )


def test_hf_token_secret_matches_presets(manifests: list[dict[str, Any]]) -> None:
    from rlpipe.core.presets import PRESET_NAMES, preset_defaults

    (sync,) = find(manifests, "SecretSync")
    (spc,) = find(manifests, "SecretProviderClass")
    for name in PRESET_NAMES:
        ref = preset_defaults(name)["hf_token_secret"]
        assert sync["metadata"]["name"] == ref["name"], "the SecretSync's name is the Secret's name"
        assert [d["targetKey"] for d in sync["spec"]["secretObject"]["data"]] == [ref["key"]]
    assert sync["spec"]["secretProviderClassName"] == spc["metadata"]["name"]
    assert spc["spec"]["provider"] == "gke"
    entries = yaml.safe_load(spc["spec"]["parameters"]["secrets"])
    assert [e["path"] for e in entries] == [d["sourcePath"] for d in sync["spec"]["secretObject"]["data"]]
    assert find(manifests, "ServiceAccount", sync["spec"]["serviceAccountName"])
    assert "hf_" not in yaml.safe_dump_all(manifests), "no token in manifests"


# Kueue: the objects fit together, and every workload rlpipe renders can be admitted.

_SUFFIX = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity(value: Any) -> Fraction:
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    assert m and m.group(2) in _SUFFIX, f"unsupported quantity {value!r}"
    return Fraction(m.group(1)) * _SUFFIX[m.group(2)]


def _pod_templates(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if obj["kind"] == "Job":
        yield obj["spec"]["template"]["spec"]
    elif obj["kind"] == "JobSet":
        for rjob in obj["spec"]["replicatedJobs"]:
            yield rjob["template"]["spec"]["template"]["spec"]


def _pod_requests(pod: dict[str, Any]) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    sidecars = [c for c in pod.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    for container in [*pod["containers"], *sidecars]:
        resources = container.get("resources", {})
        asked = {**resources.get("limits", {}), **resources.get("requests", {})}
        for name, value in asked.items():
            total[name] = total.get(name, Fraction(0)) + quantity(value)
    return total


def test_kueue_objects_fit_together(manifests: list[dict[str, Any]]) -> None:
    from rlpipe.core import tpu
    from rlpipe.core.presets import PRESET_NAMES, preset_defaults

    flavors = {f["metadata"]["name"]: f for f in find(manifests, "ResourceFlavor")}
    (cq,) = find(manifests, "ClusterQueue")
    (lq,) = find(manifests, "LocalQueue")
    for obj in (*flavors.values(), cq, lq):
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2", (
            "v1beta2 is Kueue's storage version (v1beta1 deprecated)"
        )
    for group in cq["spec"]["resourceGroups"]:  # the CRD's CEL rule, and flavors that exist
        for flavor in group["flavors"]:
            assert flavor["name"] in flavors, flavor["name"]
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    assert lq["spec"]["clusterQueue"] == cq["metadata"]["name"]
    assert cq["spec"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": lq["metadata"]["namespace"]
    }
    for name in PRESET_NAMES:
        preset = preset_defaults(name)
        assert preset["tpu"]["queue"] == lq["metadata"]["name"]
        assert preset["cpu_job"]["node_pool"] == preset["pathways"]["head_node_pool"] == "cpu-np"
    labels = [f["spec"]["nodeLabels"] for f in flavors.values()]
    assert {"cloud.google.com/gke-tpu-accelerator": tpu.GKE_ACCELERATOR} in labels
    assert {"cloud.google.com/gke-nodepool": "cpu-np"} in labels


def test_every_rendered_workload_is_admissible(manifests: list[dict[str, Any]]) -> None:
    """For each pod of each golden workload: every resource it requests is covered by a flavor
    whose nodeLabels the pod's nodeSelector asks for, and one pod fits that flavor's quota."""
    flavors = {f["metadata"]["name"]: f["spec"]["nodeLabels"] for f in find(manifests, "ResourceFlavor")}
    (cq,) = find(manifests, "ClusterQueue")
    params = _params()
    placeholders = {
        "TPU_CHIPS": params["TPU_CHIPS"],
        "CPU_NP_CPU": params["CPU_NP_CPU"],
        "CPU_NP_MEMORY": params["CPU_NP_MEMORY"],
        "CPU_NP_EPHEMERAL_STORAGE": params["CPU_NP_EPHEMERAL_STORAGE"],
    }
    goldens = sorted((ROOT / "tests" / "golden").glob("*/*.yaml"))
    assert goldens
    for path in goldens:
        for obj in yaml.safe_load_all(path.read_text()):
            if not obj:
                continue
            assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
            for pod in _pod_templates(obj):
                asked = _pod_requests(pod)
                selector = pod.get("nodeSelector", {})
                for resource, amount in asked.items():
                    groups = [g for g in cq["spec"]["resourceGroups"] if resource in g["coveredResources"]]
                    assert groups, f"{path.name}: {resource} is not covered by the ClusterQueue"
                    fits = []
                    for flavor in groups[0]["flavors"]:
                        node_labels = flavors[flavor["name"]]
                        # Kueue would also take a flavor whose labels the pod leaves open, then add
                        # them to the pod; rlpipe's pods name their pool, so demand an exact match.
                        if all(selector.get(k) == v for k, v in node_labels.items()):
                            quota = next(
                                r["nominalQuota"] for r in flavor["resources"] if r["name"] == resource
                            )
                            fits.append(quantity(placeholders.get(str(quota), quota)))
                    assert fits, f"{path.name}: no flavor for {resource} matches nodeSelector {selector}"
                    assert amount <= max(fits), f"{path.name}: one pod asks {resource}={amount}, quota {fits}"


# ------------------------------------------------------------------------------ scripts


_BLUEPRINT = """\
blueprint_name: gke-tpu-v6e

vars:
  project_id:
  deployment_name: gke-tpu-v6e
  zone:
  # Enable Pathways for TPUs (provisions CPU node pool and configures Kueue quotas)
  enable_pathways_for_tpus: true
  accelerator_type: tpu-v6e-slice

deployment_groups:
- group: primary
  modules:
  - id: node_pool_service_account
    source: modules/project/service-account
    settings:
      name: gke-np-sa
      project_roles:
      - logging.logWriter
      - storage.objectViewer
      - artifactregistry.reader

  - id: workload_service_account
    source: modules/project/service-account
    settings:
      project_roles:
      - storage.admin

  - id: gke-tpu-v6e-cluster
    source: modules/scheduler/gke-cluster
    use: [gke-tpu-v6e-net-0, workload_service_account]
    settings:
      system_node_pool_machine_type: "n2-standard-8"
      system_node_pool_taints: []

  - id: gke-tpu-v6e-pool
    source: modules/compute/gke-node-pool
    use: [gke-tpu-v6e-cluster, node_pool_service_account]
    settings:
      machine_type: $(vars.machine_type)
    outputs: [instructions]

  # # - id: commented-out-module
  # #   source: modules/file-system/filestore

  - id: workload-manager-install
    source: modules/management/kubectl-apply
    use: [gke-tpu-v6e-cluster]
"""


def _run_blueprint_script(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "infra" / "cluster" / "apply-blueprint-changes.sh"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHON": sys.executable, **env},
    )


def test_blueprint_changes(tmp_path: Path) -> None:
    path = tmp_path / "gke-tpu-v6e-advanced.yaml"
    path.write_text(_BLUEPRINT)
    proc = _run_blueprint_script(path)
    assert proc.returncode == 0, proc.stderr
    changed = path.read_text()
    doc = yaml.safe_load(changed)
    modules = {m["id"]: m for m in doc["deployment_groups"][0]["modules"]}
    cluster = modules["gke-tpu-v6e-cluster"]["settings"]
    assert cluster["system_node_pool_machine_type"] == "e2-standard-8"
    assert cluster["system_node_pool_zones"] == ["$(vars.zone)"]
    assert "storage.admin" in modules["node_pool_service_account"]["settings"]["project_roles"]
    assert "storage.objectViewer" not in changed
    assert doc["vars"]["enable_pathways_for_tpus"] is False
    assert doc["vars"]["cpu_np_machine_type"] == "c4d-standard-96"
    cpu = modules["cpu-np"]
    assert cpu["source"] == "modules/compute/gke-node-pool"
    assert cpu["settings"]["name"] == "cpu-np" and cpu["settings"]["zones"] == ["$(vars.zone)"]
    assert cpu["use"] == ["gke-tpu-v6e-cluster", "node_pool_service_account"]
    order = [m["id"] for m in doc["deployment_groups"][0]["modules"]]
    assert order.index("cpu-np") == order.index("gke-tpu-v6e-pool") + 1
    # Idempotent, and the machine type is a setting.
    assert _run_blueprint_script(path).returncode == 0
    assert path.read_text() == changed
    assert _run_blueprint_script(path, CPU_NP_MACHINE_TYPE="n2-standard-64").returncode == 0
    assert yaml.safe_load(path.read_text())["vars"]["cpu_np_machine_type"] == "n2-standard-64"


def test_blueprint_changes_refuse_an_unexpected_blueprint(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    original = _BLUEPRINT.replace("system_node_pool_machine_type", "system_pool_type")
    path.write_text(original)
    proc = _run_blueprint_script(path)
    assert proc.returncode != 0 and "system_node_pool_machine_type" in proc.stderr
    assert path.read_text() == original, "nothing may be written when an anchor is missing"


def test_shell_scripts() -> None:
    scripts = [ROOT / "infra" / "bundle.sh", *sorted((ROOT / "infra").rglob("*.sh"))]
    for script in set(scripts):
        assert os.access(script, os.X_OK), f"{script} is not executable"
        proc = subprocess.run(
            ["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False
        )
        assert proc.returncode == 0, proc.stderr
    shellcheck = shutil.which("shellcheck")
    if shellcheck:
        proc = subprocess.run(
            [shellcheck, *map(str, sorted(set(scripts)))],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout


# ------------------------------------------------------------------------------ an operator's first day


def _tfparse(tmp_path: Path, tfvars: str) -> dict[str, Any]:
    python = tfparse_python()
    if python is None:
        pytest.skip("tfparse not found: " + TOOLS_HINT.format(var="RLPIPE_TFPARSE_PYTHON"))
    path = tmp_path / "operators.tfvars"
    path.write_text(tfvars)
    proc = subprocess.run(
        [python, "-c", _TFPARSE, str(TF_DIR), os.path.relpath(path, TF_DIR)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout))


def _refs(block: dict[str, Any]) -> set[tuple[str, str]]:
    return {(r.get("label", ""), r.get("name", "")) for r in block["__tfmeta"].get("references", [])}


def test_the_first_apply_waits_for_the_apis_before_the_eventarc_triggers(tf: dict[str, Any]) -> None:
    """A fresh project's first apply fails creating the Eventarc triggers while the Eventarc service
    agent's permissions spread (hashicorp/terraform-provider-google#25294, open): the functions wait
    for a time_sleep that itself waits for the APIs."""
    versions = (TF_DIR / "versions.tf").read_text()
    assert re.search(r'time\s*=\s*{\s*source\s*=\s*"hashicorp/time"', versions)
    (sleep,) = resources(tf, "time_sleep")
    assert sleep["create_duration"] == "180s"
    (apis,) = sleep["depends_on"]
    assert "eventarc.googleapis.com" in apis
    functions_tf = (TF_DIR / "functions.tf").read_text()
    function_block = functions_tf[functions_tf.index('resource "google_cloudfunctions2_function" "fn"') :]
    depends = re.search(r"\n  depends_on = \[([^\]]*)\]", function_block)
    assert depends and "google_project_iam_member.project" in depends.group(1)
    for grant in resources(tf, "google_project_iam_member"):
        if grant["__tfmeta"]["path"].startswith("google_project_iam_member.project["):
            assert ("time_sleep", "api_propagation") in _refs(grant), grant["__tfmeta"]["path"]


def test_operators_get_exactly_what_the_cli_needs(tmp_path: Path) -> None:
    alice = "user:alice@example.com"
    tf = _tfparse(tmp_path, TEST_TFVARS + f'operators = ["{alice}"]\n')
    mine = sorted(
        (
            rtype,
            g["role"],
            g.get("bucket") or g.get("topic") or g.get("service_account_id") or g.get("project"),
        )
        for rtype, g in iam_grants(tf)
        if alice in members_of(tf, g)
    )
    roles = {role: rtype for rtype, role, _ in mine}
    assert roles == {
        "roles/workflows.invoker": "google_project_iam_member",  # cancel: workflows.executions.cancel
        "roles/storage.objectCreator": "google_storage_bucket_iam_member",  # submit (file drop)
        "roles/storage.objectViewer": "google_storage_bucket_iam_member",  # status, list, watch
        "roles/pubsub.publisher": "google_pubsub_topic_iam_member",  # submit --via pubsub
        "roles/iam.serviceAccountTokenCreator": "google_service_account_iam_member",  # the ID token
    }, mine
    operator = f"serviceAccount:rlpipe-operator@{TEST_PROJECT}.iam.gserviceaccount.com"
    its = [(rtype, g["role"], g.get("name")) for rtype, g in iam_grants(tf) if operator in members_of(tf, g)]
    assert its == [("google_cloud_run_v2_service_iam_member", "roles/run.invoker", "rlpipe-stage")]
    assert "export RLPIPE_IMPERSONATE_SERVICE_ACCOUNT=" in (TF_DIR / "outputs.tf").read_text()


def test_deploy_doc_gives_roles_first_apply_and_credentials() -> None:
    doc = (ROOT / "docs" / "deploy.md").read_text()
    for needle in (
        "workflows.executions.cancel",
        "roles/workflows.invoker",
        "roles/pubsub.publisher",
        "roles/iam.serviceAccountTokenCreator",
        "RLPIPE_IMPERSONATE_SERVICE_ACCOUNT",
        "api_propagation_wait",
        "terraform-provider-google/issues/25294",
        "--impersonate-service-account",
    ):
        assert needle in doc, needle


def test_a_team_namespace_may_create_requests_only_under_its_own_folder(tmp_path: Path) -> None:
    """request_id is scoped by the folder (core/layout.request_namespace): the grant must hold
    the team to it, or any member could drop into another team's folder and take its ids."""
    team = "group:team-a@example.com"
    tf = _tfparse(tmp_path, TEST_TFVARS + f'request_namespaces = {{ "team-a" = ["{team}"] }}\n')
    grants = [(rtype, g) for rtype, g in iam_grants(tf) if team in members_of(tf, g)]
    assert [(rtype, g["role"]) for rtype, g in grants] == [
        ("google_storage_bucket_iam_member", "roles/storage.objectCreator")
    ]
    (_, grant) = grants[0]
    requests_bucket = by_path(tf, "google_storage_bucket")["google_storage_bucket.requests"]["name"]
    assert grant["bucket"] == requests_bucket
    assert _condition(grant) == (
        f'resource.name.startsWith("projects/_/buckets/{requests_bucket}/objects/requests/team-a/")'
    )


def test_a_teams_operators_read_the_ledgers_and_only_their_own_teams_artifacts(tmp_path: Path) -> None:
    """Gap 6 of the review: every team's operators could read the whole artifacts bucket, other
    teams' staged data, reward code, checkpoints and exports. A team's runs and conversions are
    under teams/<team>/ (layout.team_prefix), and its operators' artifacts grant is conditioned on
    exactly that prefix; the state bucket (ledgers, which hold no data, code or weights) stays
    whole, as docs/teams.md says."""
    alice, bob = "user:alice@example.com", "user:bob@example.com"
    tfvars = (
        TEST_TFVARS
        + f'teams = {{\n  vision = {{ operators = ["{alice}"] }}\n  ml-ops = {{ operators = ["{bob}"] }}\n}}\n'
    )
    tf = _tfparse(tmp_path, tfvars)
    buckets = {b["__tfmeta"]["path"]: b["name"] for b in resources(tf, "google_storage_bucket")}
    state, artifacts = buckets["google_storage_bucket.state"], buckets["google_storage_bucket.artifacts"]
    for member, team, other in ((alice, "vision", "ml-ops"), (bob, "ml-ops", "vision")):
        reads = {
            g["bucket"]: g
            for rtype, g in iam_grants(tf)
            if rtype == "google_storage_bucket_iam_member" and member in members_of(tf, g)
        }
        assert set(reads) == {state, artifacts}, (member, sorted(reads))
        assert reads[state]["role"] == reads[artifacts]["role"] == "roles/storage.objectViewer"
        assert _condition(reads[state]) == "", "the ledgers: every team's operators list every run"
        expression = _condition(reads[artifacts])
        assert _prefixes_allowed(expression, artifacts) == {f"teams/{team}/"}, expression
        # Read as IAM reads it: the team's own run and conversion, never another's, never runs/.
        own = layout.RunLayout(artifacts, "rabc123", scope=team)
        theirs = layout.RunLayout(artifacts, "rabc123", scope=other)
        allowed = [
            f"projects/_/buckets/{artifacts}/objects/{p}" for p in _prefixes_allowed(expression, artifacts)
        ]
        for name, readable in (
            (own.data_file("train", 0), True),
            (own.export_manifest, True),
            (layout.ConversionCache(artifacts, "k", scope=team).attempt_dir("rabc123", 1), True),
            (theirs.user_file("rewards", ".py"), False),
            (theirs.step_commit(10), False),
            (layout.RunLayout(artifacts, "rabc123").hf_dir, False),
            (layout.ConversionCache(artifacts, "k").attempt_dir("rabc123", 1), False),
        ):
            full = f"projects/_/buckets/{artifacts}/objects/{name}"
            assert any(full.startswith(p) for p in allowed) is readable, (team, name)


def test_a_teams_own_hub_token_reaches_the_stage_function_alone() -> None:
    """var.teams[*].hf_token_secret is mounted as RLPIPE_HF_TOKEN_<TEAM> (what
    hub_client.team_token_env reads) on the stage function only, and only its account may read it.
    tfparse leaves the dynamic blocks unexpanded: read the source."""
    from rlpipe.control.adapters.hub_client import team_token_env

    functions = (TF_DIR / "functions.tf").read_text()
    secrets = (TF_DIR / "secrets.tf").read_text()
    assert 'for_each = each.key == "stage" ? local.team_hub_tokens : {}' in functions
    assert '"RLPIPE_HF_TOKEN_${upper(replace(team, "-", "_"))}" => t.hf_token_secret' in secrets
    assert team_token_env("ml-ops") == "RLPIPE_HF_TOKEN_ML_OPS", (
        "the same name the Terraform expression makes"
    )
    grant = secrets[secrets.index('resource "google_secret_manager_secret_iam_member" "team_hub_token"') :]
    grant = grant[: grant.index("\n}\n")]
    assert 'member    = local.sa_member["stage"]' in grant and "for_each = local.team_hub_tokens" in grant
