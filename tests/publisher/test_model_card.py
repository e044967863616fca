"""The model card tells the whole story (issues 26, 27): a model shipped past its failed quality gate
says so (thresholds, values, who, why); train_rl's numbers carry the names and units people read
and reach the Hub as evaluation results (``model-index``) on the dataset and split train_rl read;
the task is the base card's at the pinned sha, read on the Hub; the title is the repository's; the
run's checkpoints and export are linked.

Facts come from a real ``RunRecord`` and a validated request through ``control.lifecycle.publishing``, the
way the stage function gathers them; the card is parsed with ``huggingface_hub``'s ``ModelCard``
and ``ModelCardData``, pushed to the Hub double and read back with the real client.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.repocard_data import model_index_to_eval_results

from rlpipe.control.adapters import hub_datasets
from rlpipe.control.lifecycle import data_pins, publishing, user_files
from rlpipe.core import layout
from rlpipe.core.failures import TransientFailure
from rlpipe.core.request import Request, validate_request
from rlpipe.core.request.policy import Policy
from rlpipe.core.runs.record import GateOverride, GateRecord, RunRecord, Source
from rlpipe.core.staging import BUILTIN_REWARDS
from rlpipe.local.hub_double import HubDouble, HubFile
from rlpipe.publisher.card import render_card
from tests.conftest import Buckets, minimal_request

BASE = "google/gemma-4-26b-a4b-it"
SHA = "0123456789abcdef0123456789abcdef01234567"
REPO = "rlpipe-demo/gemma-4-26b-grpo"  # an organisation the default allowlist publishes to
BUCKET = "rlpipe-artifacts"
RUN = "rcard00000001"
TOKEN = "hf_" + "CardTestWriteTokenForTheHubDouble" + "x1"
PRE = {
    "corr": 3,
    "total": 8,
    "accuracy": 37.5,
    "partial_accuracy": 40.0,
    "format_accuracy": 90.0,
    "mean_reward": 0.12,
}
POST = {
    "corr": 5,
    "total": 8,
    "accuracy": 62.5,
    "partial_accuracy": 70.0,
    "format_accuracy": 100.0,
    "mean_reward": 0.5627,
}
FAILED = "post mean_reward 0.5627 below min_post_mean_reward 0.99"  # the gate's own words
ALICE = GateOverride(
    by="alice",
    at="2026-12-04T13:00:00.000000Z",
    reason="reviewed 50 samples by hand: the answers are right, the reward function is too strict",
    caller="rlpipe-operator@p.iam.gserviceaccount.com",
)


def _run(
    *,
    gate: dict[str, Any] | None = None,
    verdict: GateRecord | None = None,
    dataset: dict[str, Any] | None = None,
) -> tuple[RunRecord, Request]:
    """A run that trained and is about to publish, as its ledger holds it."""
    doc = minimal_request(publish={"repo": REPO}, **({"gate": gate} if gate else {}))
    if dataset:
        doc["dataset"] = dataset
    req = validate_request(doc)
    record = RunRecord(
        run_id=RUN,
        key="k",
        source=Source(kind="cli"),
        request=req.model_dump(mode="json"),
        state="publishing",
    )
    record.lineage.hf_sha = SHA
    record.lineage.final_step = 50
    record.results = {"pre": dict(PRE), "post": dict(POST), "intermediate": []}
    record.gate = verdict
    if verdict is not None and verdict.override is not None:
        record.lineage.promoted = verdict.override
    return record, req


def _card(record: RunRecord, req: Request, **base: str) -> str:
    facts = publishing.card_facts(record, req, {"license": "gemma", **base}, BUCKET)
    return render_card(facts)


def _promoted() -> str:
    record, req = _run(
        gate={"min_post_mean_reward": 0.99},
        verdict=GateRecord(passed=False, reasons=[FAILED], override=ALICE),
    )
    return _card(record, req, pipeline_tag="image-text-to-text")


def _header(text: str) -> dict[str, Any]:
    """The YAML between the first two ``---`` lines, read as the Hub reads YAML (no rlpipe code)."""
    _, header, _ = text.split("---\n", 2)
    parsed: dict[str, Any] = yaml.safe_load(header)
    return parsed


def test_a_promoted_model_says_before_anything_else_that_it_did_not_pass_its_gate() -> None:
    text = _promoted()
    top = text.split("## Base model")[0]
    assert "**Promoted past its quality gate.**" in top and "did **not** pass" in top
    assert 'alice promoted it anyway at 2026-12-04T13:00:00.000000Z, because: "reviewed 50 samples' in top
    gate = text.split("## Quality gate")[1].split("## Evaluation")[0]
    assert "`min_post_mean_reward`: post-training mean reward at least 0.99" in gate, "the threshold"
    assert f"- {FAILED}" in gate, "the measured value against it"
    assert "alice (verified caller `rlpipe-operator@p.iam.gserviceaccount.com`)" in gate, (
        "who, as Google saw them"
    )
    assert "> reviewed 50 samples by hand: the answers are right, the reward function is too strict" in gate
    data = ModelCard(text).data
    assert isinstance(data, ModelCardData) and "promoted-past-gate" in (data.tags or [])


def test_a_model_that_passed_its_gate_says_so_and_nothing_of_a_promotion() -> None:
    record, req = _run(
        gate={"min_reward_gain": 0.1},
        verdict=GateRecord(passed=True, reasons=["mean_reward gain 0.4427 meets min_reward_gain 0.1"]),
    )
    text = _card(record, req)
    assert "This model passed the quality gate its request set." in text
    assert "`min_reward_gain`: mean reward gain over pre-training at least 0.1" in text
    assert "romoted" not in text and "promoted-past-gate" not in (ModelCard(text).data.tags or [])
    plain, req = _run()  # no gate asked for: no gate section at all
    assert "## Quality gate" not in _card(plain, req)


def test_a_gate_that_could_not_be_evaluated_is_not_called_failed_and_the_lineage_names_the_promoter() -> None:
    """The override is read from the lineage too (``lineage.promoted``), where `rlpipe promote` records it."""
    record, req = _run(
        gate={"min_post_accuracy": 70},
        verdict=GateRecord(passed=None, reasons=["min_post_accuracy needs the post-training accuracy"]),
    )
    record.lineage.promoted = ALICE
    text = _card(record, req)
    assert "could not be evaluated" in text.split("## Base model")[0] and "did **not** pass" not in text
    assert "post-training accuracy at least 70%" in text and "- min_post_accuracy needs" in text


def test_metrics_have_the_names_and_units_people_read_and_counts_are_not_metrics() -> None:
    text = _promoted()
    evaluation = text.split("## Evaluation")[1].split("## Files")[0]
    assert "| Accuracy | 37.5% | 62.5% | +25 pp |" in evaluation
    assert "| Partial accuracy | 40% | 70% | +30 pp |" in evaluation
    assert "| Format accuracy | 90% | 100% | +10 pp |" in evaluation
    assert "| Mean reward | 0.12 | 0.5627 | +0.4427 |" in evaluation
    names = [line.split("|")[1].strip() for line in evaluation.splitlines() if line.startswith("| ")]
    assert names == ["Metric", "Accuracy", "Partial accuracy", "Format accuracy", "Mean reward"], (
        "no corr, no total"
    )
    assert "MaxText `train_rl`'s own evaluation" in evaluation
    assert "the `test` split of [openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k)" in evaluation
    assert "(subset `main`): 8 examples." in evaluation


def test_the_results_are_a_model_index_of_task_dataset_split_and_metric() -> None:
    """What the Hub renders as evaluation results, read by huggingface_hub's own parser."""
    header = _header(_promoted())
    name, results = model_index_to_eval_results(header["model-index"])
    assert name == "gemma-4-26b-grpo"
    assert {(r.task_type, r.dataset_type, r.dataset_config, r.dataset_split) for r in results} == {
        ("text-generation", "openai/gsm8k", "main", "test")
    }
    assert {r.metric_type: r.metric_value for r in results} == {
        "accuracy": 62.5,  # in percent, as train_rl prints it and the name says
        "partial_accuracy": 70.0,
        "format_accuracy": 100.0,
        "mean_reward": 0.5627,
    }
    assert {r.metric_type: r.metric_name for r in results}["accuracy"] == "Accuracy (%)"
    assert header["datasets"] == ["openai/gsm8k"], "what it was trained on"


