"""The `rlpipe` command as a user runs it: a real subprocess, real files, exit codes and output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from rlpipe.core.request import json_schema
from rlpipe.local.kube_api.validation import validate_object
from tests.conftest import ROOT

SCHEMA_FILE = ROOT / "shared" / "rlpipe" / "core" / "request.schema.json"


def rlpipe(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        check=False,
    )


def test_render_prints_three_valid_objects() -> None:
    result = rlpipe("render", "examples/gemma4-26b-v6e-32.yaml", "--bucket", "my-artifacts")
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["Job", "JobSet", "Job"]
    assert all(validate_object(d) == [] for d in docs)
    assert "gs://my-artifacts/runs/" in result.stdout


def test_render_one_stage_and_attempt() -> None:
    result = rlpipe(
        "render",
        "examples/gemma4-26b-v6e-64.yaml",
        "--stage",
        "train",
        "--attempt",
        "4",
        "--run-id",
        "rmyrun000001",
    )
    docs = list(yaml.safe_load_all(result.stdout))
    assert len(docs) == 1 and docs[0]["metadata"]["name"] == "rmyrun000001-train-a4"


def test_validate_exit_codes_and_error_list(tmp_path: Path) -> None:
    assert rlpipe("validate", "examples/gemma4-26b-v6e-32.yaml").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\ntpu: {topology: 8x8}\ntraining: {batch_size: 3}\n"
    )
    result = rlpipe("validate", str(bad))
    assert result.returncode == 1
    assert (
        "tpu.topology" in result.stderr and "training.batch_size" in result.stderr and "fix:" in result.stderr
    )


def test_validate_reads_stdin() -> None:
    assert (
        rlpipe("validate", "-", stdin="model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\n").returncode
        == 0
    )


def test_render_refuses_an_invalid_request(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "gemma4-26b"}')
    result = rlpipe("render", str(bad))
    assert result.returncode == 1 and result.stdout == "" and "hf_repo" in result.stderr


def test_committed_schema_is_current() -> None:
    printed = json.loads(rlpipe("schema").stdout)
    assert printed == json_schema()
    assert json.loads(SCHEMA_FILE.read_text()) == printed, "run `make schema` and commit the result"


def test_schema_requires_only_model_and_hf_repo_and_forbids_unknown_keys() -> None:
    from jsonschema import Draft202012Validator

    schema = json_schema()
    validator = Draft202012Validator(schema)
    assert not list(validator.iter_errors({"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"}))
    assert list(validator.iter_errors({"model": "gemma4-26b"}))
    assert list(validator.iter_errors({"model": "m", "hf_repo": "a/b", "training": {"bogus": 1}}))
    for path in sorted(ROOT.glob("examples/*.yaml")):
        assert not list(validator.iter_errors(yaml.safe_load(path.read_text()))), path.name
