"""train_rl's own data pipeline and reward loading, called directly, without a model or a rollout.

Runs in the programs venv. For each data shape of the job (stdin, JSON; ``programs.data_shapes``),
whose files ``programs.run`` staged where the localized argv points, it calls what train_rl's
``_rl_train_impl`` calls, in the same order (maxtext 0.2.4 ``train_rl.py:691-730``):

1. ``model_creation_utils.setup_configs_and_devices(argv, {}, config_class=types.RLConfig)``;
2. ``AutoTokenizer.from_pretrained(tokenizer_path)`` and ``configure_tokenizer_chat_template``;
3. ``prepare_datasets(trainer_config, tokenizer)``: the length filter, the slice to
   ``num_batches × batch_size × train_fraction``, ``num_epoch`` repeats, batches with
   ``drop_remainder`` (``train_rl.py:282-380``); every batch is counted;
4. ``build_reward_fns(trainer_config, make_reward_fn)`` (``train_rl.py:402-424``), with the same
   wrapper ``create_rl_components`` passes (``train_rl.py:581-587``: ``tmvp_config`` added), and
   each function scored on two completions of the first batch.

It also records MaxText's ``train_steps`` (the ``max_steps`` Tunix gets, ``types.py:4655-4660``)
and, per staged row, how many tokens its templated prompt has (``utils_rl.process_data`` and the
tokenizer, as the filter counts them), so a test can check each shape's premise.

``vllm`` and ``tpu_inference`` are stand-ins (``stubs.py``): train_rl imports them at module level.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import time
import traceback
from functools import wraps
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stubs

stubs.install()

CORRECT = "<reasoning>Add them.</reasoning><answer>{answer}</answer>"
RAMBLING = "x" * 500


def first_answer(answer: str) -> str:
    """The first acceptable answer of a processed example (a JSON list, ``utils_rl.process_data``)."""
    return str(json.loads(answer)[0])


def score(reward_fns: list[Any], batch: dict[str, Any]) -> dict[str, list[float]]:
    """Each reward function on the batch's first example: a correct answer, then a long wrong one."""
    prompt, question, answer = batch["prompts"][0], batch["question"][0], batch["answer"][0]
    completions = [CORRECT.format(answer=first_answer(answer)), RAMBLING]
    out = {}
    for fn in reward_fns:
        scores = fn(
            prompts=[prompt, prompt],
            completions=completions,
            question=[question, question],
            answer=[answer, answer],
            mode="train",
        )
        out[fn.__name__] = [float(s) for s in scores]
    return out


def shape(train_rl: Any, shape_job: dict[str, Any]) -> dict[str, Any]:
    from maxtext.configs import types
    from maxtext.input_pipeline.instruction_data_processing import load_data_template_from_file
    from maxtext.trainers.post_train.rl import utils_rl
    from maxtext.utils import model_creation_utils
    from transformers import AutoTokenizer

    argv = [train_rl.__file__, *shape_job["args"]]
    trainer_config, _, _, _ = model_creation_utils.setup_configs_and_devices(
        argv, {}, config_class=types.RLConfig
    )
    tokenizer = AutoTokenizer.from_pretrained(trainer_config.tokenizer_path)
    train_rl.configure_tokenizer_chat_template(tokenizer, trainer_config)
    train, test = train_rl.prepare_datasets(trainer_config, tokenizer)

    batches = [dict(b) for b in train]
    test_batches = sum(1 for _ in test) if test is not None else 0

    def make_reward_fn(fn: Any) -> Any:
        @wraps(fn)
        def _reward_fn(**kwargs: Any) -> Any:
            return fn(tmvp_config=trainer_config, **kwargs)

        return _reward_fn

    reward_fns = train_rl.build_reward_fns(trainer_config, make_reward_fn)
    template = load_data_template_from_file(trainer_config.data_template_path)
    staged_train = next(t for p, t in shape_job["tables"].items() if "/train/" in p)
    prompt_tokens = []
    for q, a in zip(staged_train["question"], staged_train["answer"], strict=True):
        processed = utils_rl.process_data(
            trainer_config.dataset_name, tokenizer, template, trainer_config, {"question": q, "answer": a}
        )
        prompt_tokens.append(len(tokenizer.tokenize(processed["prompts"])))
    return {
        "train_batches": len(batches),
        "batch_sizes": sorted({len(b["prompts"]) for b in batches}),
        "train_questions": [q for b in batches for q in b["question"]],
        "first_prompt": batches[0]["prompts"][0] if batches else None,
        "test_batches": test_batches,
        "train_steps": trainer_config.train_steps,
        "num_iterations": trainer_config.rl.num_iterations,
        "max_prefill_predict_length": trainer_config.max_prefill_predict_length,
        "template": template,
        "special_tokens": {
            k: getattr(trainer_config, k)
            for k in (
                "reasoning_start_token",
                "reasoning_end_token",
                "solution_start_token",
                "solution_end_token",
            )
        },
        "prompt_tokens": prompt_tokens,
        "reward_functions": [
            {"name": fn.__name__, "file": fn.__wrapped__.__code__.co_filename} for fn in reward_fns
        ],
        "scores": score(reward_fns, batches[0]) if batches else {},
    }


def internals(train_rl: Any) -> dict[str, dict[str, Any]]:
    """Where each MaxText function this driver calls is defined (file inside the package, line):
    they are internal to train_rl, so the tests pin them (tests/fixtures/maxtext_internals.yaml)."""
    from maxtext.input_pipeline import instruction_data_processing
    from maxtext.trainers.post_train.rl import utils_rl
    from maxtext.utils import model_creation_utils

    called = {
        "setup_configs_and_devices": model_creation_utils.setup_configs_and_devices,
        "configure_tokenizer_chat_template": train_rl.configure_tokenizer_chat_template,
        "prepare_datasets": train_rl.prepare_datasets,
        "build_reward_fns": train_rl.build_reward_fns,
        "process_data": utils_rl.process_data,
        "load_data_template_from_file": instruction_data_processing.load_data_template_from_file,
    }
    root = Path(train_rl.__file__).resolve().parents[4]  # the folder holding the maxtext package
    out = {}
    for name, fn in called.items():
        path = Path(inspect.getsourcefile(fn) or "").resolve()
        out[name] = {"file": path.relative_to(root).as_posix(), "line": inspect.getsourcelines(fn)[1]}
    return out


def main() -> None:
    job = json.load(sys.stdin)
    logging.disable(logging.WARNING)
    started = time.monotonic()
    import maxtext.trainers.post_train.rl.train_rl as train_rl

    result: dict[str, Any] = {
        "import_seconds": round(time.monotonic() - started, 2),
        "internals": internals(train_rl),
        "shapes": {},
    }
    for shape_job in job["shapes"]:
        began = time.monotonic()
        try:
            entry = shape(train_rl, shape_job)
        except (Exception, SystemExit) as exc:  # a refusal is a result: the tests judge it
            cause = exc.__context__ if isinstance(exc, SystemExit) and exc.__context__ else exc
            entry = {"error": f"{type(cause).__name__}: {cause}", "traceback": traceback.format_exc()[-4000:]}
        entry["seconds"] = round(time.monotonic() - began, 2)
        result["shapes"][shape_job["name"]] = entry
    json.dump(result, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