def test_an_evaluation_of_no_example_is_no_result() -> None:
    """train_rl prints 0% when it evaluated nothing (evaluate_rl.py:320-327): a table row, never a
    Hub evaluation result."""
    record, req = _run()
    record.results["post"] = {**POST, "corr": 0, "total": 0, "accuracy": 0, "mean_reward": 0.0}
    text = _card(record, req)
    assert "model-index" not in _header(text) and ModelCard(text).data.eval_results is None
    assert ": 0 examples." in text


@pytest.mark.parametrize(
    ("dataset_section", "dataset", "split", "held_out"),
    [
        ({}, "openai/gsm8k", "test", False),  # the presets: rl.yml:236-245
        (
            {"eval_repo": "acme/math-eval", "eval_split": "validation"},
            "acme/math-eval",
            "validation",
            False,
        ),
        ({"repo": "acme/math", "subset": None}, "acme/math", "test", False),  # no eval_repo: the train set
        (  # evaluated on itself: train_rl holds 5% of the train split out (train_rl.py:306-330)
            {"repo": "nvidia/OpenMathInstruct-2", "subset": None},
            "nvidia/OpenMathInstruct-2",
            "train",
            True,
        ),
    ],
    ids=["presets", "eval-dataset", "train-set", "held-out"],
)
def test_the_evaluation_set_is_the_one_train_rl_reads(
    dataset_section: dict[str, Any], dataset: str, split: str, held_out: bool
) -> None:
    record, req = _run(dataset=dataset_section)
    ev = publishing.card_facts(record, req, {"license": "gemma"}, BUCKET)["evaluation"]
    assert (ev["dataset"], ev["split"], ev["held_out"]) == (dataset, split, held_out)
    results = ModelCard(
        render_card(publishing.card_facts(record, req, {"license": "gemma"}, BUCKET))
    ).data.eval_results
    assert results, "every evaluation set is named in the model-index"
    assert {r.dataset_type for r in results} == {dataset}
    assert all(r.dataset_split and r.dataset_split.startswith(split) for r in results)
    assert all(("held out" in str(r.dataset_split)) == held_out for r in results)


