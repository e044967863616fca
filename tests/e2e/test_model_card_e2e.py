"""Issue 26 end to end on the local stack: a run held back by its quality gate, promoted with
`rlpipe promote`'s call, exported and published to the Hub double; the card the real client reads
back says it was promoted past the gate, with the threshold, the measured value, who and why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import HfApi, ModelCard

from tests.e2e.test_e2e import Local, faults, local  # noqa: F401
from tests.harness.patience import wait_until

pytestmark = pytest.mark.slow


def test_a_model_published_after_a_promote_says_it_was_promoted_past_its_failed_gate(
    local: Local, faults: Any
) -> None:
    from rlpipe.cli.runs import call_stage

    faults([])
    repo = f"rlpipe-demo/e2e-{os.urandom(4).hex()}"  # an organisation the default allowlist publishes to
    run_id = local.submit(local.request(gate={"min_post_mean_reward": 0.99}, publish={"repo": repo}))
    assert local.wait(run_id).state == "gated"
    reason = "reviewed the samples by hand: ship it"
    call_stage(local.settings, {"op": "promote", "run_id": run_id, "by": "alice", "reason": reason})
    record = local.wait(run_id, expected=30)
    assert record.state == "succeeded", record.failure
    sha, final, post = record.lineage.hf_sha, record.lineage.final_step, record.results["post"]
    assert sha and final

    api = HfApi(endpoint=os.environ["HF_ENDPOINT"], token="local-read-token")
    card = ModelCard.load(Path(api.hf_hub_download(repo, "README.md", revision="main")))
    top = card.text.split("## Base model")[0]
    assert f"# {repo.split('/')[1]}" in top and "**Promoted past its quality gate.**" in top
    override = record.gate.override if record.gate else None
    assert override is not None and override.by == "alice"
    assert (
        "did **not** pass" in top and f'alice promoted it anyway at {override.at}, because: "{reason}"' in top
    )
    assert "`min_post_mean_reward`: post-training mean reward at least 0.99" in card.text
    assert f"post mean_reward {post['mean_reward']:.4f} below min_post_mean_reward 0.99" in card.text
    # The base model on the Hub double has `pipeline_tag: image-text-to-text` in its card.
    assert card.data.pipeline_tag == "image-text-to-text" and f"base model's card at {sha[:12]}" in card.text
    assert "promoted-past-gate" in (card.data.tags or [])
    results = {r.metric_type: r for r in card.data.eval_results or []}
    assert results["accuracy"].metric_value == round(post["accuracy"], 4)
    assert (results["accuracy"].dataset_type, results["accuracy"].dataset_split) == ("openai/gsm8k", "test")
    bucket = local.settings.artifacts_bucket
    assert f"gs://{bucket}/runs/{run_id}/trained/rl/checkpoints/actor/{final}/" in card.text
    assert "local-write-token" not in card.content
    # The data it trained and was evaluated on, at the commits plan pinned (issue 27).
    data = record.lineage.data or {}
    train_sha, eval_sha = data["train"]["sha"], data["eval"]["sha"]
    assert card.data.datasets == ["openai/gsm8k"]
    assert f"https://huggingface.co/datasets/openai/gsm8k/tree/{train_sha}" in card.text
    assert results["accuracy"].dataset_revision == eval_sha
    assert "match_format_exactly" in card.text, "the built-in rewards, by name"
    # The run's page, kept beside its ledger, linked from the card, and rewritten when the run
    # ended: it names the commit the model was published at (issue 26).
    page = f"gs://{local.settings.state_bucket}/runs/{run_id}/report.html"
    assert f"| `{page}` |" in card.text
    state = local.client.bucket(local.settings.state_bucket)
    commit = record.lineage.published_commit
    assert commit

    def page_names_the_commit() -> bool:  # rewritten just after the ledger records the end
        return commit in state.blob(f"runs/{run_id}/report.html").download_as_bytes().decode()

    wait_until(page_names_the_commit, 10, what="the run's page rewritten with how it ended")
    html = state.blob(f"runs/{run_id}/report.html").download_as_bytes().decode()
    assert html.startswith("<!DOCTYPE html>") and run_id in html
