"""`rlpipe plan`: a dry run of what the pipeline will do for a request, with no cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import rlpipe
from tests.conftest import ROOT

SHA = "0123456789abcdef0123456789abcdef01234567"
TOP_LEVEL = {
    "plan_version",
    "run_id",
    "request",
    "pinned_sha",
    "pinned_sha_note",
    "pinning",
    "conversion",
    "stages",
    "data",
    "training",
    "capacity",
    "paths",
    "budgets",
    "deadlines",
}


def _request(tmp_path: Path, text: str) -> str:
    path = tmp_path / "request.yaml"
    path.write_text("model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\n" + text)
    return str(path)


def _plan(*args: str) -> dict[str, Any]:
    result = rlpipe("plan", *args, "--json")
    assert result.returncode == 0, result.stderr
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def test_two_epochs_end_at_step_100(tmp_path: Path) -> None:
    request = _request(tmp_path, "maxtext_overrides: {num_epoch: 2}\n")
    plan = _plan(request, "--bucket", "art")
    train = next(s for s in plan["stages"] if s["stage"] == "train")
    export = next(s for s in plan["stages"] if s["stage"] == "export")
    assert train["final_step"] == plan["training"]["final_step"] == 100
    assert "/actor/100/commit_success.txt (final step 100;" in train["done_when"]
    assert "RL Training Completed Successfully!" in train["done_when"]
    assert plan["training"]["checkpoints"] == [50, 100]
    assert export["inputs"].endswith("/actor/100/model_params/")
    text = rlpipe("plan", request)
    assert text.returncode == 0 and "ends at step 100 (= max_steps" in text.stdout


def test_a_request_whose_end_cannot_be_verified_is_refused(tmp_path: Path) -> None:
    result = rlpipe("plan", _request(tmp_path, "maxtext_overrides: {enable_checkpointing: false}\n"))
    assert result.returncode == 1 and result.stdout == ""
    assert (
        "maxtext_overrides.enable_checkpointing" in result.stderr
        and "not even the final one" in result.stderr
    )


def test_the_json_form_is_stable_and_complete() -> None:
    plan = _plan(
        "examples/gemma4-26b-v6e-32.yaml", "--bucket", "art", "--state-bucket", "st", "--hf-revision", SHA
    )
    assert set(plan) == TOP_LEVEL and plan["plan_version"] == 1
    assert [s["stage"] for s in plan["stages"]] == ["convert", "train", "export"]
    for stage in plan["stages"]:
        assert stage["name"] == f"{plan['run_id']}-{stage['stage']}-a1" and stage["deadline_seconds"] > 0
        assert {"kind", "runs_on", "inputs", "output", "done_when", "queue", "namespace"} <= set(stage)
    assert plan["pinned_sha"] == SHA and plan["pinning"]["resolved"] is True
    key = plan["conversion"]["cache_key"]
    assert (
        re.fullmatch(r"c[0-9a-f]{24}", key)
        and plan["conversion"]["ready"] == f"gs://st/cache/maxtext/{key}/READY.json"
    )
    # The control plane's records are in the state bucket; everything a workload reads or writes in
    # the artifacts bucket.
    state = {plan["conversion"]["ready"], *(plan["paths"][k] for k in ("ledger", "events", "error"))}
    assert all(u.startswith(f"gs://st/runs/{plan['run_id']}/") for u in state - {plan["conversion"]["ready"]})
    uris = re.findall(r"gs://[^\s\"()]+", json.dumps(plan))
    assert uris and all(u.startswith("gs://art/") for u in set(uris) - state)
    assert set(plan["budgets"]) >= {
        "preempted",
        "capacity",
        "resources",
        "transient",
        "max_retries",
        "backoff",
    }
    assert set(plan["deadlines"]) == {"convert", "train", "export", "queued"}
    documented = (ROOT / "docs" / "plan.md").read_text()
    for field in TOP_LEVEL:
        assert f"`{field}`" in documented, f"docs/plan.md does not document {field}"


def test_an_unpinned_revision_is_resolved_at_run_time(tmp_path: Path) -> None:
    plan = _plan(_request(tmp_path, ""))
    assert plan["pinned_sha"] is None and "resolved at run time" in plan["pinned_sha_note"]
    assert plan["conversion"]["cache_key"] is None
    assert "<conv-key>" in plan["conversion"]["attempt_dir"] and "<conv-key>" in plan["stages"][1]["inputs"]
    pinned = _plan(_request(tmp_path, f"hf_revision: {SHA}\n"))
    assert pinned["pinned_sha"] == SHA and pinned["conversion"]["cache_key"]


# ---- --hub: the datasets pinned now, as the pipeline's plan will pin them -------------------------


@pytest.fixture(scope="module")
def hub() -> Iterator[Any]:
    from rlpipe.local.hub_double import HubDouble
    from rlpipe.local.hub_double.datasets import gsm8k_files

    server = HubDouble().start()
    server.add_repo("google/gemma-4-26b-a4b-it")
    server.add_known_datasets()
    server.add_dataset("acme/gsm8k-30", gsm8k_files({"train": 30, "test": 8}, configs=("main",)))
    yield server
    server.stop()


def _hub_plan(hub: Any, request: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "plan", request, "--hub", *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        env={**env, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1"},
    )


def test_plan_hub_pins_the_dataset_and_the_split_fixes_the_end(tmp_path: Path, hub: Any) -> None:
    request = _request(tmp_path, "dataset: {repo: acme/gsm8k-30}\n")
    result = _hub_plan(hub, request, "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    train = plan["data"]["train"]
    assert train["dataset"] == "acme/gsm8k-30" and train["num_examples"] == 30 and train["files"] == 1
    assert re.fullmatch(r"[0-9a-f]{40}", train["pinned_sha"]) and plan["pinned_sha"]
    # 30 examples, batch 4, drop_remainder: 7 batches of one iteration each, not the config's 50
    assert plan["training"]["final_step"] == 7 and plan["training"]["max_steps"] == 50
    assert plan["training"]["checkpoints"] == [7], "the forced final save where the data ends it"
    assert plan["training"]["evaluations"]["intermediate_steps"] == []
    assert plan["paths"]["final_step_commit"].endswith("/actor/7/commit_success.txt")
    assert "step 7 (of max_steps 50" in plan["training"]["final_step_explained"]
    text = _hub_plan(hub, request)
    assert text.returncode == 0 and "pinned now: train: acme/gsm8k-30@" in text.stdout


def test_plan_hub_refuses_a_missing_split_naming_the_field(tmp_path: Path, hub: Any) -> None:
    result = _hub_plan(hub, _request(tmp_path, "dataset: {eval_split: validation}\n"))
    assert result.returncode == 1 and result.stdout == ""
    assert "dataset.eval_split" in result.stderr and "validation" in result.stderr


def test_plan_names_the_data_and_rewards_without_the_hub(tmp_path: Path) -> None:
    plan = _plan("examples/gemma4-26b-v6e-32-openr1-math.yaml", "--bucket", "art")
    data = plan["data"]
    assert data["train"]["dataset"] == "open-r1/OpenR1-Math-220k" and data["train"]["pinned_sha"] is None
    assert data["eval"] is None and "held out" in data["eval_held_out"]
    assert data["train"]["staged_at"].startswith("gs://art/runs/") and data["rewards"]["builtin"] is True


def test_plan_hub_counts_what_train_rl_holds_out_of_a_dataset_it_evaluates_on_itself(hub: Any) -> None:
    """OpenR1-Math-220k evaluated on itself: train_rl first splits 5% off its training split
    (ceil(0.05 × 48) = 3 of the double's 48 examples), so 45 remain: 11 batches of 4."""
    result = _hub_plan(hub, "examples/gemma4-26b-v6e-32-openr1-math.yaml", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["data"]["train"]["num_examples"] == 48 and plan["data"]["eval"] is None
    assert plan["training"]["final_step"] == 11


def test_an_evaluation_dataset_has_its_own_subset(tmp_path: Path, hub: Any) -> None:
    """GSM8K's `main` is no config of OpenR1-Math-220k: the evaluation dataset is read in its own
    default config (or `dataset.eval_subset`), never forced into the training one's."""
    request = _request(tmp_path, "dataset: {eval_repo: open-r1/OpenR1-Math-220k, eval_split: train}\n")
    result = _hub_plan(hub, request, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)["data"]
    assert (data["train"]["subset"], data["eval"]["subset"]) == ("main", "default")
    named = _hub_plan(hub, _request(tmp_path, "dataset: {eval_repo: open-r1/OpenR1-Math-220k, "
                                    "eval_subset: nope, eval_split: train}\n"))  # fmt: skip
    assert named.returncode == 1 and "dataset.eval_subset" in named.stderr
