"""A request's own reward functions, run on played completions as train_rl's evaluation runs them.

With ``reward_functions`` set, train_rl loads the named functions from ``reward_functions_path``
in place of its built-in three, each called with ``tmvp_config`` added (``make_reward_fn``), and
its evaluation's ``mean_reward`` is the mean over responses of the sum of their scores, each
called as ``fn(prompts=[p], completions=[r], answer=[a], question=q)``; a function that raises is
logged and its row left out, while in training Tunix's reward manager lets it end the run
(maxtext-v0.2.4 ``train_rl.py:402-419,581-587``, ``evaluate_rl.py:186-219,292-294,326``). Example
i asks ``What is i + 7?``; the ``corr`` first (the built-in count) answer it, the rest one more,
each after 200 + 50·(i mod 9) characters of reasoning. ``tmvp_config`` here is the arguments as
passed. The user's code runs here, once intake pinned it, as in the training head's container.
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable
from typing import Any

from rlpipe.core import staging
from rlpipe.local.simulator.absl_log import absl_line
from rlpipe.local.simulator.program import Arguments, ProgramContext, ProgramExit


def load(ctx: ProgramContext, args: Arguments) -> list[Callable[..., Any]]:
    """The functions ``reward_functions`` names, from the run's pinned copy; none: the built-in ones."""
    names = [name.strip() for name in (args.get("reward_functions") or "").split(",") if name.strip()]
    if not names:
        return []
    path = args.require("reward_functions_path")
    copies = [f for f in json.loads(dict(args.env).get(staging.ENV_USER_FILES) or "[]") if f["local"] == path]
    source = ctx.read(copies[0]["uri"]) if copies else None
    if source is None:
        raise ProgramExit(1, message=f"ValueError: Cannot import {path!r}: file does not exist")
    module = types.ModuleType("_user_module_rewards")
    try:  # the user's module, run as importlib runs it
        exec(compile(source, path, "exec"), module.__dict__)
    except Exception as exc:
        raise ProgramExit(1, message=f"{type(exc).__name__}: {exc}") from None
    if missing := [name for name in names if getattr(module, name, None) is None]:
        raise ProgramExit(1, message=f"ValueError: {path!r} does not define a function named {missing[0]!r}")
    ctx.log(
        absl_line(
            ctx,
            "I",
            "train_rl.py:418",
            f"reward_fns: using {len(names)} custom reward function(s) {names} from {path}",
        )
    )
    config = types.SimpleNamespace(**args.values)
    return [functools.partial(getattr(module, name), tmvp_config=config) for name in names]


def _example(i: int, corr: int) -> dict[str, Any]:
    question, answer = f"What is {i} + 7?", i + 7
    response = f"<reasoning>{'x' * (200 + 50 * (i % 9))}</reasoning><answer>{answer + (i >= corr)}</answer>"
    return {
        "prompts": [question],
        "completions": [response],
        "answer": [json.dumps([str(answer)])],
        "question": question,
    }


def mean_reward(ctx: ProgramContext, functions: list[Callable[..., Any]], total: int, corr: int) -> float:
    """evaluate()'s ``mean_reward`` over ``total`` played examples, ``corr`` of them answered right."""
    score, count = 0.0, 0
    for i in range(total):
        try:
            row = sum(float(scores[0]) for fn in functions if (scores := fn(**_example(i, corr))))
        except Exception as exc:  # the user's function: logged, and the row counts for nothing
            ctx.log(
                absl_line(
                    ctx, "I", "evaluate_rl.py:217", f"[eval-reward] reward_fn failed on row {i}: {exc!r}"
                )
            )
            continue
        score, count = score + row, count + 1
    return score / count if count else 0.0


def score_rollout(functions: list[Callable[..., Any]]) -> None:
    """A training step's rewards: nothing catches a function's error there, so it ends the run."""
    try:
        for fn in functions:
            fn(**_example(0, 0))
    except Exception as exc:
        raise ProgramExit(1, message=f"{type(exc).__name__}: {exc}") from None
