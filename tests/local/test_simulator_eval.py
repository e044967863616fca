"""The simulated train_rl's evaluation lines count the examples MaxText 0.2.4 evaluates.

train_rl.py:380-397 (maxtext-v0.2.4): the test set is batched by ``eval_batch_size``, or by
``batch_size`` when that is 0 or less (rl.yml:126 sets -1); it is sliced from
``test_batch_start_index`` (rl.yml:127, 0) up to ``num_test_batches × that size``, and the last
batch is dropped when incomplete. evaluate_rl counts one per example (evaluate_rl.py:310). The
expected totals below are worked out from that reading, by hand, for each case.
"""

from __future__ import annotations

import re

import pytest

from tests.core.test_maxtext_facts import _train

TOTAL = re.compile(
    r"(Pre RL Training|Post RL Training|Intermediate Eval \(step=\d+\)): corr=\S+, total=(\d+),"
)


def _totals(extra: list[str]) -> dict[str, set[int]]:
    """Each kind of evaluation line the simulated program printed, with the totals it gave."""
    found: dict[str, set[int]] = {}
    for line in _train(["num_batches=20", "eval_interval=10", *extra]).lines:
        if m := TOTAL.search(line):
            kind = m.group(1).split(" (")[0]
            found.setdefault(kind, set()).add(int(m.group(2)))
    return found


@pytest.mark.parametrize(
    ("extra", "total"),
    [
        # batch_size=4 (the helper's, as the v6e-32 preset), rl.yml's 5 test batches of 4.
        ([], 20),
        (["eval_batch_size=-1"], 20),
        (["eval_batch_size=0"], 20),
        # The reason eval_batch_size exists: 5 batches of 32, not of 4.
        (["eval_batch_size=32"], 160),
        (["eval_batch_size=32", "num_test_batches=2"], 64),
        # Slice [8:160] holds 152 examples: 4 whole batches of 32, the fifth is dropped.
        (["eval_batch_size=32", "test_batch_start_index=8"], 128),
        # Slice [30:20] is empty.
        (["test_batch_start_index=30"], 0),
    ],
)
def test_every_evaluation_counts_the_examples_train_rl_evaluates(extra: list[str], total: int) -> None:
    totals = _totals(extra)
    assert set(totals) == {"Pre RL Training", "Intermediate Eval", "Post RL Training"}
    assert all(found == {total} for found in totals.values()), totals


def test_an_evaluation_of_no_example_scores_nothing() -> None:
    """evaluate_rl.py:320-327: with total 0 every figure is 0, the mean reward 0.0."""
    lines = [line for line in _train(["test_batch_start_index=30"]).lines if "total=0," in line]
    assert lines and all(
        "corr=0, total=0, accuracy=0%" in line and line.endswith("mean_reward=0.0000") for line in lines
    )


def test_no_test_batches_prints_no_evaluation() -> None:
    assert _totals(["eval_batch_size=32", "num_test_batches=0"]) == {}
