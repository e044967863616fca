"""Reading rewards and progress from the head's log: only train_rl's real lines count.

The formats (and where they come from) are in tests/fixtures/maxtext_facts.yaml; these tests
pin down the edges: how absl prefixes lines, repr() values, nan, and what must not count.
"""

from __future__ import annotations

import json

from rlpipe.core import train_log

W = "W0102 15:04:05.123456 140318812"
I = "I0102 15:04:05.123456 140318812"  # noqa: E741 - absl's severity letter
PRE = f"{W} train_rl.py:785] Pre RL Training: corr=2, total=20, accuracy=10.0%, partial_accuracy=15.0%, format_accuracy=100.0%, mean_reward=0.1200"
POST = f"{W} train_rl.py:823] Post RL Training: corr=11, total=20, accuracy=55.00000000000001%, partial_accuracy=60.0%, format_accuracy=100.0%, mean_reward=0.5627"


def _step(n: int) -> str:
    return f"{I} peft_trainer.py:735] Train step {n} training loss: 0.500000  - training perplexity: 1.648721"


def _mid(n: int, reward: str) -> str:
    return (
        f"{W} hooks.py:98] Intermediate Eval (step={n}): corr=3, total=20, accuracy=15.0%, "
        f"partial_accuracy=33.33333333333333%, format_accuracy=90.0%, mean_reward={reward}"
    )


def test_a_whole_run() -> None:
    log = "\n".join([PRE, _step(1), _step(10), _mid(10, "0.3417"), _step(20), _mid(20, "0.4100"), POST])
    parsed = train_log.parse(log)
    assert parsed.pre is not None and parsed.pre.mean_reward == 0.12 and parsed.pre.total == 20
    assert parsed.post is not None and parsed.post.accuracy == 55.00000000000001
    assert [(e.step, e.mean_reward, e.accuracy) for e in parsed.intermediate] == [
        (10, 0.3417, 15.0),
        (20, 0.41, 15.0),
    ]
    assert parsed.latest_step == 20 and parsed.latest_loss == 0.5
    progress = parsed.progress()
    assert progress == {
        "step": 20,
        "mean_reward": 0.5627,
        "pre_mean_reward": 0.12,
        "pre_accuracy": 10.0,
        "eval_step": 20,
        "eval_mean_reward": 0.41,
        "post_mean_reward": 0.5627,
        "post_accuracy": 55.00000000000001,
    }


def test_the_latest_reward_while_training_is_the_last_eval() -> None:
    parsed = train_log.parse("\n".join([PRE, _step(12), _mid(10, "0.3417")]))
    assert parsed.latest_mean_reward == 0.3417 and parsed.post is None
    assert train_log.parse(PRE).latest_mean_reward == 0.12


def test_lines_with_the_local_stacks_marking_and_kubectl_timestamps() -> None:
    for prefix in ("[simulated] ", "2026-01-02T15:04:05.123456789Z "):
        assert train_log.parse(prefix + PRE).pre is not None


def test_what_does_not_count() -> None:
    noise = [
        # the formats rlpipe's earlier simulator printed; no MaxText line looks like them
        "[simulated] Reshard finished; train step 12/50: loss=0.2774 mean_reward=0.3300",
        "[simulated] Pre RL Training: step=0 eval_batches=4 mean_reward=0.1200",
        # the real message without absl's prefix (e.g. quoted in another message)
        PRE.split("] ", 1)[1],
        # Tunix's eval-mode line and the hook's failure line
        f"{I} peft_trainer.py:841] Train step 10 eval loss: 0.1 - eval perplexity: 1.1",
        f"{W} hooks.py:104] [intermediate-eval] step=10 failed: RuntimeError('boom')",
        # the evaluator's progress line (INFO, every 10 items)
        f"{I} evaluate_rl.py:314] ===> corr=3, total=10, corr / total * 100=30.0, partially_corr / total * 100=40.0, corr_format / total * 100=90.0",
    ]
    assert train_log.parse("\n".join(noise)).progress() is None


def test_values_as_repr_prints_them() -> None:
    zero = f"{W} train_rl.py:823] Post RL Training: corr=0, total=0, accuracy=0%, partial_accuracy=0%, format_accuracy=0%, mean_reward=0.0000"
    pass_at_1 = f"{W} train_rl.py:785] Pre RL Training: corr=2.5, total=4, accuracy=62.5%, partial_accuracy=62.5%, format_accuracy=1e-05%, mean_reward=-0.2500"
    assert train_log.parse(zero).post == train_log.Eval(0, 0, 0, 0, 0, 0.0)
    pre = train_log.parse(pass_at_1).pre
    assert pre is not None and (pre.corr, pre.format_accuracy, pre.mean_reward) == (2.5, 1e-05, -0.25)


def test_nan_is_reported_as_missing_in_the_ledger() -> None:
    line = _mid(10, "nan")
    parsed = train_log.parse(line)
    assert parsed.intermediate[0].mean_reward != parsed.intermediate[0].mean_reward  # nan
    progress = parsed.progress()
    assert progress is not None and progress["mean_reward"] is None
    json.dumps(progress, allow_nan=False)


def test_the_last_pre_line_wins() -> None:
    second = PRE.replace("mean_reward=0.1200", "mean_reward=0.3300")
    assert train_log.parse(f"{PRE}\n{second}").pre.mean_reward == 0.33  # type: ignore[union-attr]


def test_drop_in_for_the_stage_function() -> None:
    assert train_log.training_progress("") is None
    assert train_log.training_progress(_step(3)) == {"step": 3, "mean_reward": None}
