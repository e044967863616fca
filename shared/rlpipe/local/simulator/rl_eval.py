"""How many test examples each of train_rl's evaluations scores: the ``total`` of its reward lines.

Its own module because it is a fact of MaxText's data pipeline, not of the programs' files: the
test set is batched by ``eval_batch_size`` (or by ``batch_size`` when that is 0 or less, rl.yml's
-1), sliced from ``test_batch_start_index`` up to ``num_test_batches × that size``, and an
incomplete last batch is dropped (train_rl.py:380-397 at maxtext-v0.2.4); evaluate_rl counts one
per example (evaluate_rl.py:310). Written from that reading, not from rlpipe's own code.
"""

from __future__ import annotations

from collections.abc import Mapping

from rlpipe.local.simulator.program import Arguments

# rl.yml at maxtext-v0.2.4, lines 126-127: -1 evaluates in batches of batch_size.
EVAL_DEFAULTS = {"eval_batch_size": -1, "test_batch_start_index": 0}


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
