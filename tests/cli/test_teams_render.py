"""``rlpipe teams render``: the declaration and params.env in, infra/cluster/k8s/teams.yaml out
(docs/teams.md, "Quota and fair sharing"); a declaration the cluster cannot hold exits 1 naming each
problem, and writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from rlpipe.cli.exit_codes import ExitCode
from tests.harness.cli import run_main

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "infra" / "cluster" / "k8s"
# The shape of a Terraform variables file ({"teams": {...}}), which the render reads as it is.
TEAMS = {
    "teams": {
        "vision": {"quota": {"chips": 16}, "queues": ["user-queue"]},
        "speech": {"quota": {"chips": 16}},
    }
}


def _files(tmp_path: Path, teams: object) -> tuple[Path, Path]:
    declaration = tmp_path / "teams.auto.tfvars.json"
    declaration.write_text(json.dumps(teams))
    params = tmp_path / "params.env"
    params.write_text((K8S_DIR / "params.env.example").read_text())  # TPU_CHIPS=32
    return declaration, params


def test_render_writes_each_teams_queue_and_warns_of_queues_it_has_none_for(tmp_path: Path) -> None:
    declaration, params = _files(tmp_path, TEAMS)
    out = tmp_path / "teams.yaml"
    args = ["teams", "render", "--teams", str(declaration), "--params", str(params), "--output", str(out)]
    result = run_main(args, dict(os.environ))
    assert result.returncode == ExitCode.OK, result.stderr
    objs = [d for d in yaml.safe_load_all(out.read_text()) if d]
    queues = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterQueue"}
    assert set(queues) == {"rlpipe-vision", "rlpipe-speech"}
    tpu = queues["rlpipe-vision"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert tpu == [{"name": "google.com/tpu", "nominalQuota": 16}]
    # speech may name the presets' flex-queue, which team namespaces do not have; vision may not.
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "team speech may name queue flex-queue" in warnings[0], result.stderr


def test_with_no_teams_render_prints_the_file_the_repository_holds(tmp_path: Path) -> None:
    declaration, _ = _files(tmp_path, {})
    result = run_main(["teams", "render", "--teams", str(declaration)], dict(os.environ))
    assert result.returncode == ExitCode.OK, result.stderr
    assert result.stdout == (K8S_DIR / "teams.yaml").read_text()


def test_a_declaration_the_cluster_cannot_hold_exits_1_naming_each_problem_and_writes_nothing(
    tmp_path: Path,
) -> None:
    declaration, params = _files(tmp_path, {"flex": {"quota": {"chips": 64}}})
    out = tmp_path / "teams.yaml"
    args = ["teams", "render", "--teams", str(declaration), "--params", str(params), "--output", str(out)]
    result = run_main(args, dict(os.environ))
    assert result.returncode == ExitCode.INVALID_INPUT
    assert "refused (2 problems)" in result.stderr
    assert "teams.flex: its ClusterQueue would be rlpipe-flex" in result.stderr
    assert "add up to 64, more than the cluster's 32 (TPU_CHIPS)" in result.stderr
    assert not out.exists()


def test_teams_declared_without_params_is_refused(tmp_path: Path) -> None:
    declaration, _ = _files(tmp_path, TEAMS)
    result = run_main(["teams", "render", "--teams", str(declaration)], dict(os.environ))
    assert result.returncode == ExitCode.INVALID_INPUT
    assert "params: is needed to share the cluster" in result.stderr
