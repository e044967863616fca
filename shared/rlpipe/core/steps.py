"""How many optimizer steps train_rl runs, which it checkpoints, and when training is really done.

MaxText 0.2.4 sets ``train_steps = int(num_batches × rl.num_iterations × train_fraction × num_epoch)``
and hands it to Tunix as ``max_steps``; but the run ends where its *data* ends if that comes
first. The rule, from the sources (``tests/fixtures/maxtext_facts.yaml``, ``step_arithmetic``):

* the data: train_rl drops prompts longer than ``max_prefill_predict_length``
  (maxtext/trainers/post_train/rl/train_rl.py:360-364), keeps the first
  ``int(num_batches × batch_size × train_fraction)`` positions of each epoch's shuffle
  (train_rl.py:375-376; a dropped prompt still takes its position, grain's filter leaves a hole),
  repeats that ``num_epoch`` times (:377) and batches by ``batch_size`` dropping an incomplete
  last batch (:378): ``batches = examples per epoch × num_epoch // batch_size``;
* the loop: train_rl passes ``mini_batch_size=batch_size`` and ``max_steps=train_steps``
  (train_rl.py:506-507), so each batch is one outer step of ``rl.num_iterations`` optimizer steps
  (Tunix rl_learner.py:696-706 repeats it; ``train_micro_batch_size`` only splits it into
  accumulated micro-batches, rl_cluster.py:128-142, and changes no count); ``max_steps`` is
  compared only after each outer step (rl_learner.py:624-628; the PEFT trainer's own check is off
  for a learner-managed trainer, peft_trainer.py:656-660 with rl_learner.py:95), and an exhausted
  iterator ends the loop cleanly (rl_learner.py:468-469, 629-631), after which close() saves the
  last step (peft_trainer.py:757-766, 782-791). Line numbers are Tunix 0.1.7's.

So ``final = min(batches, max(1, ceil(max_steps / num_iterations))) × num_iterations``, which is
``max_steps`` only when the data has enough examples. No batch at all makes Tunix's first
``next()`` raise out of ``train()`` (rl_learner.py:529): train_rl then fails. A resumed attempt
skips one batch per *optimizer step* it restored (rl_learner.py:132, 378-383 with
peft_trainer.py:260), so with ``rl.num_iterations`` > 1 it skips batches it never trained on and
ends earlier than a fresh run would. ``rl.use_agentic_rollout`` runs another learner, which counts
max_steps in outer steps: the end is not derived for it (``rule_known``).

Checkpoints are saved at every multiple of ``checkpoint_period`` and at the end; only the newest
``max_num_checkpoints_to_keep`` are kept. The values come from the request's typed fields
(``training.num_batches``, ``training.batch_size``: a ``batch_size`` override is refused as a
typed field) and its ``maxtext_overrides``, over ``rl.yml``'s defaults.

Every derived count has a ceiling (``step_counts``: steps, checkpoints, evaluations),
checked on numbers alone before anything proportional to it is built, so no request can make
``validate`` or ``plan`` build a schedule of a trillion steps or store an 82-bit final step: a
request beyond one is refused, naming the field. Overrides are taken as MaxText reads them
(``core.maxtext.config_reader``): ``"2"`` is the number 2.

Pure: a request in, numbers and verdicts out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rlpipe.core import presets
from rlpipe.core.step_counts import (
    MAX_CHECKPOINTS,
    MAX_EVALUATIONS,
    MAX_TRAIN_STEPS,
    checkpoint_count,
    checkpoint_schedule,
)
from rlpipe.core.step_counts import shown as _shown


class _Training(Protocol):
    @property
    def num_batches(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def checkpoint_period(self) -> int | None: ...
    @property
    def max_prefill_predict_length(self) -> int | None: ...


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
    "rl.use_agentic_rollout": False,  # rl.yml:60
    "enable_checkpointing": True,
    "checkpoint_period": presets.MAXTEXT_CHECKPOINT_PERIOD,
    "max_num_checkpoints_to_keep": presets.MAXTEXT_MAX_CHECKPOINTS_TO_KEEP,
    "eval_interval": 10,
    "num_test_batches": 5,
    "batch_size": 1,  # rl.yml:110; a request always sets training.batch_size
    "max_prefill_predict_length": 256,  # rl.yml:163; the length filter's bound
}

# Override keys that change the step arithmetic, each with the spellings MaxText accepts. A flat
# key is routed into the nested model of the same field name (RLConfig's
# map_flat_fields_to_nested_models), so `num_iterations` and `rl.num_iterations` are one value.
# batch_size is not here: it is the typed training.batch_size, and checks refuse it as an override
# under either spelling (batch_size, dataset.batch_size).
STEP_OVERRIDE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "num_epoch": ("num_epoch",),
    "train_fraction": ("train_fraction",),
    "rl.num_iterations": ("rl.num_iterations", "num_iterations"),
    "rl.use_agentic_rollout": ("rl.use_agentic_rollout", "use_agentic_rollout"),
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
    """An override that makes the run's end unverifiable or ambiguous: (key, why, fix). ``field``
    is the request field to name when it is not the override ``key`` (a typed training field)."""

    def __init__(self, key: str, problem: str, fix: str, *, field: str | None = None) -> None:
        self.path = field or f"maxtext_overrides.{key}"
        super().__init__(f"{self.path}: {problem}")
        self.key, self.problem, self.fix = key, problem, fix


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


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
    batch_size: int = 1
    agentic: bool = False  # rl.use_agentic_rollout: another learner, whose end is not derived here
    max_prefill_predict_length: int | None = None  # None: rl.yml's 256 (only for the explanation)

    @property
    def max_steps(self) -> int:
        """MaxText's train_steps, computed as MaxText computes it (same order, same rounding)."""
        return int(self.num_batches * self.num_iterations * self.train_fraction * self.num_epoch)

    @property
    def examples_kept(self) -> int:
        """The positions of each epoch's shuffle train_rl keeps (train_rl.py:375, same order)."""
        return int(self.num_batches * self.batch_size * self.train_fraction)

    def examples_per_epoch(self, examples: int | None = None) -> int:
        """Examples per epoch that reach the batcher. ``examples``: how many train examples pass
        the length filter (None: plentiful). Exact when no prompt is dropped or the whole split
        fits in ``examples_kept``; otherwise an upper bound, because a dropped prompt still takes
        one of the kept positions and which ones fall in the slice depends on the shuffle."""
        kept = self.examples_kept
        return kept if examples is None else max(0, min(kept, examples))

    def batches(self, examples: int | None = None) -> int:
        """Full batches the data gives over every epoch (grain's drop_remainder)."""
        return self.examples_per_epoch(examples) * self.num_epoch // self.batch_size

    def final_with_examples(self, examples: int | None, *, resumed_from: int = 0) -> int:
        """The step train_rl ends at: ``min(max_steps, what the data allows)``, literally: one
        outer step of ``num_iterations`` updates per batch, max_steps checked after each one.
        ``resumed_from``: the step an attempt restored (Tunix then skips that many batches).
        0 means train_rl fails before its first step (no batch at all)."""
        batches = self.batches(examples)
        if batches == 0:
            return 0
        left = batches - resumed_from
        if left <= 0:
            return resumed_from
        outer = min(left, max(1, math.ceil((self.max_steps - resumed_from) / self.num_iterations)))
        return resumed_from + outer * self.num_iterations

    @property
    def final_step(self) -> int:
        """The step a run with plentiful data ends at (what ``plan`` shows)."""
        return self.final_with_examples(None)

    @property
    def data_bound(self) -> bool:
        """The config alone ends training below max_steps: train_fraction keeps fewer examples than
        num_batches × num_epoch batches need (e.g. rl.num_iterations > 1 with train_fraction < 1)."""
        return self.final_step < self.max_steps

    @property
    def rule_known(self) -> bool:
        return not self.agentic

    def data_text(self, examples: int | None = None) -> str:
        """``22 examples × 1 epoch ÷ batch 1 = 22 batches × 2 iterations``."""
        per_epoch = self.examples_per_epoch(examples)
        return (
            f"{_plural(per_epoch, 'example')} × {_plural(self.num_epoch, 'epoch')} ÷ batch "
            f"{self.batch_size} = {_plural(self.batches(examples), 'batch', 'batches')} × "
            f"{_plural(self.num_iterations, 'iteration')}"
        )

    def _prefill(self) -> int:
        return int(self.max_prefill_predict_length or RL_YML_DEFAULTS["max_prefill_predict_length"])

    def _fewer(self) -> str:
        return (
            f"fewer if prompts longer than max_prefill_predict_length ({self._prefill()} tokens) are dropped "
            f"or the split has fewer than {self.examples_kept} examples"
        )

    def explain(self, examples: int | None = None) -> str:
        """In words, for ``plan``: where training ends, and that the data can end it earlier, e.g.
        ``step 44 (of max_steps 45: 22 examples × 1 epoch ÷ batch 1 = 22 batches × 2 iterations);
        fewer if prompts longer than …``."""
        final, top, data = self.final_with_examples(examples), self.max_steps, self.data_text(examples)
        if final == 0:
            head = f"no step ({data}): train_rl fails before its first step"
        elif final < top:
            head = f"step {final} (of max_steps {top}: {data})"
        elif final > top:
            head = f"step {final} (max_steps {top}, checked only after each batch: {data})"
        else:
            head = f"step {final} (= max_steps; the data allows {data})"
        text = f"{head}; {self._fewer()} (training then ends early, cleanly)"
        if self.agentic:
            text += (
                "; with rl.use_agentic_rollout the agentic learner compares max_steps with outer "
                "steps, so this end is not derived for it"
            )
        return text

    def explain_end(self, actual: int, *, resumed_from: int | None = None) -> str | None:
        """Why a clean end at ``actual`` is not max_steps, in words; None when it is max_steps."""
        top, expected = self.max_steps, self.final_step
        if actual == top:
            return None
        what = f"trained to step {actual} of {top}"
        if actual == expected:
            return (
                f"{what}: the data ran out ({self.data_text()}; train_fraction keeps "
                f"int({self.num_batches} × {self.batch_size} × {self.train_fraction:g}) = "
                f"{self.examples_kept} examples)"
            )
        s = resumed_from or 0
        if s and self.num_iterations > 1 and actual == self.final_with_examples(None, resumed_from=s):
            return (
                f"{what}: the data ran out (the attempt resumed at step {s}, and Tunix skips one "
                f"batch per restored optimizer step, so with {_plural(self.num_iterations, 'iteration')} "
                f"per batch it skipped batches it had not trained on)"
            )
        if actual < expected:
            return (
                f"{what}: the data ran out (expected step {expected}: {self.data_text()}; the train "
                f"split held fewer than {self.examples_kept} examples whose prompts fit "
                f"max_prefill_predict_length ({self._prefill()} tokens))"
            )
        return f"{what}: beyond the expected step {expected}"

    def checkpoint_steps(self) -> list[int]:
        """Every step train_rl commits: multiples of the period, then the forced final save."""
        return checkpoint_schedule(self.final_step, self.checkpoint_period)

    def kept_steps(self) -> list[int]:
        """The steps still in the bucket after a full run (the newest ``max_to_keep``), without
        listing the ones before them."""
        return checkpoint_schedule(self.final_step, self.checkpoint_period, last=self.max_to_keep)

    def evaluation_count(self, final: int | None = None) -> int:
        """How many ``Intermediate Eval`` lines train_rl prints up to ``final``, counted."""
        if self.num_test_batches <= 0 or self.eval_interval <= 0:
            return 0
        outer = (self.final_step if final is None else final) // max(self.num_iterations, 1)
        return outer // self.eval_interval

    def eval_steps(self, final: int | None = None) -> list[int]:
        """Outer steps with an ``Intermediate Eval (step=N)`` line (none if evals are off), up to
        ``final`` (default: where plentiful data ends)."""
        count = self.evaluation_count(final)
        return [self.eval_interval * (i + 1) for i in range(count)]

    @property
    def evaluates(self) -> bool:
        """Whether train_rl prints the Pre/Post RL Training lines at all."""
        return self.num_test_batches > 0


