"""The data train_rl reads: how many test examples each evaluation scores, and how many batches
(and so optimizer steps) training gets before its data or its max_steps ends it.

Its own module because these are facts of MaxText's data pipeline and of Tunix's loop, not of the
programs' files. Written from reading them (maxtext-v0.2.4, grain 0.2.18, Tunix 0.1.7, whose loop
the pinned commit c4ec573 keeps), not from rlpipe's own code: ``core/steps.py`` derives the same
rule as arithmetic, and a test compares the two, so a drift in either shows.

The test set is batched by ``eval_batch_size`` (or by ``batch_size`` when that is 0 or less, rl.yml's
-1), sliced from ``test_batch_start_index`` up to ``num_test_batches × that size``, and an
incomplete last batch is dropped (train_rl.py:380-397); evaluate_rl counts one per example
(evaluate_rl.py:310).

The train set is played step by step, as the programs do it:

* ``train_rl.prepare_datasets``: shuffle the split with ``data_shuffle_seed`` (train_rl.py:341-344),
  filter prompts longer than ``max_prefill_predict_length`` (:360-364), keep the first
  ``int(num_batches × batch_size × train_fraction)`` positions (:375-376), repeat ``num_epoch``
  times (:377), batch by ``batch_size`` with ``drop_remainder`` (:378). In grain a filtered element
  is a hole that keeps its position (filter.py:53-66; the iterator skips holes, prefetch.py:276),
  the slice of epoch e is the first positions of that epoch's shuffle, reseeded ``seed + e``
  (slice.py:38-44, shuffle.py:60-71), and the batcher drops an incomplete last batch
  (batch.py:300-311) across epoch boundaries (the repeat is before ``to_iter_dataset``).
* Tunix ``RLLearner.train``: one ``next()`` before the loop (no batch at all raises StopIteration
  out of train(): rl_learner.py:529); a resumed trainer's iter_steps is restored step × gradient
  accumulation (peft_trainer.py:260) and that many micro-batches are skipped first
  (rl_learner.py:378-383); each outer step takes one mini-batch = one batch (MaxText passes
  ``mini_batch_size=batch_size``, train_rl.py:507), split into ``batch_size //
  train_micro_batch_size`` micro-batches (rl_learner.py:569-574, rl_cluster.py:128-142), each
  trained ``rl.num_iterations`` times (rl_learner.py:696-706), an optimizer update every
  accumulation's worth (peft_trainer.py:720-727, whose own max_steps check is off for a learner's
  trainer: :656-660 with rl_learner.py:95); ``max_steps`` is compared after each outer step
  (rl_learner.py:624-628) and an exhausted iterator ends the loop (rl_learner.py:468-469, 629-631).
"""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rlpipe.local.simulator.program import Arguments, ProgramExit

# rl.yml at maxtext-v0.2.4, lines 126-127: -1 evaluates in batches of batch_size.
EVAL_DEFAULTS = {"eval_batch_size": -1, "test_batch_start_index": 0}
TRAIN_DEFAULTS = {"data_shuffle_seed": 42, "train_micro_batch_size": -1}  # rl.yml:30, :116


def eval_examples(args: Arguments, rl_defaults: Mapping[str, str]) -> int:
    """The examples one evaluation scores; ``rl_defaults`` are rl.yml's ``num_test_batches`` and
    ``batch_size``. The simulated test set is large enough and has no prompt too long to keep
    (MaxText filters those out before slicing, so a real set can give fewer)."""
    batches = args.integer("num_test_batches", int(rl_defaults["num_test_batches"]))
    size = args.integer("eval_batch_size", EVAL_DEFAULTS["eval_batch_size"])
    if size <= 0:
        size = args.integer("batch_size", int(rl_defaults["batch_size"]))
    if batches <= 0 or size <= 0:
        return 0
    start = max(0, args.integer("test_batch_start_index", EVAL_DEFAULTS["test_batch_start_index"]))
    return max(0, batches * size - start) // size * size


@dataclass(frozen=True)
class TrainSplit:
    """The train split train_rl reads. ``rows``: its examples (None: as many as train_fraction
    keeps, i.e. plentiful); ``long_prompts``: how many of them the length filter drops."""

    rows: int | None = None
    long_prompts: int = 0