def test_the_title_is_the_repositorys_name() -> None:
    text = _promoted()
    body = text.split("---\n", 2)[2]
    assert body.lstrip("\n").splitlines()[0] == "# gemma-4-26b-grpo"
    assert _header(text)["model-index"][0]["name"] == "gemma-4-26b-grpo"


def test_the_card_links_the_runs_checkpoints_and_export_in_gcs() -> None:
    files = _promoted().split("## Files and provenance")[1]
    assert f"| `gs://{BUCKET}/runs/{RUN}/trained/rl/checkpoints/actor/` |" in files
    assert f"| `gs://{BUCKET}/runs/{RUN}/trained/rl/checkpoints/actor/50/` |" in files, "the final step"
    assert f"| `gs://{BUCKET}/runs/{RUN}/hf/` |" in files
    assert f"`rlpipe report {RUN}`" in files
    assert "report.html" not in files, "no link to a page nobody wrote"


def test_the_card_links_the_runs_report_where_the_control_plane_keeps_it() -> None:
    """Issue 26: the run's page, kept in the state bucket (control.lifecycle.run_report), is linked."""
    from rlpipe.control.lifecycle.run_report import report_uri

    record, req = _run()
    uri = report_uri("rlpipe-state", RUN)
    assert uri == f"gs://rlpipe-state/runs/{RUN}/report.html"
    text = render_card(publishing.card_facts(record, req, {"license": "gemma"}, BUCKET, report=uri))
    [row] = [line for line in text.splitlines() if uri in line]
    assert row.startswith("| The run's report (one HTML page") and row.endswith(f"| `{uri}` |")


def test_without_the_base_cards_tag_the_card_says_text_generation_and_why() -> None:
    record, req = _run()
    source = {"pipeline_tag_source": "rlpipe's default: the base card at 0123456789ab names no pipeline_tag"}
    text = _card(record, req, **source)
    assert ModelCard(text).data.pipeline_tag == "text-generation"
    assert (
        "| Pipeline tag | `text-generation`, from rlpipe's default: the base card at 0123456789ab names no"
        in text
    )