def _int(key: str, value: Any, minimum: int | None, maximum: int = MAX_TRAIN_STEPS) -> int:
    """A whole number in range. The value is the one MaxText reads, which no bound on the document
    limits ("0x" and 400 f's is a 1,600-bit number), so a larger one is refused before any float
    arithmetic can overflow on it."""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        floor = "" if minimum is None else f" >= {minimum}"
        raise ConfigProblem(key, f"{_shown(value)} is not a whole number{floor}", f"write an integer{floor}")
    if abs(value) > maximum:
        raise ConfigProblem(
            key,
            f"{_shown(value)} is beyond what a run can hold (at most {maximum:,})",
            f"write a number of at most {maximum:,}",
        )
    return value


def _as_maxtext_reads(value: Any) -> Any:
    """An override reaches MaxText as ``key=value`` text, which its config reader parses as YAML
    (``core.maxtext.config_reader``): "2" is 2. Text it cannot read stays text (the check that reads
    every argument says why). Imported here, not at the top: the reader brings omegaconf (tens of
    milliseconds), and every function imports this module through ``core.layout`` on its cold start,
    while only a request's validation reads an override."""
    from rlpipe.core.maxtext import config_reader

    if isinstance(value, str):
        try:
            return config_reader.read_value(value)
        except config_reader.Unreadable:
            return value
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
    num_batches: int,
    checkpoint_period: int | None,
    overrides: Mapping[str, Any],
    *,
    batch_size: int = 1,
    max_prefill_predict_length: int | None = None,
) -> TrainingSteps:
    """The effective step settings, or ``ConfigProblem`` naming the key that makes them unverifiable.

    ``batch_size`` is the request's typed ``training.batch_size`` (rl.yml's 1 when a caller reads
    a document without it: the data's batch count then assumes batches of one)."""
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
        raise ConfigProblem(
            key("enable_checkpointing"), f"{_shown(enabled)} is not true or false", "write true"
        )
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
            key("train_fraction"), f"{_shown(fraction)} is not a number in (0, 1]", "write e.g. 0.5"
        )
    agentic = values["rl.use_agentic_rollout"]
    if not isinstance(agentic, bool):
        raise ConfigProblem(
            key("rl.use_agentic_rollout"), f"{_shown(agentic)} is not true or false", "write false"
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
        batch_size=max(1, batch_size),
        agentic=agentic,
        max_prefill_predict_length=max_prefill_predict_length,
    )
    if steps.max_steps < 1:
        raise ConfigProblem(
            key("train_fraction"),
            f"num_batches × rl.num_iterations × train_fraction × num_epoch rounds down to "
            f"{steps.max_steps} steps, so train_rl would train nothing",
            "raise train_fraction or training.num_batches",
        )
    if steps.batches(None) < 1:
        raise ConfigProblem(
            key("train_fraction"),
            f"train_fraction keeps {steps.examples_kept} examples per epoch, fewer than one batch of "
            f"{steps.batch_size} (batches drop the remainder), so train_rl would fail before its first step",
            "raise train_fraction or training.num_batches",
        )
    _within_ceilings(steps, spelled)
    return steps


