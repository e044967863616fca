"""Outcomes end to end on the local stack: the quality gate, a person's promote, and publishing
to the Hub double, with the real ``huggingface_hub`` client reading what was pushed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import HfApi

from rlpipe.control.adapters.blobstore import BlobStore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.orchestrator import Orchestrator
from rlpipe.control.lifecycle.intake import Intake
from rlpipe.control.lifecycle.promotion import NotPromotable, promote
from rlpipe.core import layout
from tests.e2e.test_e2e import Local, faults, local  # noqa: F401

pytestmark = pytest.mark.slow


def intake_for(local: Local) -> Intake:
    s = local.settings
    return Intake(
        requests=BlobStore(local.client, s.requests_bucket),
        ledger=local.ledger,
        orchestrator=Orchestrator(s),
        log=Logger("test-promote"),
        lease_seconds=s.start_lease_seconds,
        notify=lambda record: None,
        policy=s.policy(),
    )


def test_a_gated_run_keeps_its_checkpoints_and_a_promote_ships_it_without_training_again(
    local: Local, faults: Any
) -> None:
    faults([])
    run_id = local.submit(local.request(gate={"min_post_mean_reward": 0.99}))
    record = local.wait(run_id)
    assert record.state == "gated", record.failure
    assert record.failure is not None and record.failure.tag == "gated"
    assert (
        "min_post_mean_reward 0.99" in record.failure.message
        and "post mean_reward 0.5627" in record.failure.message
    )
    assert [a.stage for a in record.attempts] == ["convert", "train"]  # export skipped
    assert record.gate is not None and record.gate.passed is False
    run = layout.RunLayout(local.settings.artifacts_bucket, run_id)
    final = record.lineage.final_step
    assert final and local.client.bucket(run.bucket).blob(run.step_commit(final)).exists(), "checkpoints kept"

    # As `rlpipe promote` does: through the stage function, which may write the ledger
    from rlpipe.cli.runs import call_stage

    assert local.settings.stage_url, "the stack gives the CLI the stage function's URL"
    with pytest.raises(RuntimeError, match="reason"):
        call_stage(local.settings, {"op": "promote", "run_id": run_id, "by": "alice", "reason": " "})
    answer = call_stage(
        local.settings,
        {"op": "promote", "run_id": run_id, "by": "alice", "reason": "reviewed the samples by hand"},
    )
    assert answer["by"] == "alice"
    # A snapshot read after the new execution started: it may already be past train
    assert answer["state"] in ("training", "exporting", "succeeded"), answer
    record = local.wait(run_id)
    assert record.state == "succeeded", record.failure
    assert [(a.stage, a.attempt) for a in record.attempts] == [("convert", 1), ("train", 1), ("export", 1)]
    assert record.lineage.promoted is not None
    assert (record.lineage.promoted.by, record.lineage.promoted.reason) == (
        "alice",
        "reviewed the samples by hand",
    )
    assert record.gate is not None and record.gate.override == record.lineage.promoted
    with pytest.raises(NotPromotable, match="succeeded; only a gated run"):
        promote(local.ledger, run_id, by="bob", reason="again", start=intake_for(local).start_claimed)


def test_a_run_that_passes_its_gate_is_published_once_with_a_card_naming_the_base_sha(
    local: Local, faults: Any
) -> None:
    faults([])
    repo = f"rlpipe-demo/e2e-{os.urandom(4).hex()}"  # an organisation the default allowlist publishes to
    run_id = local.submit(local.request(gate={"min_reward_gain": 0.1}, publish={"repo": repo}))
    record = local.wait(run_id, expected=30)
    assert record.state == "succeeded", record.failure
    assert record.gate is not None and record.gate.passed is True
    api = HfApi(endpoint=os.environ["HF_ENDPOINT"], token="local-read-token")
    commits = [c for c in api.list_repo_commits(repo, revision="main") if f"rlpipe run {run_id}" in c.title]
    assert len(commits) == 1
    assert record.lineage.published_commit == commits[0].commit_id, "the ledger names the commit"
    run = layout.RunLayout(local.settings.artifacts_bucket, run_id)
    manifest = local.client.bucket(run.bucket).blob(run.export_manifest).download_as_bytes()
    assert record.lineage.export_manifest_sha256 == hashlib.sha256(manifest).hexdigest(), (
        "the manifest publish was held to is the one export wrote, as its bytes are"
    )
    exported = {f["path"]: f["size"] for f in json.loads(manifest)["files"]}
    in_bucket = {b.name: b.size for b in local.client.list_blobs(run.bucket, prefix=run.hf_dir)}
    assert set(in_bucket) == {run.hf_dir + p for p in exported} | {run.export_manifest}
    on_hub = {
        f.path: f.size
        for f in api.list_repo_tree(repo, revision="main", recursive=True)
        if hasattr(f, "size") and f.path != ".gitattributes"
    }
    assert {k: v for k, v in on_hub.items() if k != "README.md"} == exported
    card = Path(api.hf_hub_download(repo, "README.md", revision="main")).read_text()
    assert record.lineage.hf_sha and record.lineage.hf_sha in card
    assert "license: gemma" in card and f"base_model: {record.request['hf_repo']}" in card
    assert "local-write-token" not in card
    from huggingface_hub import ModelCard

    data = ModelCard(card).data
    assert data.model_name == repo.rsplit("/", 1)[1] and f"# {repo.rsplit('/', 1)[1]}" in card, "title = repo"
    post = record.results["post"]
    assert {(r.metric_type, r.metric_value) for r in data.eval_results or []} >= {
        ("mean_reward", round(post["mean_reward"], 4)),
        ("accuracy", round(post["accuracy"], 4)),
    }
    assert record.lineage.checkpoint_uri and record.lineage.checkpoint_uri in card


def test_a_sweep_file_becomes_its_children_with_one_conversion_and_only_the_winner_published(
    local: Local, faults: Any
) -> None:
    """One file, delivered three times (dropped twice, one event redelivered), is exactly three
    child runs: one conversion between them, the same pinned commits, two at a time, and the one
    with the highest post mean_reward (rl.grpo_beta 0.04 rises fastest in the simulator) is the
    only one that publishes."""
    from tests.harness.functions import gcs_event, post

    faults([])
    repo = f"rlpipe-demo/e2e-{os.urandom(4).hex()}"  # an organisation the default allowlist publishes to
    grid = {"maxtext_overrides.rl.grpo_beta": [0.16, 0.04, 0.08]}
    path = local.request(
        fresh_cache=True,
        sweep={"grid": grid, "max_parallel": 2, "select": {"metric": "post_mean_reward"}},
        publish={"repo": repo},
    )
    parent_id = local.submit(path)
    assert local.submit(path) == parent_id
    blob = next(local.client.list_blobs(local.settings.requests_bucket, prefix=f"requests/{path.stem}"))
    event = gcs_event(local.settings.requests_bucket, blob.name, blob.generation, blob.size)
    assert post(local.state.endpoints["function intake_object"], event).status_code == 200
    parent = local.wait(parent_id, expected=60)
    assert parent.state == "succeeded", parent.failure
    assert parent.sweep is not None and len(parent.sweep.children) == 3
    members = [r for r in (local.ledger.get(i) for i in local.ledger.list_run_ids()) if r and r.lineage.sweep]
    children = sorted(
        (r for r in members if r.lineage.sweep and r.lineage.sweep.parent == parent_id),
        key=lambda r: r.lineage.sweep.index if r.lineage.sweep else -1,
    )
    assert [c.run_id for c in children] == parent.sweep.children
    assert [local.executions_of(c.run_id) for c in children] == [1, 1, 1]
    assert [a.stage for c in children for a in c.attempts].count("convert") == 1
    assert (
        len({c.lineage.hf_sha for c in children}) == 1
        and len({c.lineage.conversion_key for c in children}) == 1
    )
    assert all(c.lineage.data == children[0].lineage.data for c in children)
    assert parent.sweep.selection is not None and parent.sweep.selection.run_id == children[1].run_id
    assert [c.lineage.sweep.selected for c in children if c.lineage.sweep] == [False, True, False]
    assert [c.state for c in children] == ["succeeded"] * 3
    assert [any(a.stage == "publish" for a in c.attempts) for c in children] == [False, True, False]
    api = HfApi(endpoint=os.environ["HF_ENDPOINT"], token="local-read-token")
    titles = [c.title for c in api.list_repo_commits(repo, revision="main") if "rlpipe run" in c.title]
    assert len(titles) == 1 and children[1].run_id in titles[0]


def test_a_sweep_stops_its_losing_children_early_and_publishes_the_best(local: Local, faults: Any) -> None:
    """The median rule on a 2×2 grid whose learning rate 2e-7 (a hundredth of the reference) barely
    learns in the simulator (the children in key order: grpo_beta 0.04 then 0.08, each with the
    learning rate 2e-5 then 2e-7, so children 1 and 3 are the slow ones): those two children fall below the median of their siblings at an
    intermediate evaluation and are stopped there (their slices deleted, their chip-hours kept),
    while the two at the reference go on; the best of those publishes. Each good child is never
    stopped: its best value is at least every sibling's running average at the same step."""
    # The demo's pace (about 15 steps per status read here): evaluations arrive while the
    # children train, as they do on a slice, where a step takes minutes and a read seconds.
    faults([], timing="demo")
    repo = f"rlpipe-demo/e2e-{os.urandom(4).hex()}"
    grid = {"training.learning_rate": [2e-5, 2e-7], "maxtext_overrides.rl.grpo_beta": [0.04, 0.08]}
    sweep = {
        "grid": grid,
        "max_parallel": 4,
        "select": {"metric": "post_mean_reward"},
        "early_stop": "median",
    }
    path = local.request(fresh_cache=True, sweep=sweep, publish={"repo": repo}, training={"num_batches": 200})
    parent = local.wait(local.submit(path), expected=90)
    assert parent.state == "succeeded", parent.failure
    assert parent.sweep is not None
    children = [local.ledger.get(c) for c in parent.sweep.children]
    assert [c.state if c else None for c in children] == ["succeeded", "stopped", "succeeded", "stopped"], [
        (s.index, s.reason) for s in parent.sweep.stopped
    ]
    assert sorted(s.index for s in parent.sweep.stopped) == [1, 3]
    for child in children[1::2]:
        assert child is not None and child.failure is not None
        assert child.failure.tag == "stopped" and child.failure.rule == "sweep-early-stopped"
        assert child.failure.message.startswith("stopped early by median: at step ")
        assert "below the median" in child.failure.message
        [train] = [a for a in child.attempts if a.stage == "train"]
        assert train.phase == "stopped" and train.failure_class == "stopped"
        assert train.chip_hours and train.chip_hours > 0, "the chip-hours it used are kept"
        assert [a.stage for a in child.attempts] == ["train"] or "export" not in [
            a.stage for a in child.attempts
        ]
        assert not any(w.startswith(child.run_id) for w in local.workloads()), "its workloads are deleted"
        stop = next(s for s in parent.sweep.stopped if s.run_id == child.run_id)
        assert stop.step is not None and stop.step < 200 and stop.threshold is not None
        assert stop.value is not None and stop.value < stop.threshold
        # Its execution ended as the request meant it to: SUCCEEDED, outcome stopped (not FAILED).
        assert _execution_results(local, child.run_id) == [("SUCCEEDED", "stopped")]
        # A status read again (a redelivery, or the workflow's retried call) gets the same answer,
        # in the contract's shape, and ends nothing twice.
        from rlpipe.control import services
        from rlpipe.core.workflow_contract import StatusAnswer

        services.reset()  # the stage operations in process, on the stack's servers (its env is set)
        stage = services.stage_service(Logger("e2e-stopped"))
        again = StatusAnswer.model_validate(stage.status(child.run_id, "train", train.attempt))
        assert again.phase == "failed" and again.failure is not None and again.failure.tag == "stopped"
        assert again.failure.message == child.failure.message
        after = local.ledger.get(child.run_id)
        assert after is not None and after.state == "stopped" and after.seq == child.seq
    selection = parent.sweep.selection
    assert selection is not None and selection.index == 0  # grpo_beta 0.04 rises fastest
    assert {r["index"]: r["status"] for r in selection.table}[1] == "not a candidate: stopped early"
    published = [any(a.stage == "publish" for a in c.attempts) for c in children if c]
    assert published == [True, False, False, False]


