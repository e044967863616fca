"""train_rl's own data pipeline decides where training ends; ``core.steps`` must predict it.

``make programs`` called MaxText 0.2.4's ``setup_configs_and_devices``, ``prepare_datasets`` and
``build_reward_fns`` (train_rl.py) with each data shape's rendered train argv, on parquet staged
where that argv points (``programs.data_shapes``): every batch train_rl would hand Tunix was
counted. rlpipe's step rule, given the same request and the same rows, must say the same: the
batches, MaxText's ``train_steps`` (Tunix's ``max_steps``), and so the final step. Also: the
user's reward functions load through MaxText's own loader and score as their file says, the
built-in ones are the three rlpipe names, and the chat template reaches the prompts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from programs.data_shapes import SHAPES, DataShape
from rlpipe.core import staging, steps
from tests.harness.programs import result

BY_NAME = {s.name: s for s in SHAPES}


def _ran(shape: DataShape) -> dict[str, Any]:
    ran: dict[str, Any] = result("train_data")["shapes"][shape.name]
    assert "error" not in ran, (
        f"train_rl's data pipeline failed on {shape.name}: {ran['error']}\n{ran.get('traceback')}"
    )
    return ran


def _examples(shape: DataShape) -> int:
    """Rows whose prompt fits (the long ones are long by construction; see the premise test)."""
    return shape.rows - shape.long_prompts


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_the_premise_long_prompts_are_long_and_short_ones_fit(shape: DataShape) -> None:
    ran = _ran(shape)
    bound, tokens = ran["max_prefill_predict_length"], ran["prompt_tokens"]
    long = set(shape.long_rows())
    assert [i for i, n in enumerate(tokens) if n > bound] == sorted(long), (bound, tokens)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_steps_predicts_maxtexts_batches_and_max_steps(shape: DataShape) -> None:
    ran, predicted = _ran(shape), steps.training_steps(shape.request())
    assert ran["batch_sizes"] in ([], [predicted.batch_size])  # drop_remainder: only full batches
    assert predicted.batches(_examples(shape)) == ran["train_batches"]
    assert predicted.max_steps == ran["train_steps"]
    assert predicted.num_iterations == ran["num_iterations"]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_steps_predicts_the_final_step_from_maxtexts_numbers(shape: DataShape) -> None:
    """Tunix's loop (one outer step of num_iterations updates per batch, max_steps checked after
    each; maxtext_facts.yaml end_rule) over the batches and max_steps MaxText computed."""
    ran = _ran(shape)
    batches, max_steps, iterations = ran["train_batches"], ran["train_steps"], ran["num_iterations"]
    tunix_final = min(batches, max(1, math.ceil(max_steps / iterations))) * iterations if batches else 0
    assert steps.training_steps(shape.request()).final_with_examples(_examples(shape)) == tunix_final


def test_the_shapes_cover_a_short_split_dropped_prompts_epochs_and_iterations() -> None:
    """Each shape does what its name says in MaxText's own numbers (not a shape that proves nothing)."""
    short, dropped = _ran(BY_NAME["short-split"]), _ran(BY_NAME["long-prompts-dropped"])
    epochs, fraction = _ran(BY_NAME["three-epochs"]), _ran(BY_NAME["fraction-and-iterations"])
    assert short["train_batches"] < short["train_steps"]  # the split ended first
    long_questions = {
        BY_NAME["long-prompts-dropped"].train_table()["question"][i]
        for i in BY_NAME["long-prompts-dropped"].long_rows()
    }
    assert long_questions and not long_questions & set(dropped["train_questions"])
    assert epochs["train_batches"] * 3 > BY_NAME["three-epochs"].rows  # batches came round again
    assert fraction["num_iterations"] == 2 and fraction["train_batches"] * 2 == fraction["train_steps"]


def test_a_users_reward_functions_load_through_maxtexts_loader_and_score_as_written() -> None:
    shape = BY_NAME["custom-reward"]
    ran, req = _ran(shape), shape.request()
    assert req.rewards is not None
    loaded = ran["reward_functions"]
    assert [f["name"] for f in loaded] == list(req.rewards.functions)
    assert {f["file"].rsplit("/fs", 1)[1] for f in loaded} == {staging.user_file_path("rewards")}
    # examples/rewards/exact_match_length.py: 1.0 for the accepted answer between <answer> tags, else
    # 0.0; -0.001 per character past 400 (the second completion has 500 and no tags).
    assert ran["scores"] == {"exact_match": [1.0, 0.0], "length_penalty": [0.0, -0.1]}


def test_without_rewards_maxtext_uses_the_three_built_in_functions_rlpipe_names() -> None:
    ran = _ran(BY_NAME["short-split"])
    assert tuple(f["name"] for f in ran["reward_functions"]) == staging.BUILTIN_REWARDS


def test_the_chat_template_reaches_the_prompts() -> None:
    ran = _ran(BY_NAME["short-split"])
    prompt, template, tokens = ran["first_prompt"], ran["template"], ran["special_tokens"]
    system = template["SYSTEM_PROMPT"].format(**tokens)
    question = next(q for q in BY_NAME["short-split"].train_table()["question"] if q in prompt)
    # the fixture tokenizer's Gemma-style chat template around MaxText's data template
    assert (
        prompt
        == f"<bos><start_of_turn>user\n{template['TEMPLATE'].format(system_prompt=system, question=question)}<end_of_turn>\n<start_of_turn>model\n"
    )
    assert "{" not in system and tokens["reasoning_start_token"] in system


def test_the_internal_functions_called_are_where_the_fixture_pins_them() -> None:
    pinned = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "fixtures" / "maxtext_internals.yaml").read_text()
    )
    assert result("train_data")["internals"] == pinned