def _within_ceilings(steps: TrainingSteps, spelled: Mapping[str, str]) -> None:
    """Each derived count at most its ceiling, counted (nothing listed), or ``ConfigProblem``
    naming the value to change: the larger of num_epoch and rl.num_iterations the request set."""
    final = steps.final_step
    if final > MAX_TRAIN_STEPS:
        given = {
            name: count
            for name, count in (("num_epoch", steps.num_epoch), ("rl.num_iterations", steps.num_iterations))
            if name in spelled
        }
        largest = max(given, key=lambda name: given[name]) if given else None
        raise ConfigProblem(
            spelled[largest] if largest else "num_batches",
            f"training would end at step {final:,} (num_batches × rl.num_iterations × train_fraction × "
            f"num_epoch); rlpipe plans at most {MAX_TRAIN_STEPS:,} steps",
            "lower num_epoch, rl.num_iterations or training.num_batches",
            field=None if largest else "training.num_batches",
        )
    saved = checkpoint_count(final, steps.checkpoint_period)
    if saved > MAX_CHECKPOINTS:
        raise ConfigProblem(
            "checkpoint_period",
            f"a checkpoint every {steps.checkpoint_period} steps up to step {final:,} is {saved:,} "
            f"checkpoints; at most {MAX_CHECKPOINTS:,}",
            f"raise training.checkpoint_period to at least {-(-final // MAX_CHECKPOINTS)}",
            field="training.checkpoint_period",
        )
    evaluations = steps.evaluation_count()
    if evaluations > MAX_EVALUATIONS:
        outer = final // max(steps.num_iterations, 1)
        raise ConfigProblem(
            spelled.get("eval_interval", "eval_interval"),
            f"an evaluation every {steps.eval_interval} outer steps up to outer step {outer:,} is "
            f"{evaluations:,} evaluations; at most {MAX_EVALUATIONS:,}",
            f"raise eval_interval to at least {-(-outer // MAX_EVALUATIONS)}",
        )