def _execution_results(local: Local, run_id: str) -> list[tuple[str, str | None]]:
    """Each execution of the run: its state, and the outcome its result names."""
    from google.cloud.workflows.executions_v1 import ExecutionView, ListExecutionsRequest

    client = Orchestrator(local.settings).client
    listing = client.list_executions(
        request=ListExecutionsRequest(parent=local.settings.workflow_path, view=ExecutionView.FULL)
    )
    return [
        (e.state.name, json.loads(e.result or "{}").get("outcome"))
        for e in listing
        if json.loads(e.argument or "{}").get("run_id") == run_id
    ]


def test_export_best_exports_the_best_evaluated_step_when_the_last_is_worse_and_the_card_says_so(
    local: Local, faults: Any
) -> None:
    """A learning rate ten times the tutorials' makes the played evaluations noisy (docs/simulator.md:
    the reward curve), and this seed makes the first evaluation the best. A checkpoint every 2 steps
    of 40: rl.yml's newest 10 would have deleted step 10 before export, so export could load it only
    because the run kept 16; once export ended, the steps kept only for the choice are gone."""
    faults([])
    repo = f"rlpipe-demo/e2e-best-{os.urandom(4).hex()}"
    run_id = local.submit(
        local.request(
            training={"num_batches": 40, "checkpoint_period": 2, "learning_rate": 2e-4},
            maxtext_overrides={"data_shuffle_seed": 1},
            export={"step": "best"},
            gate={"min_post_mean_reward": 0.4},  # judged on the exported step, not the last
            publish={"repo": repo},
        )
    )
    record = local.wait(run_id, expected=30)
    assert record.state == "succeeded", record.failure
    rewards = {e["step"]: e["mean_reward"] for e in record.results["intermediate"]}
    rewards[record.lineage.final_step or 0] = record.results["post"]["mean_reward"]
    best = max(rewards, key=lambda s: rewards[s])
    assert record.lineage.final_step == 40 and best != 40, f"the last step must be worse here: {rewards}"
    assert rewards[best] >= 0.4 > rewards[40], f"the gate must tell the two steps apart here: {rewards}"
    assert record.gate is not None and record.gate.passed is True
    assert f"{rewards[best]:.4f}" in " ".join(record.gate.reasons)
    assert record.lineage.exported_step == best
    assert record.lineage.export_reason and f"step {best} of 40" in record.lineage.export_reason
    run = layout.RunLayout(local.settings.artifacts_bucket, run_id)
    kept = layout.committed_steps(
        (b.name for b in local.client.list_blobs(run.bucket, prefix=run.checkpoints)), run
    )
    # rl.yml keeps the newest 10 (22 to 40); the exported step stays beside them
    assert kept == sorted({best, *range(22, 41, 2)})
    api = HfApi(endpoint=os.environ["HF_ENDPOINT"], token="local-read-token")
    card = Path(api.hf_hub_download(repo, "README.md", revision="main")).read_text()
    assert f"These weights are training step {best}:" in card
    from huggingface_hub import ModelCard

    data = ModelCard(card).data
    assert ("mean_reward", round(rewards[best], 4)) in {
        (r.metric_type, r.metric_value) for r in data.eval_results or []
    }
    assert run.uri(run.step_dir(best)) in card
