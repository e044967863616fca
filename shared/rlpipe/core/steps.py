"""How many optimizer steps train_rl runs, which it checkpoints, and when training is really done.

MaxText 0.2.4 sets ``train_steps = int(num_batches × rl.num_iterations × train_fraction × num_epoch)``
and hands it to Tunix as ``max_steps``; Tunix stops there, or earlier if the data runs out, and
always saves the last step when it closes. Checkpoints are also saved at every multiple of
``checkpoint_period``, and only the newest ``max_num_checkpoints_to_keep`` are kept. The values
come from the request's typed fields and its ``maxtext_overrides``, over ``rl.yml``'s defaults.
Sources: ``tests/fixtures/maxtext_facts.yaml`` (``step_arithmetic``, ``checkpointing``).

Pure: a request in, numbers and verdicts out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import yaml

from rlpipe.core import presets


class _Training(Protocol):
    @property
    def num_batches(self) -> int: ...
    @property
    def checkpoint_period(self) -> int | None: ...


class Request(Protocol):
    """What the step rules read of ``rlpipe.core.request.Request`` (which validates with them)."""

    @property
    def training(self) -> _Training: ...
    @property
    def maxtext_overrides(self) -> Mapping[str, Any]: ...


# rl.yml at maxtext-v0.2.4 (the file train_rl loads): what applies when nobody passes the key.
RL_YML_DEFAULTS: dict[str, Any] = {
    "num_epoch": 1,
    "train_fraction": 1.0,
    "rl.num_iterations": 1,
    "enable_checkpointing": True,
    "checkpoint_period": presets.MAXTEXT_CHECKPOINT_PERIOD,
    "max_num_checkpoints_to_keep": presets.MAXTEXT_MAX_CHECKPOINTS_TO_KEEP,
    "eval_interval": 10,
    "num_test_batches": 5,
}

# Override keys that change the step arithmetic, each with the spellings MaxText accepts. A flat
# key is routed into the nested model of the same field name (RLConfig's
# map_flat_fields_to_nested_models), so `num_iterations` and `rl.num_iterations` are one value.
STEP_OVERRIDE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "num_epoch": ("num_epoch",),
    "train_fraction": ("train_fraction",),
    "rl.num_iterations": ("rl.num_iterations", "num_iterations"),
    "enable_checkpointing": ("enable_checkpointing",),
    "max_num_checkpoints_to_keep": ("max_num_checkpoints_to_keep",),
    "eval_interval": ("eval_interval",),
    "num_test_batches": ("num_test_batches",),
}
# Nested spellings MaxText silently ignores for the step count: rl.yml sets the flat key, and the
# flat value overwrites the nested one before train_steps is computed.
IGNORED_NESTED_SPELLINGS: dict[str, str] = {
    "dataset.train_fraction": "train_fraction",
    "dataset.num_batches": "training.num_batches",
}


class ConfigProblem(ValueError):
    """An override that makes the run's end unverifiable or ambiguous: (key, why, fix)."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        super().__init__(f"maxtext_overrides.{key}: {problem}")
        self.key, self.problem, self.fix = key, problem, fix


@dataclass(frozen=True)
class TrainingSteps:
    """The effective values train_rl will run with, and what follows from them."""

    num_batches: int
    num_iterations: int
    train_fraction: float
    num_epoch: int
    checkpoint_period: int
    max_to_keep: int
    enable_checkpointing: bool
    eval_interval: int
    num_test_batches: int

    @property
    def final_step(self) -> int:
        """MaxText's train_steps, computed as MaxText computes it (same order, same rounding)."""
        return int(self.num_batches * self.num_iterations * self.train_fraction * self.num_epoch)

    def checkpoint_steps(self) -> list[int]:
        """Every step train_rl commits: multiples of the period, then the forced final save."""
        return checkpoint_schedule(self.final_step, self.checkpoint_period)

    def kept_steps(self) -> list[int]:
        """The steps still in the bucket after a full run (the newest ``max_to_keep``)."""
        return self.checkpoint_steps()[-self.max_to_keep :]

    def eval_steps(self) -> list[int]:
        """Outer steps with an ``Intermediate Eval (step=N)`` line (none if evals are off)."""
        if self.num_test_batches <= 0 or self.eval_interval <= 0:
            return []
        outer = self.final_step // max(self.num_iterations, 1)
        return list(range(self.eval_interval, outer + 1, self.eval_interval))

    @property
    def evaluates(self) -> bool:
        """Whether train_rl prints the Pre/Post RL Training lines at all."""
        return self.num_test_batches > 0


def checkpoint_schedule(final: int, period: int) -> list[int]:
    steps = list(range(period, final + 1, period))
    if final >= 1 and (not steps or steps[-1] != final):
        steps.append(final)
    return steps


