"""A request's own reward functions score the played train_rl's evaluations, as MaxText 0.2.4's do.

evaluate_rl.py:186-219,292-294,326: with custom functions, ``mean_reward`` is the mean over
(prompt, response) of the sum of their scores, and a function that raises is logged and its row
left out. Before this, a custom-reward run drew exactly the built-in curve, so a user could not
tell the functions ran. The expected figures are worked out by hand from the played completions
(``rlpipe.local.simulator.custom_rewards``).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from rlpipe.core import staging
from rlpipe.local.simulator.maxtext import PROGRAMS
from rlpipe.local.simulator.program import Arguments, ProgramExit
from tests.core.test_maxtext_facts import CONVERTED, PINNED, TRAINED, FakeContainer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rewards" / "exact_match_length.py"
COPY = "gs://b/runs/rrun00000001/inputs/rewards.py"
EVAL = re.compile(
    r"(?:Pre RL Training|Intermediate Eval \(step=\d+\)|Post RL Training): corr=(\d+), total=(\d+),.* mean_reward=(\S+)$"
)


def _train(source: bytes, functions: str, ctx: FakeContainer | None = None) -> FakeContainer:
    """The played train_rl with this reward file as the run's pinned copy; ``ctx``: the
    container to run in (a test reads what it printed after the program raised)."""
    ctx = ctx if ctx is not None else _container()
    ctx.files[COPY] = source
    local = staging.user_file_path("rewards")
    argv = [
        "run_name=rl",
        f"base_output_directory={TRAINED}",
        f"load_parameters_path={CONVERTED}0/items/",
        "batch_size=4",
        "num_batches=20",
        f"reward_functions_path={local}",
        f"reward_functions={functions}",
    ]
    files = [{"role": "rewards", "uri": COPY, "sha256": "", "local": local}]
    env = {
        "RLPIPE_PINNED_URI": PINNED,
        "RLPIPE_PINNED_DIR": "/tmp/rlpipe/hf-source",
        staging.ENV_USER_FILES: json.dumps(files),
    }
    args = replace(Arguments.parse(argv), env=env, steps=("fetch",))
    assert PROGRAMS["train"](ctx, args) == 0
    return ctx


def _container() -> FakeContainer:
    return FakeContainer({CONVERTED + "0/items/_METADATA": b"{}", PINNED + "rlpipe-pinned.json": b"{}"})


def _evaluations(ctx: FakeContainer) -> list[tuple[int, int, float]]:
    return [(int(m[1]), int(m[2]), float(m[3])) for line in ctx.lines if (m := EVAL.search(line))]


def test_the_examples_exact_match_and_length_penalty_score_every_evaluation() -> None:
    ctx = _train(EXAMPLE.read_bytes(), "exact_match, length_penalty")
    assert any(
        "reward_fns: using 2 custom reward function(s) ['exact_match', 'length_penalty']" in line
        for line in ctx.lines
    )
    evaluations = _evaluations(ctx)
    assert len(evaluations) == 4  # before, at steps 10 and 20 (eval_interval 10), after
    # 20 examples (5 test batches of 4). exact_match: 1 for each of the corr right answers.
    # length_penalty: 0.001 per character past 400. Example i's completion is 240 + 50·(i mod 9)
    # characters plus the digits of i + 7; past 400 are i mod 9 = 4..8, i.e. i = 4..8 and 13..17
    # (two digits): 2 × (42 + 92 + 142 + 192 + 242) = 1420 characters, 0.071 a completion.
    for corr, total, reward in evaluations:
        assert total == 20
        assert reward == pytest.approx(corr / 20 - 0.071, abs=5e-5), (corr, reward)
    assert evaluations[0][2] != evaluations[-1][2]  # and it rises as the played policy learns


def test_a_constant_function_is_the_mean_reward_and_not_the_built_in_curve() -> None:
    ctx = _train(
        b"def half(prompts, completions, **kwargs):\n    return [0.5 for _ in completions]\n", "half"
    )
    assert [reward for _, _, reward in _evaluations(ctx)] == [0.5] * 4


def test_a_function_is_given_the_config_as_make_reward_fn_gives_it() -> None:
    """The shape rl.yml documents, ``f(prompts, completions, tmvp_config, **kwargs)``: batch_size 4."""
    source = b"def quarter_batch(prompts, completions, tmvp_config, **kwargs):\n    return [int(tmvp_config.batch_size) / 8]\n"
    ctx = _train(source, "quarter_batch")
    assert [reward for _, _, reward in _evaluations(ctx)] == [0.5] * 4


def test_a_function_that_raises_is_logged_per_row_in_evaluation_and_ends_the_training() -> None:
    """evaluate() logs and leaves the row out; the first training step's rewards let it through."""
    ctx = _container()
    with pytest.raises(ProgramExit, match="ZeroDivisionError: division by zero"):
        _train(b"def broken(prompts, completions, **kwargs):\n    return 1 / 0\n", "broken", ctx)
    assert [reward for _, _, reward in _evaluations(ctx)] == [0.0]  # Pre RL Training, then the end
    assert any("[eval-reward] reward_fn failed on row 0: ZeroDivisionError(" in line for line in ctx.lines)


def test_a_file_that_fails_to_import_ends_the_program_naming_the_error() -> None:
    with pytest.raises(ProgramExit, match="ModuleNotFoundError: No module named 'no_such_module'"):
        _train(b"import no_such_module\n", "anything")


def test_a_name_the_file_does_not_define_fails_the_program_naming_it() -> None:
    with pytest.raises(ProgramExit, match="does not define a function named 'nope'"):
        _train(EXAMPLE.read_bytes(), "exact_match,nope")