def test_no_token_and_no_markup_from_a_promote_reaches_the_card() -> None:
    leaked = "hf_" + "PastedIntoTheReasonByMistake1234"
    override = GateOverride(
        by=f"alice {leaked}", at=ALICE.at, reason=f"token {leaked} <!-- the rest is hidden", caller=None
    )
    record, req = _run(
        gate={"min_post_mean_reward": 0.99},
        verdict=GateRecord(passed=False, reasons=[FAILED], override=override),
    )
    text = _card(record, req)
    assert leaked not in text and "[REDACTED]" in text
    assert "<!--" not in text and "&lt;!-- the rest is hidden" in text
    assert "## Files and provenance" in text  # nothing after the reason was swallowed


# ---- the data and the reward ------------------------------------------------------------------------

TRAIN_SHA = "a1" * 20
EVAL_SHA = "b2" * 20
# Plan's pins as the Hub (here: a resolver standing in for control.adapters.hub_datasets) gives them: one
# parquet file per split, with its size, and the example counts of the dataset card's dataset_info.
SIZES = {"train": 2_306_545, "test": 419_088, "validation": 98_304}
EXAMPLES: dict[str, int | None] = {"train": 7473, "test": 1319, "validation": None}
COMMITS = {"openai/gsm8k": TRAIN_SHA, "acme/math-eval": EVAL_SHA, "open-r1/OpenR1-Math-220k": TRAIN_SHA}
REWARD_FILE = """# Exact match, and a small penalty for length.


def exact_match(prompts, completions, answer, **kwargs):
    return [1.0 if c.strip() == a.strip() else 0.0 for c, a in zip(completions, answer)]


def length_penalty(prompts, completions, **kwargs):
    return [-0.001 * len(c) for c in completions]
"""
PROCESSOR_FILE = """def process_data(dataset_name, model_tokenizer, template_config, tmvp_config, x):
    return {"prompts": x["problem"], "question": x["problem"], "answer": x["solution"]}
"""
TEMPLATE_FILE = '{"SYSTEM_PROMPT": "Answer between {solution_start_token} and {solution_end_token}.", "TEMPLATE": "{system_prompt}\\n\\n{question}"}'


def _resolve(repo: str, revision: str, *, subset: str | None, splits: dict[str, str], **_: Any) -> Any:
    names = list(splits.values())
    return hub_datasets.PinnedDataset(
        repo=repo,
        revision=revision,
        sha=COMMITS[repo],
        subset=subset or "default",
        files={
            n: (
                hub_datasets.DataFile(
                    f"{subset or 'default'}/{n}-00000-of-00001.parquet", SIZES[n], "c3" * 32
                ),
            )
            for n in names
        },
        num_examples={n: EXAMPLES[n] for n in names},
        features={"question": "string", "answer": "string"},
        gated=False,
    )