def _int(key: str, value: Any, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        floor = "" if minimum is None else f" >= {minimum}"
        raise ConfigProblem(key, f"{value!r} is not a whole number{floor}", f"write an integer{floor}")
    return value


def _as_maxtext_reads(value: Any) -> Any:
    """An override reaches MaxText as ``key=value`` text, which it parses as YAML: "2" is 2."""
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parsed if isinstance(parsed, (bool, int, float)) else value
    return value


def _override(overrides: Mapping[str, Any], name: str) -> tuple[str, Any] | None:
    given = [(k, _as_maxtext_reads(overrides[k])) for k in STEP_OVERRIDE_SPELLINGS[name] if k in overrides]
    if len(given) > 1:
        keys = " and ".join(k for k, _ in given)
        raise ConfigProblem(
            given[-1][0],
            f"{keys} are the same MaxText value given twice",
            f"keep only {STEP_OVERRIDE_SPELLINGS[name][0]}",
        )
    return given[0] if given else None


def effective_steps(
    num_batches: int, checkpoint_period: int | None, overrides: Mapping[str, Any]
) -> TrainingSteps:
    """The effective step settings, or ``ConfigProblem`` naming the key that makes them unverifiable."""
    for nested, flat in IGNORED_NESTED_SPELLINGS.items():
        if nested in overrides:
            raise ConfigProblem(
                nested,
                f"MaxText overwrites {nested} with the flat key from rl.yml, so this value would be ignored",
                f"set {flat} instead",
            )
    values: dict[str, Any] = dict(RL_YML_DEFAULTS)
    spelled: dict[str, str] = {}  # which spelling the request used, for messages
    for name in STEP_OVERRIDE_SPELLINGS:
        found = _override(overrides, name)
        if found is not None:
            spelled[name], values[name] = found

    def key(name: str) -> str:
        return spelled.get(name, name)

    enabled = values["enable_checkpointing"]
    if not isinstance(enabled, bool):
        raise ConfigProblem(key("enable_checkpointing"), f"{enabled!r} is not true or false", "write true")
    if not enabled:
        raise ConfigProblem(
            key("enable_checkpointing"),
            "with checkpointing off train_rl saves no step, not even the final one, so a finished "
            "training cannot be told from a crashed one, a retry cannot resume and export has nothing to read",
            "remove enable_checkpointing (the pipeline needs it true)",
        )
    fraction = values["train_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ConfigProblem(
            key("train_fraction"), f"{fraction!r} is not a number in (0, 1]", "write e.g. 0.5"
        )
    steps = TrainingSteps(
        num_batches=num_batches,
        num_iterations=_int(key("rl.num_iterations"), values["rl.num_iterations"], 1),
        train_fraction=float(fraction),
        num_epoch=_int(key("num_epoch"), values["num_epoch"], 1),
        checkpoint_period=checkpoint_period or presets.MAXTEXT_CHECKPOINT_PERIOD,
        max_to_keep=_int(key("max_num_checkpoints_to_keep"), values["max_num_checkpoints_to_keep"], 1),
        enable_checkpointing=True,
        eval_interval=_int(key("eval_interval"), values["eval_interval"], None),
        num_test_batches=_int(key("num_test_batches"), values["num_test_batches"], 0),
    )
    if steps.final_step < 1:
        raise ConfigProblem(
            key("train_fraction"),
            f"num_batches × rl.num_iterations × train_fraction × num_epoch rounds down to "
            f"{steps.final_step} steps, so train_rl would train nothing",
            "raise train_fraction or training.num_batches",
        )
    return steps


def training_steps(req: Request) -> TrainingSteps:
    """The request's effective step settings (raises ``ConfigProblem``; validation refuses those)."""
    return effective_steps(req.training.num_batches, req.training.checkpoint_period, req.maxtext_overrides)


def final_step(req: Request) -> int:
    """The step whose ``commit_success.txt`` means training finished: MaxText's train_steps."""
    return training_steps(req).final_step


class TrainVerdict(StrEnum):
    DONE = "done"  # the head succeeded and the final step is committed
    DATA_RAN_OUT = "data-ran-out"  # the head succeeded but stopped short: the last save is not the final step
    NO_CHECKPOINT = "no-checkpoint"  # the head succeeded and nothing is committed
    NOT_DONE = "not-done"  # still running, or failed (the cluster's failure class decides what next)


@dataclass(frozen=True)
class TrainOutcome:
    verdict: TrainVerdict
    reason: str
    committed: int | None
    final: int


def train_outcome(head: str, committed: int | None, final: int) -> TrainOutcome:
    """What a finished (or not yet finished) training attempt means.

    ``head`` is the workload's phase as the cluster reports it (``succeeded`` when the head exited
    0 and the JobSet completed; anything else is not an end). ``committed`` is the newest step with
    its step-level ``commit_success.txt`` (``layout.latest_committed_step``). Tunix waits for its
    saves before the process exits, so after a success the newest committed step is where training
    stopped: below ``final`` the data ran out (or fewer prompts passed the length filter), which
    must not read as success at a step that was never the last one.
    """
    if head != "succeeded":
        return TrainOutcome(TrainVerdict.NOT_DONE, f"the head is {head}", committed, final)
    if committed is None:
        return TrainOutcome(
            TrainVerdict.NO_CHECKPOINT, "train_rl exited 0 but committed no checkpoint", committed, final
        )
    if committed == final:
        return TrainOutcome(TrainVerdict.DONE, f"final step {final} committed", committed, final)
    if committed < final:
        return TrainOutcome(
            TrainVerdict.DATA_RAN_OUT,
            f"train_rl exited 0 after step {committed} of {final}: the training data ran out early "
            "(fewer batches than num_batches × num_epoch, e.g. prompts dropped by the length filter)",
            committed,
            final,
        )
    return TrainOutcome(
        TrainVerdict.NO_CHECKPOINT,
        f"step {committed} is committed beyond the expected final step {final}: the output directory "
        "holds another configuration's checkpoints",
        committed,
        final,
    )
