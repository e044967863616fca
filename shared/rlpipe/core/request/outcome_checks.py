"""Cross-field rules of the optional ``gate`` and ``publish`` sections.

Kept apart from ``checks`` because they are about what happens after training (docs/outcomes.md):
a gate must have something to compare, and a publish must never borrow the read token's Secret.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rlpipe.core import steps
from rlpipe.core.problems import Problem

GATE_THRESHOLDS = ("min_post_mean_reward", "min_reward_gain", "min_post_accuracy")


def gate_problems(doc: dict[str, Any]) -> Iterator[Problem]:
    gate = doc.get("gate")
    if not isinstance(gate, dict):
        return
    if all(gate.get(name) is None for name in GATE_THRESHOLDS):
        yield Problem(
            "gate",
            "the gate sets no threshold, so it could never hold a run back",
            f"set at least one of {', '.join(GATE_THRESHOLDS)}, or remove gate",
        )
    effective = steps.steps_for_check(doc)
    if effective is None:
        return
    if not effective.evaluates:
        yield Problem(
            "gate",
            "maxtext_overrides.num_test_batches is 0, so train_rl prints no Pre/Post RL Training "
            "line and the gate could not be evaluated",
            "remove num_test_batches from maxtext_overrides (rl.yml evaluates 5 batches), or remove gate",
        )


def publish_problems(doc: dict[str, Any]) -> Iterator[Problem]:
    publish, read = doc.get("publish"), doc.get("hf_token_secret")
    if not isinstance(publish, dict) or not isinstance(read, dict):
        return
    write = publish.get("token_secret")
    if isinstance(write, dict) and (write.get("name"), write.get("key")) == (
        read.get("name"),
        read.get("key"),
    ):
        yield Problem(
            "publish.token_secret",
            "the write token would come from the same Secret as the read token (hf_token_secret), "
            "so every stage's workload would hold a token that can push to the Hub",
            "create a separate Secret with a write token and name it in publish.token_secret",
        )