def document_steps(doc: Mapping[str, Any]) -> TrainingSteps | None:
    """The step settings of a request document still being checked (typed fields not yet
    validated): None where its training fields are not usable; ``ConfigProblem`` as
    :func:`effective_steps` raises it."""
    training, overrides = doc.get("training"), doc.get("maxtext_overrides")
    if not isinstance(training, Mapping) or not isinstance(overrides, Mapping):
        return None

    def whole(name: str, minimum: int) -> int | None:
        value = training.get(name)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        return value if ok else None

    num_batches = whole("num_batches", 1)
    if num_batches is None:
        return None
    return effective_steps(
        num_batches,
        whole("checkpoint_period", 1),
        overrides,
        batch_size=whole("batch_size", 1) or 1,
        max_prefill_predict_length=whole("max_prefill_predict_length", 1),
    )


def steps_for_check(doc: Mapping[str, Any]) -> TrainingSteps | None:
    """:func:`document_steps` for a check that runs beside the training-steps check: None where the
    settings are unusable, or are refused by that check, which names the field."""
    try:
        return document_steps(doc)
    except ConfigProblem:
        return None


def training_steps(req: Request) -> TrainingSteps:
    """The request's effective step settings (raises ``ConfigProblem``; validation refuses those)."""
    t = req.training
    return effective_steps(
        t.num_batches,
        t.checkpoint_period,
        req.maxtext_overrides,
        batch_size=t.batch_size,
        max_prefill_predict_length=t.max_prefill_predict_length,
    )


def final_step(req: Request) -> int:
    """The step a run with plentiful data ends at (``TrainingSteps.final_step``); a run whose data
    ends earlier ends earlier, cleanly, and its actual final step is the ledger's."""
    return training_steps(req).final_step