@dataclass(frozen=True)
class TrainConfig:
    """The train_rl settings the data and the loop read (rl.yml's defaults where not passed)."""

    num_batches: int
    batch_size: int
    train_fraction: float
    num_epoch: int
    num_iterations: int
    micro_batch_size: int  # train_micro_batch_size; -1 = batch_size
    seed: int

    @classmethod
    def from_args(cls, args: Arguments, rl_defaults: Mapping[str, str]) -> TrainConfig:
        iterations = (
            args.get("rl.num_iterations") or args.get("num_iterations") or rl_defaults["num_iterations"]
        )
        return cls(
            num_batches=args.integer("num_batches", int(rl_defaults["num_batches"])),
            batch_size=args.integer("batch_size", int(rl_defaults["batch_size"])),
            train_fraction=args.number("train_fraction", rl_defaults["train_fraction"]),
            num_epoch=args.integer("num_epoch", int(rl_defaults["num_epoch"])),
            num_iterations=int(iterations),
            micro_batch_size=args.integer("train_micro_batch_size", TRAIN_DEFAULTS["train_micro_batch_size"]),
            seed=args.integer("data_shuffle_seed", TRAIN_DEFAULTS["data_shuffle_seed"]),
        )

    @property
    def max_steps(self) -> int:
        """configs/types.py:4655-4660: train_steps, handed to Tunix as max_steps (train_rl.py:506)."""
        return int(self.num_batches * self.num_iterations * self.train_fraction * self.num_epoch)


def train_examples(config: TrainConfig, split: TrainSplit) -> Iterator[int]:
    """The example ids that reach the batcher, in order: per epoch, the kept positions of that
    epoch's shuffle, minus the holes the length filter left (ids below ``long_prompts`` are the
    long ones)."""
    size = int(config.num_batches * config.batch_size * config.train_fraction)  # train_rl.py:375
    rows = split.rows if split.rows is not None else size
    for epoch in range(config.num_epoch):
        order = list(range(rows))
        random.Random(config.seed + epoch).shuffle(order)  # reseeded per epoch, as grain's shuffle
        for position in range(min(size, rows)):  # the slice keeps positions, holes included
            example = order[position]
            if example < split.long_prompts:
                continue  # filtered: a hole the iterator skips
            yield example


def train_batches(config: TrainConfig, split: TrainSplit) -> Iterator[list[int]]:
    """``to_iter_dataset().batch(batch_size, drop_remainder=True)``."""
    examples = train_examples(config, split)
    while len(batch := list(itertools.islice(examples, config.batch_size))) == config.batch_size:
        yield batch


def train_updates(config: TrainConfig, split: TrainSplit, restored: int = 0) -> Iterator[int]:
    """Tunix's loop over the batches: yields each optimizer step as it is taken (from ``restored``
    + 1 on), and ends where Tunix's loop ends. Raises ``ProgramExit`` where train() raises."""
    full = train_batches(config, split)
    first = next(full, None)
    if first is None:  # rl_learner.py:529: StopIteration escapes train()
        raise ProgramExit(1, message="StopIteration: the train dataset gave no batch (rl_learner.train)")
    micro = config.batch_size if config.micro_batch_size <= 0 else config.micro_batch_size
    if config.batch_size % micro:
        raise ProgramExit(1, message=f"ValueError: {micro=} does not divide {config.batch_size=}")
    accumulation = config.batch_size // micro  # rl_cluster.py:140-142
    micro_batches = (
        batch[i : i + micro] for batch in itertools.chain([first], full) for i in range(0, len(batch), micro)
    )
    skipped = restored * accumulation  # the restored trainer's iter_steps (peft_trainer.py:260)
    if len(list(itertools.islice(micro_batches, skipped))) < skipped:
        return  # the fast-forward ran out: StopIteration, the loop ends before any step
    train_steps, iter_steps = restored, restored * accumulation
    while True:  # loop over outer steps
        taken = list(itertools.islice(micro_batches, accumulation))
        if len(taken) < accumulation:
            return  # StopIteration from the data: the loop ends
        for _ in range(config.num_iterations):  # batch_repeat
            for _ in taken:
                iter_steps += 1
                if iter_steps % accumulation == 0:
                    train_steps += 1
                    yield train_steps
        if train_steps >= config.max_steps:
            return


def final_step(config: TrainConfig, split: TrainSplit, restored: int = 0) -> int:
    """Where the loop ends: the last step :func:`train_updates` takes (``restored`` if none)."""
    taken = collections.deque(train_updates(config, split, restored), maxlen=1)
    return taken[0] if taken else restored


def train_data(entries: Iterable[Any]) -> TrainSplit:
    """The train split described by a workload's scenario entries (``scenario.Fault``: ``kind``
    and ``count``) (the first of each kind wins):
    how many examples it holds and how many prompts the length filter drops; plentiful without
    them. The simulated train_rl asks this through ``train_rl.train_split``, the one place to
    change when it reads the staged dataset's row count instead."""
    given = list(entries)
    rows = next((e.count for e in given if e.kind == "train-examples"), None)
    long = next((e.count for e in given if e.kind == "long-prompts"), None)
    return TrainSplit(rows=rows, long_prompts=long or 0)
