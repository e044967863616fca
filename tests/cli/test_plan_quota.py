"""`rlpipe plan` against the deployment's TPU quota, read where the deployment states it.

A cluster set up from `infra/cluster/k8s/params.env.example` (TPU_CHIPS=32) never admits the
v6e-64 or the two-slice example (64 chips each): they wait past `timeouts.queued` and end
`capacity`. `plan` says so before anything runs, and docs/deploy.md states what each example needs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import EXAMPLES, ROOT

K8S = ROOT / "infra" / "cluster" / "k8s"
EXAMPLE_PARAMS = K8S / "params.env.example"
TPU = "google.com/tpu"


def _example_quota() -> int:
    (line,) = [x for x in EXAMPLE_PARAMS.read_text().splitlines() if x.startswith("TPU_CHIPS=")]
    return int(line.split("=", 1)[1])


def _plan(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "plan", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        # as the local stack's intake takes the examples: one brings its own reward functions, one
        # names the stack's status topic as its notify target
        env={**os.environ, "RLPIPE_ALLOW_USER_CODE": "true", "RLPIPE_STATUS_TOPIC": "rlpipe-status"},
    )


def _json(*args: str, cwd: Path = ROOT) -> dict[str, Any]:
    result = _plan(*args, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def _over_quota(plan: dict[str, Any]) -> list[str]:
    return [w for w in plan["capacity"]["warnings"] if "never admits" in w]


@pytest.mark.parametrize("example", ["gemma4-26b-v6e-64.yaml", "gemma4-26b-v6e-32x2.yaml"])
def test_a_request_over_the_example_quota_is_warned_about(example: str) -> None:
    params = str(EXAMPLE_PARAMS.relative_to(ROOT))
    plan = _json(f"examples/{example}", "--params", params)
    quota, chips = _example_quota(), plan["capacity"]["chips"]
    assert chips > quota, "the premise: the example asks for more than the example quota"
    assert plan["capacity"]["quota"] == {
        "queue": "user-queue",
        "chips": quota,
        "source": f"TPU_CHIPS in {params}",
    }
    (warning,) = _over_quota(plan)
    assert f"{chips} TPU chips" in warning and f"at most {quota}" in warning
    assert "TPU_CHIPS" in warning and "kueue_tpu_chips" in warning, "names the setting and how to raise it"
    text = _plan(f"examples/{example}", "--params", params)
    assert text.returncode == 0, "a warning, not a refusal: the cluster may be about to grow"
    assert any(line.startswith("  warning:") and "never admits" in line for line in text.stdout.splitlines())


def test_a_request_within_the_quota_gets_no_warning() -> None:
    plan = _json("examples/gemma4-26b-v6e-32.yaml", "--params", str(EXAMPLE_PARAMS))
    assert plan["capacity"]["chips"] <= _example_quota()
    assert plan["capacity"]["quota"]["chips"] == _example_quota() and not _over_quota(plan)


def test_the_deployments_params_file_is_read_where_deploy_md_writes_it(tmp_path: Path) -> None:
    """From the directory a deployment works in, no option: the params.env `kubectl apply -k`
    read. Without one, nothing is known and nothing is checked."""
    request = tmp_path / "request.yaml"
    shutil.copy(ROOT / "examples" / "gemma4-26b-v6e-64.yaml", request)
    assert _json(str(request), cwd=tmp_path)["capacity"]["quota"] is None
    assert not _over_quota(_json(str(request), cwd=tmp_path))
    (tmp_path / "infra" / "cluster" / "k8s").mkdir(parents=True)
    (tmp_path / "infra" / "cluster" / "k8s" / "params.env").write_text("TPU_CHIPS=48\n")
    plan = _json(str(request), cwd=tmp_path)
    assert plan["capacity"]["quota"]["chips"] == 48 and "at most 48" in _over_quota(plan)[0]


def test_flex_start_is_held_to_its_own_queues_quota(tmp_path: Path) -> None:
    request = tmp_path / "flex.yaml"
    request.write_text(
        "model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\ntpu: {provisioning: flex-start, slices: 2}\n"
    )
    base, flex = tmp_path / "params.env", tmp_path / "flex-params.env"
    base.write_text("TPU_CHIPS=128\n")
    flex.write_text("# the flex pool holds one v6e-32\nFLEX_TPU_CHIPS=32\n")
    plan = _json(str(request), "--params", str(base), "--params", str(flex))
    assert plan["capacity"]["quota"]["queue"] == "flex-queue" and plan["capacity"]["quota"]["chips"] == 32
    (warning,) = _over_quota(plan)
    assert "FLEX_TPU_CHIPS" in warning and "64 TPU chips" in warning
    # The base quota alone says nothing about flex-queue.
    assert _json(str(request), "--params", str(base))["capacity"]["quota"] is None


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ("WORKLOAD_GSA=x\n", "no TPU_CHIPS or FLEX_TPU_CHIPS"),
        ("TPU_CHIPS=thirty-two\n", "TPU_CHIPS='thirty-two' is not a whole number"),
        (None, "cannot read it"),
    ],
)
def test_a_params_file_plan_cannot_use_is_named(tmp_path: Path, content: str | None, names: str) -> None:
    path = tmp_path / "params.env"
    if content is not None:
        path.write_text(content)
    result = _plan("examples/gemma4-26b-v6e-32.yaml", "--params", str(path))
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert names in result.stderr and str(path) in result.stderr


# ------------------------------------------------------------------ the facts plan relies on


def _docs(kind: str, name: str, directory: Path) -> dict[str, Any]:
    for path in directory.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind and doc["metadata"]["name"] == name:
                return dict(doc)
    raise AssertionError(f"no {kind} {name} in {directory}")


def test_each_quota_key_caps_the_queue_plan_holds_it_to() -> None:
    """Read from the manifests a deployment applies: the LocalQueue's ClusterQueue gives every TPU
    flavor the quota key plan reads, and the key's params file sits beside that kustomization."""
    from rlpipe.cli.plan import DEPLOYMENT_QUOTAS

    for q in DEPLOYMENT_QUOTAS:
        directory = ROOT / q.path.parent
        local = _docs("LocalQueue", q.queue, directory)
        cluster_queue = _docs("ClusterQueue", local["spec"]["clusterQueue"], directory)
        quotas = {
            r["nominalQuota"]
            for group in cluster_queue["spec"]["resourceGroups"]
            if TPU in group["coveredResources"]
            for flavor in group["flavors"]
            for r in flavor["resources"]
            if r["name"] == TPU
        }
        assert quotas == {q.key}, (q.queue, quotas)
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert any(q.path.name in g.get("envs", []) for g in kustomization["configMapGenerator"])
        example = (directory / f"{q.path.name}.example").read_text()
        assert re.search(rf"^{q.key}=\d+$", example, re.MULTILINE)


def test_deploy_md_states_the_quota_every_example_needs() -> None:
    """The table in docs/deploy.md against what plan computes for each example it names."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split("### The TPU quota each request needs", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and "examples/" in line]
    named: dict[str, int] = {}
    for row in rows:
        chips = int(row.rstrip(" |").rsplit("|", 1)[1])
        for example in re.findall(r"`(examples/[^`]+\.yaml)`", row):
            named[example] = chips
    assert set(named) == {str(p.relative_to(ROOT)) for p in EXAMPLES}, "every example is in the table"
    for example, chips in named.items():
        assert _json(example)["capacity"]["chips"] == chips, example
