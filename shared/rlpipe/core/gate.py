"""The quality gate: did training produce a model good enough to export and publish?

Pure: the request's thresholds and the run's recorded ``results`` (``train_log.TrainLog.results``)
in, a verdict out. A missing number is never a pass: without a ``Post RL Training`` line (a crash
before evaluation, or MaxText's logging changed) the gate cannot be evaluated, and the run fails
with that reason instead of slipping through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlpipe.core.request import GateSpec


@dataclass(frozen=True)
class GateVerdict:
    passed: bool | None  # None: the gate could not be evaluated
    reasons: tuple[str, ...]  # one line per threshold, with the measured value

    @property
    def summary(self) -> str:
        if self.passed is None:
            return "gate not evaluated: " + "; ".join(self.reasons)
        missed = [r for r in self.reasons if " below " in r]
        return ("gate passed: " if self.passed else "gate failed: ") + "; ".join(missed or self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reasons": list(self.reasons)}


def _number(evaluation: Any, field: str) -> float | None:
    value = evaluation.get(field) if isinstance(evaluation, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def metric(results: Mapping[str, Any], name: str) -> float | None:
    """One of the numbers the gate compares, by its threshold's name without ``min_``
    (``post_mean_reward``, ``reward_gain``, ``post_accuracy``): what a sweep selects by, too."""
    pre, post = results.get("pre"), results.get("post")
    if name == "post_mean_reward":
        return _number(post, "mean_reward")
    if name == "post_accuracy":
        return _number(post, "accuracy")
    if name == "reward_gain":
        after, before = _number(post, "mean_reward"), _number(pre, "mean_reward")
        return None if after is None or before is None else after - before
    raise ValueError(f"unknown metric {name!r}")


def _compare(name: str, what: str, measured: float, threshold: float, unit: str = "") -> tuple[bool, str]:
    ok = measured >= threshold
    relation = "meets" if ok else "below"
    return ok, f"{what} {measured:.4f}{unit} {relation} {name} {threshold:g}{unit}"


def evaluate(gate: GateSpec, results: Mapping[str, Any]) -> GateVerdict:
    pre, post = results.get("pre"), results.get("post")
    post_reward, pre_reward = _number(post, "mean_reward"), _number(pre, "mean_reward")
    post_accuracy = _number(post, "accuracy")
    missing: list[str] = []
    checks: list[tuple[bool, str]] = []
    if gate.min_post_mean_reward is not None:
        if post_reward is None:
            missing.append("min_post_mean_reward needs the post-training mean_reward")
        else:
            checks.append(
                _compare("min_post_mean_reward", "post mean_reward", post_reward, gate.min_post_mean_reward)
            )
    if gate.min_reward_gain is not None:
        if post_reward is None or pre_reward is None:
            missing.append("min_reward_gain needs both the pre- and post-training mean_reward")
        else:
            checks.append(
                _compare(
                    "min_reward_gain", "mean_reward gain", post_reward - pre_reward, gate.min_reward_gain
                )
            )
    if gate.min_post_accuracy is not None:
        if post_accuracy is None:
            missing.append("min_post_accuracy needs the post-training accuracy")
        else:
            checks.append(
                _compare("min_post_accuracy", "post accuracy", post_accuracy, gate.min_post_accuracy, "%")
            )
    if missing:
        seen = [("Pre" if pre is not None else None), ("Post" if post is not None else None)]
        found = " and ".join(f"{s} RL Training" for s in seen if s) or "no evaluation line"
        return GateVerdict(
            None,
            (
                *missing,
                f"the head's log had {found}: train_rl crashed before evaluating, or its logging changed",
            ),
        )
    return GateVerdict(all(ok for ok, _ in checks), tuple(text for _, text in checks))