def _pinned_run(
    *, dataset: dict[str, Any] | None = None, own: dict[str, str] | None = None
) -> tuple[RunRecord, Request, dict[str, str]]:
    """A run whose datasets plan pinned (``data_pins.pin``) and whose own files (role → text)
    intake checked, copied and pinned by sha256 (``user_files``), as the ledger then holds it.
    Returns the record, the ledger's request and each file's sha256."""
    own = own or {}
    doc = minimal_request(publish={"repo": REPO})
    if dataset:
        doc["dataset"] = dataset
    if "rewards" in own:
        doc["rewards"] = {"file": {"inline": own["rewards"]}, "functions": ["exact_match", "length_penalty"]}
    if "processor" in own:
        doc.setdefault("dataset", {})["processor"] = {"inline": own["processor"]}
    if "chat_template" in own:
        doc["chat_template"] = {"inline": own["chat_template"]}
    req = validate_request(doc, Policy(allow_user_code=True))
    files = user_files.gather(req, read_relative=None, read_gcs=None)  # checked as intake checks them
    run = layout.RunLayout(BUCKET, RUN)
    copied = {
        role: user_files.Copied(
            role,
            run.uri(run.user_file(role, user_files.ROLES[role][1])),
            hashlib.sha256(data).hexdigest(),
            len(data),
            "inline in the request",
        )
        for role, data in files.items()
    }
    record, _ = _run()
    record.lineage.data = data_pins.pin(req, resolve=_resolve)
    record.lineage.inputs = {role: c.record(req) for role, c in copied.items()} or None
    pinned = user_files.pinned_request(req, copied)
    record.request = pinned.model_dump(mode="json")
    return record, Request.model_validate(record.request), {r: c.sha256 for r, c in copied.items()}


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table(section: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell (pipes inside cells are escaped by the card)."""
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def test_the_header_lists_the_datasets_and_the_body_names_each_at_its_pinned_commit() -> None:
    record, req, _ = _pinned_run(dataset={"eval_repo": "acme/math-eval", "eval_split": "validation"})
    text = _card(record, req)
    data = ModelCard(text).data
    assert data.datasets == ["openai/gsm8k", "acme/math-eval"], "dataset ids, training first"
    assert _header(text)["datasets"] == ["openai/gsm8k", "acme/math-eval"]
    rows = _table(_section(text, "Training data"))
    assert rows["Dataset"] == [
        f"[openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k/tree/{TRAIN_SHA})",
        f"[acme/math-eval](https://huggingface.co/datasets/acme/math-eval/tree/{EVAL_SHA})",
    ]
    assert rows["Commit (pinned)"] == [f"`{TRAIN_SHA}`", f"`{EVAL_SHA}`"], "full shas"
    assert rows["Requested revision"] == ["`main`", "`main`"]
    assert rows["Subset"] == ["`main`", "`default`"], "the eval dataset in its own (default) config"
    assert rows["Split"] == ["`train`", "`validation`"]
    assert rows["Files"] == ["1 file, 2,306,545 bytes", "1 file, 98,304 bytes"]
    assert rows["Examples"] == ["7,473", "not stated by its card"]
    assert "held out" not in _section(text, "Training data")


def test_the_model_index_names_the_evaluation_commit() -> None:
    """``dataset.revision`` (EvalResult.dataset_revision): the commit train_rl evaluated on, read
    back by huggingface_hub's own parser."""
    record, req, _ = _pinned_run(dataset={"eval_repo": "acme/math-eval", "eval_split": "validation"})
    text = _card(record, req)
    results = ModelCard(text).data.eval_results or []
    assert len(results) == 4
    assert {(r.dataset_type, r.dataset_split, r.dataset_revision) for r in results} == {
        ("acme/math-eval", "validation", EVAL_SHA)
    }
    assert _header(text)["model-index"][0]["results"][0]["dataset"]["revision"] == EVAL_SHA
    # The same dataset for both: one id in the header; the test split at the one commit.
    record, req, _ = _pinned_run()
    text = _card(record, req)
    assert ModelCard(text).data.datasets == ["openai/gsm8k"]
    assert {r.dataset_revision for r in ModelCard(text).data.eval_results or []} == {TRAIN_SHA}
    assert _table(_section(text, "Training data"))["Split"] == ["`train`", "`test`"]


def test_a_held_out_evaluation_is_said_to_be_held_out_of_the_training_split() -> None:
    record, req, _ = _pinned_run(dataset={"repo": "open-r1/OpenR1-Math-220k", "subset": None})
    assert set(record.lineage.data or {}) == {"train"}, "plan pins no evaluation split"
    text = _card(record, req)
    section = _section(text, "Training data")
    assert "5% held out of the training split by train_rl" in section
    rows = _table(section)
    assert rows[""] == ["Training"], "no evaluation column"
    assert rows["Subset"] == ["`default`"] and rows["Commit (pinned)"] == [f"`{TRAIN_SHA}`"]
    assert ModelCard(text).data.datasets == ["open-r1/OpenR1-Math-220k"]
    assert {r.dataset_revision for r in ModelCard(text).data.eval_results or []} == {TRAIN_SHA}


def test_a_custom_reward_is_named_with_the_files_full_sha256_and_the_runs_copy() -> None:
    own = {"rewards": REWARD_FILE, "processor": PROCESSOR_FILE, "chat_template": TEMPLATE_FILE}
    record, req, hashes = _pinned_run(own=own)
    assert hashes["rewards"] == hashlib.sha256(REWARD_FILE.encode()).hexdigest()
    text = _card(record, req)
    reward = _section(text, "Reward")
    assert (
        "The request's own reward functions scored the rollouts: `exact_match`, `length_penalty`." in reward
    )
    rows = _table(reward)
    assert rows["Reward functions"] == ["`exact_match`, `length_penalty`"]
    assert rows["Reward file sha256"] == [f"`{hashes['rewards']}`"], "the full sha256"
    assert rows["Reward file (the run's copy)"] == [f"`gs://{BUCKET}/runs/{RUN}/inputs/rewards.py`"]
    assert rows["Dataset processor sha256"] == [
        f"`{hashes['processor']}`, `gs://{BUCKET}/runs/{RUN}/inputs/processor.py`"
    ]
    assert rows["Chat template sha256"] == [
        f"`{hashes['chat_template']}`, `gs://{BUCKET}/runs/{RUN}/inputs/chat_template.json`"
    ]
    assert not any(name in reward for name in BUILTIN_REWARDS), "the built-in ones did not run"


def test_the_reward_is_read_from_the_ledgers_request_when_intake_recorded_no_inputs() -> None:
    """A ledger without ``lineage.inputs``: the request intake rewrote names the copy and hash."""
    record, req, hashes = _pinned_run(own={"rewards": REWARD_FILE})
    record.lineage.inputs = None
    rows = _table(_section(_card(record, req), "Reward"))
    assert rows["Reward file sha256"] == [f"`{hashes['rewards']}`"]
    assert rows["Reward file (the run's copy)"] == [f"`gs://{BUCKET}/runs/{RUN}/inputs/rewards.py`"]


def test_without_reward_functions_of_its_own_the_card_names_maxtexts_built_in_ones() -> None:
    record, req, _ = _pinned_run()
    reward = _section(_card(record, req), "Reward")
    assert reward.strip() == (
        "MaxText's built-in rewards scored the rollouts: `match_format_exactly`, "
        "`match_format_approximately`, `check_numbers` (maxtext 0.2.4 train_rl.py:420-424)."
    )
    assert "sha256" not in reward and "processor" not in reward.lower()


def test_a_run_whose_data_was_not_pinned_says_so_and_claims_no_revision() -> None:
    record, req = _run()  # a ledger from before plan pinned datasets
    text = _card(record, req)
    rows = _table(_section(text, "Training data"))
    assert rows["Commit (pinned)"] == ["not pinned", "not pinned"]
    assert rows["Dataset"][0] == "[openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k)"
    assert "pinned before training began" not in text
    assert {r.dataset_revision for r in ModelCard(text).data.eval_results or []} == {None}


# ---- the Hub (double), read and written by the real client ------------------------------------------


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    yield server
    server.stop()


@pytest.fixture
def on_hub(hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> HubDouble:
    """The control plane's Hub is the double (the stage function's HF_ENDPOINT); uploads over LFS."""
    import huggingface_hub.constants

    for name, value in hub.client_constants().items():  # ENDPOINT, and the template downloads format
        monkeypatch.setattr(huggingface_hub.constants, name, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.delenv("RLPIPE_HF_TOKEN", raising=False)
    return hub


def _card_file(header: str) -> HubFile:
    return HubFile.of("README.md", f"---\n{header}---\n\n# A base model\n")


def test_the_pipeline_tag_is_the_base_cards_at_the_pinned_sha_not_the_branch_head(on_hub: HubDouble) -> None:
    repo = f"google/base-{os.urandom(3).hex()}"
    pinned = on_hub.add_repo(
        repo, {"README.md": _card_file("license: gemma\npipeline_tag: image-text-to-text\n")}
    )
    head = on_hub.push(repo, {"README.md": _card_file("license: gemma\npipeline_tag: text-generation\n")})
    assert publishing.base_pipeline_tag(repo, pinned, timeout=10) == {
        "pipeline_tag": "image-text-to-text",
        "pipeline_tag_source": f"the base model's card at {pinned[:12]}",
    }
    assert publishing.base_pipeline_tag(repo, head, timeout=10)["pipeline_tag"] == "text-generation"


def test_a_base_card_without_a_tag_or_without_a_card_leaves_the_default_and_says_why(
    on_hub: HubDouble,
) -> None:
    repo = f"google/untagged-{os.urandom(3).hex()}"
    untagged = on_hub.add_repo(repo, {"README.md": _card_file("license: gemma\n")})
    gone = on_hub.push(repo, {"README.md": None})
    found = publishing.base_pipeline_tag(repo, untagged, timeout=10)
    assert "pipeline_tag" not in found and "names no pipeline_tag" in found["pipeline_tag_source"]
    missing = publishing.base_pipeline_tag(repo, gone, timeout=10)
    assert "pipeline_tag" not in missing and "could not be read (HTTP 404)" in missing["pipeline_tag_source"]


def test_a_hub_that_fails_now_is_transient_not_a_card_without_its_tag(on_hub: HubDouble) -> None:
    repo = f"google/flaky-{os.urandom(3).hex()}"
    sha = on_hub.add_repo(repo, {"README.md": _card_file("pipeline_tag: image-text-to-text\n")})
    on_hub.fail(f"/{repo}/resolve/", 503)
    with pytest.raises(TransientFailure, match="503"):
        publishing.base_pipeline_tag(repo, sha, timeout=10)
    assert publishing.base_pipeline_tag(repo, sha, timeout=10)["pipeline_tag"] == "image-text-to-text"


def test_the_card_pushed_to_the_hub_reads_back_with_the_same_metadata(
    on_hub: HubDouble, tmp_path: Path
) -> None:
    """The Hub double validates the header on commit (validate-yaml) and serves it back; the real
    client parses the same metadata and the same evaluation results."""
    text = _promoted()
    api = HfApi(endpoint=on_hub.url, token=TOKEN)
    repo = f"acme/card-{os.urandom(3).hex()}"
    api.create_repo(repo)
    api.upload_file(path_or_fileobj=text.encode(), path_in_repo="README.md", repo_id=repo)
    back = ModelCard.load(api.hf_hub_download(repo, "README.md", cache_dir=tmp_path))
    assert back.data.to_dict() == ModelCard(text).data.to_dict()
    written = ModelCard(text).data.eval_results or []
    assert len(written) == 4 and all(isinstance(r, EvalResult) for r in written)
    assert back.data.eval_results == written
    name, results = model_index_to_eval_results(_header(back.content)["model-index"])
    assert (name, results) == ("gemma-4-26b-grpo", written)
    assert (back.data.pipeline_tag, back.data.base_model, back.data.license) == (
        "image-text-to-text",
        BASE,
        "gemma",
    )


def test_publish_context_tells_a_promoted_runs_story_from_the_ledger_the_pinned_card_and_the_hub(
    on_hub: HubDouble, buckets: Buckets
) -> None:
    """The stage function's path: license from the card convert pinned in GCS (which names no
    task), pipeline_tag from the same card on the Hub at the pinned sha, the rest from the ledger."""
    from rlpipe.control.adapters.blobstore import BlobStore
    from rlpipe.core.manifests import RenderContext

    base = f"google/base-{os.urandom(3).hex()}"
    sha = on_hub.add_repo(
        base, {"README.md": _card_file("license: gemma\npipeline_tag: image-text-to-text\n")}
    )
    on_hub.push(base, {"README.md": _card_file("license: gemma\npipeline_tag: text-classification\n")})
    record, _ = _run(
        gate={"min_post_mean_reward": 0.99},
        verdict=GateRecord(passed=False, reasons=[FAILED], override=ALICE),
    )
    record.request["hf_repo"] = base
    record.lineage.hf_sha = sha
    req = Request.model_validate(record.request)
    artifacts = BlobStore(buckets.client, buckets.artifacts)
    converted = f"cache/maxtext/c1/{RUN}-a1/"
    artifacts.client.bucket(buckets.artifacts).blob(f"{converted}hf-source/README.md").upload_from_string(
        "---\nlicense: gemma\n---\n\n# pinned copy\n"
    )
    ctx = RenderContext(run_id=RUN, bucket=buckets.artifacts, hf_revision=sha, converted_dir=converted)

    card = ModelCard(publishing.publish_context(artifacts, record, req, ctx).model_card)
    assert (card.data.license, card.data.pipeline_tag) == ("gemma", "image-text-to-text"), (
        "the pinned sha's tag"
    )
    assert f"`image-text-to-text`, from the base model's card at {sha[:12]}" in card.text
    assert "**Promoted past its quality gate.**" in card.text and "promoted-past-gate" in (
        card.data.tags or []
    )
    assert f"gs://{buckets.artifacts}/runs/{RUN}/trained/rl/checkpoints/actor/50/" in card.text
    assert {r.metric_type: r.metric_value for r in card.data.eval_results or []}["accuracy"] == 62.5
