"""The training data the tier hands train_rl's own data pipeline: requests and their staged splits.

Each shape is a request (rendered by rlpipe like any other) and the rows of its staged train and
eval splits. The shapes are chosen so that each exercises one thing MaxText does to the data
before Tunix sees a batch (``core.steps`` predicts all of them): a split shorter than the config
keeps, prompts too long for ``max_prefill_predict_length``, several epochs, and a fraction with
several iterations per batch. Long prompts are long by construction (hundreds of words against a
256-token bound; the tier also records each prompt's token count so a test can check the premise).

Rows are GSM8K-shaped (``question``, and an ``answer`` ending in ``#### N``), as the staged
``openai/gsm8k`` parquet is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from programs.cases import EXAMPLES, PRESET_MODEL
from rlpipe.core.request import Request, load_request
from rlpipe.core.request.policy import Policy

LONG_WORDS = 400  # words in a long prompt: well past 256 tokens whatever the tokenizer


@dataclass(frozen=True)
class DataShape:
    name: str
    training: dict[str, Any]
    overrides: dict[str, Any]
    rows: int  # train split rows
    long_prompts: int = 0  # how many of them are long (every third row, from the first)
    eval_rows: int = 12
    example: str | None = None  # an example request to start from instead of a bare preset

    def request(self) -> Request:
        if self.example is not None:
            doc = yaml.safe_load((EXAMPLES / self.example).read_text())
        else:
            doc = {**PRESET_MODEL, "preset": "v6e-32"}
        doc.setdefault("training", {}).update(self.training)
        doc.setdefault("maxtext_overrides", {}).update(self.overrides)
        source = str(EXAMPLES / (self.example or "shape.yaml"))
        return load_request(yaml.safe_dump(doc), source=source, policy=Policy(allow_user_code=True))

    def long_rows(self) -> list[int]:
        return [i for i in range(self.rows) if i % 3 == 0][: self.long_prompts]

    def train_table(self) -> dict[str, list[str]]:
        long = set(self.long_rows())
        return table(self.rows, long, seed=0)

    def eval_table(self) -> dict[str, list[str]]:
        return table(self.eval_rows, set(), seed=1)


def question(i: int, seed: int) -> tuple[str, int]:
    a, b = 3 + (7 * i + seed) % 60, 2 + (11 * i + 3 * seed) % 40
    names = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fay"]
    who = names[(i + seed) % len(names)]
    return f"{who} has {a} coins and finds {b} more. How many coins does {who} have now?", a + b


def table(rows: int, long: set[int], seed: int) -> dict[str, list[str]]:
    questions, answers = [], []
    for i in range(rows):
        text, total = question(i, seed)
        if i in long:
            text = " ".join([text] * (LONG_WORDS // len(text.split()) + 1))
        questions.append(text)
        answers.append(f"Add the two numbers. #### {total}")
    return {"question": questions, "answer": answers}


def _micro(batch_size: int) -> dict[str, Any]:
    """train_micro_batch_size must divide batch_size; it changes no count (docs: core.steps)."""
    return {"batch_size": batch_size, "train_micro_batch_size": batch_size}


SHAPES: tuple[DataShape, ...] = (
    # 14 rows, the config keeps 10 × 4 = 40: the split ends first (14 // 4 = 3 batches).
    DataShape("short-split", {"num_batches": 10, **_micro(4)}, {}, rows=14),
    # 12 rows of which 4 are too long: 8 prompts reach the batcher (8 // 2 = 4 batches).
    DataShape("long-prompts-dropped", {"num_batches": 8, **_micro(2)}, {}, rows=12, long_prompts=4),
    # 10 rows repeated 3 times: 30 // 3 = 10 batches, below max_steps 6 × 3 = 18.
    DataShape("three-epochs", {"num_batches": 6, **_micro(3)}, {"num_epoch": 3}, rows=10),
    # train_fraction keeps int(10 × 2 × 0.5) = 10 of 50 rows: 5 batches of 2 iterations each.
    DataShape(
        "fraction-and-iterations",
        {"num_batches": 10, **_micro(2)},
        {"train_fraction": 0.5, "rl.num_iterations": 2},
        rows=50,
    ),
    # The custom-reward example as written (its reward file is staged where train_rl reads it).
    DataShape(
        "custom-reward",
        {"num_batches": 4, **_micro(2)},
        {},
        rows=9,
        example="gemma4-26b-v6e-32-custom-reward.yaml",
    ),
)
