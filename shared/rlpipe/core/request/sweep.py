"""The ``sweep`` section: one request that becomes a grid (or a list) of child runs.

Why a model of its own: the schema only says what a point may look like; what it may name, and
the child requests it becomes, are ``core.request.grid``'s (each child checked as if submitted
alone). A point names a path into the request
(``training.<field>`` or ``maxtext_overrides.<key>``), so a sweep can only vary what a single
request could already set, and the children share everything else: the model, the data, the
image, the slice and where the model is published.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from rlpipe.core.request.base import Strict, custom_error
from rlpipe.core.step_counts import MAX_TRAIN_STEPS

Scalar = bool | int | float | str
# A point's key: `training.learning_rate`, or `maxtext_overrides.rl.grpo_beta` (an override key
# keeps its own dots). What it may name is decided in core.request.grid, which says why not.
SweepKey = Annotated[str, Field(min_length=1, max_length=160)]
MAX_VALUES_PER_KEY = 64

# The post-training numbers train_rl prints (train_log), by the names the gate uses for them.
Metric = Literal["post_mean_reward", "reward_gain", "post_accuracy"]
# Which way is better for a metric: max, the highest value wins. Selection and early stopping
# (core.early_stop) read it the same way.
Direction = Literal["max", "min"]


class SelectRule(Strict):
    """Which child goes on to publish once every child has ended (docs/sweeps.md).

    Only a child that reached the end of training and passed the quality gate (when the request
    has one) is a candidate: a gated or failed child ended before selection."""

    metric: Metric = Field(description="post_mean_reward, reward_gain (post minus pre) or post_accuracy")
    direction: Direction = Field(default="max", description="max: the highest value wins")


StopRule = Literal["none", "median", "asha"]


class EarlyStop(Strict):
    """Whether and how a sweep stops its losing children before their final step (docs/sweeps.md).

    Written either as the rule alone (``early_stop: asha``) or with its parameters. Both rules
    read the metric and direction of ``sweep.select`` at each intermediate evaluation, and are
    decided in ``core.early_stop``; whether ``min_step`` and the rungs fall on evaluation steps
    depends on each child's steps, so that is checked with the children (``core.request.grid``)."""

    rule: StopRule = Field(default="none", description="none, median (the median stopping rule) or asha")
    eta: Annotated[int, Field(ge=2, le=16)] = Field(
        default=3, description="asha: the top 1/eta of the children at each rung go on"
    )
    # At most a run's steps (step_counts.MAX_TRAIN_STEPS): a larger one is no step any child reaches.
    min_step: Annotated[int, Field(ge=1, le=MAX_TRAIN_STEPS)] | None = Field(
        default=None,
        description="the first step a child is judged at (asha: the first rung); "
        "None: the first evaluation step (eval_interval)",
    )

    @model_validator(mode="before")
    @classmethod
    def _rule_alone(cls, value: object) -> object:
        """``early_stop: median`` is ``early_stop: {rule: median}``."""
        return {"rule": value} if isinstance(value, str) else value


class SweepSpec(Strict):
    """A grid (every combination) or a list of points; each point is one child run."""

    grid: (
        dict[SweepKey, Annotated[list[Scalar], Field(min_length=1, max_length=MAX_VALUES_PER_KEY)]] | None
    ) = Field(default=None, description="key → values; the children are every combination, last key fastest")
    points: list[dict[SweepKey, Scalar]] | None = Field(
        default=None, description="a list of override sets, one child each"
    )
    max_parallel: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None,
        description="children holding a TPU slice at once; None = all (Kueue's quota still bounds them)",
    )
    select: SelectRule | None = Field(
        default=None, description="pick one child after all have ended; only it publishes"
    )
    early_stop: EarlyStop | None = Field(
        default=None,
        description="stop losing children at intermediate evaluations of select's metric; None: none",
    )

    @property
    def stopping(self) -> EarlyStop:
        """The early-stopping rule, ``none`` when the request names none."""
        return self.early_stop or EarlyStop()

    @field_validator("grid", "points")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        if value is not None and not value:
            raise custom_error("a sweep needs at least one key", "give at least one key with its values")
        if isinstance(value, list) and any(not point for point in value):
            raise custom_error("a point sets nothing", "give every point at least one key")
        return value
