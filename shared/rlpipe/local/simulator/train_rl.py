"""train_rl, played: GRPO with Tunix checkpoints, resumed from the newest committed step, its
evaluation and metrics lines, and where its data or max_steps ends it.

Tunix checkpoints go under ``<base>/<run_name>/checkpoints/actor/<step>/`` with ``model_params``
and ``optimizer_state`` (docs/design.md#stages-and-what-done-means, reference/manifests.md §4), saved every ``checkpoint_period``
steps and at the end, the newest N kept. Its own module because it is the one program with a
loop, data and rewards; ``rlpipe.local.simulator.maxtext`` holds the other two and names all three.
train_rl prints rewards only in its Pre/Post RL Training and Intermediate Eval lines
(``tests/fixtures/maxtext_facts.yaml``); how far its data carries it is ``.rl_eval``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from rlpipe.local.simulator import custom_rewards
from rlpipe.local.simulator.absl_log import absl_line
from rlpipe.local.simulator.gcs_io import join
from rlpipe.local.simulator.orbax import (
    CHECKPOINT_METADATA,
    COMMIT_FILE,
    checkpoint_metadata,
    commit_marker,
    committed_steps,
    now_ns,
    pytree_files,
    write_all,
)
from rlpipe.local.simulator.pinning import pinned_steps
from rlpipe.local.simulator.program import Arguments, ProgramContext, ProgramExit
from rlpipe.local.simulator.reward_curve import (
    DEFAULT_KL_WEIGHT,
    REFERENCE_LEARNING_RATE,
    SEED_FLAG,
    Curve,
    curve,
)
from rlpipe.local.simulator.rl_eval import TrainConfig, TrainSplit, eval_examples, train_data
from rlpipe.local.simulator.rl_eval import final_step as data_final_step

RL_ACTOR_DIR = ("checkpoints", "actor")  # <base>/<run_name>/checkpoints/actor/<step>/
RL_CHECKPOINTABLES = ("model_params", "optimizer_state")
RL_DEFAULT_CHECKPOINT_PERIOD = 50  # rl.yml:187
RL_DEFAULT_KEEP = 10  # rl.yml:188 max_num_checkpoints_to_keep
RL_DEFAULTS = {  # rl.yml at maxtext-v0.2.4 (lines 43, 110, 113, 120, 128, 130, 132)
    "num_iterations": "1",
    "batch_size": "1",
    "num_batches": "4",
    "num_test_batches": "5",
    "train_fraction": "1.0",
    "eval_interval": "10",
    "num_epoch": "1",
}


def reward_curve_of(args: Arguments) -> Curve:
    """This train_rl's reward curve (``reward_curve``): its learning rate, KL weight and
    ``data_shuffle_seed`` as passed; the tuned values' curve when it passes neither."""
    rate = (
        args.number("learning_rate", str(REFERENCE_LEARNING_RATE))
        if args.get("learning_rate") is not None
        else None
    )
    beta = (
        args.number("rl.grpo_beta", str(DEFAULT_KL_WEIGHT)) if args.get("rl.grpo_beta") is not None else None
    )
    seed = args.integer(SEED_FLAG, 0) if args.get(SEED_FLAG) is not None else None
    return curve(rate, beta, seed)


def _eval_line(
    step: int, total: int, rewards: Curve, custom: Callable[[int, int], float] | None = None
) -> str:
    """The fields of evaluate_rl's result as train_rl formats them: repr() of each, reward to 4
    places. ``custom(total, corr)``: the request's own functions' mean (``custom_rewards``)."""
    reward = rewards.value(step) if total > 0 else 0.0  # nothing scored: 0.0 (evaluate_rl.py:326)
    corr = round(total * min(1.0, reward))
    if custom is not None:
        reward = custom(total, corr)
    accuracy = corr / total * 100 if total > 0 else 0
    partial = min(total, corr + 1) / total * 100 if total > 0 else 0
    fmt = 100.0 if total > 0 else 0
    return (
        f"corr={corr!r}, total={total!r}, accuracy={accuracy!r}%, partial_accuracy={partial!r}%, "
        f"format_accuracy={fmt!r}%, mean_reward={reward:.4f}"
    )


def train_steps(args: Arguments) -> int:
    """MaxText's ``train_steps`` (configs/types.py:4655-4660): Tunix's max_steps."""
    iterations = args.get("rl.num_iterations") or args.get("num_iterations") or RL_DEFAULTS["num_iterations"]
    batches = args.integer("num_batches", int(RL_DEFAULTS["num_batches"]))
    fraction = args.number("train_fraction", RL_DEFAULTS["train_fraction"])
    epochs = args.integer("num_epoch", int(RL_DEFAULTS["num_epoch"]))
    return int(batches * int(iterations) * fraction * epochs)


def held_out_of(args: Arguments, rows: int | None) -> int | None:
    """What train_rl trains on when it evaluates a dataset on itself: it splits the training split
    with ``train_test_split(test_size=0.05)`` first (train_rl.py:253-279, 306-330), whose test side
    is ``ceil(0.05 × n)`` and train side the rest (datasets 5.2.0 ``arrow_dataset.py:5144,5154``)."""
    from rlpipe.core.staging import SELF_SPLIT_DATASETS

    name = args.get("dataset_name")
    if rows is None or name not in SELF_SPLIT_DATASETS or args.get("eval_dataset_name") != name:
        return rows
    return rows - math.ceil(0.05 * rows)


def train_split(ctx: ProgramContext, args: Arguments | None = None) -> TrainSplit:
    """The train split this train_rl reads: how many examples, and how many prompts the length
    filter drops. The scenario's ``train-examples``/``long-prompts`` entries for this workload win
    (``rl_eval.train_data``); else the rows of the staged files ``hf_train_files`` names
    (``inputs.staged_rows``); plentiful when train_rl is pointed at no files."""
    from rlpipe.local.simulator.inputs import staged_rows

    workload = getattr(ctx, "workload", None)  # runtime.ProgramRun's; a test's container has none
    given = train_data(getattr(workload, "faults", None) or ())
    if given.rows is not None:
        return given
    rows = staged_rows(ctx, args) if args is not None else None  # the staged split's own size
    return replace(given, rows=held_out_of(args, rows) if args is not None else rows)


def final_step(args: Arguments, split: TrainSplit, restored: int = 0) -> int:
    """The step this train_rl ends at: its data and Tunix's loop played (``rl_eval``)."""
    return data_final_step(TrainConfig.from_args(args, RL_DEFAULTS), split, restored)


def run_train(ctx: ProgramContext, args: Arguments) -> int:
    """``train_rl``: GRPO with Tunix checkpoints every ``checkpoint_period`` steps and at the
    end, resuming from the latest committed step, keeping the newest N checkpoints."""
    base = args.require("base_output_directory")
    run_name = args.require("run_name")
    load = args.require("load_parameters_path")
    iterations = int(
        args.get("rl.num_iterations") or args.get("num_iterations") or RL_DEFAULTS["num_iterations"]
    )
    period = args.integer("checkpoint_period", RL_DEFAULT_CHECKPOINT_PERIOD)
    keep = args.integer("max_num_checkpoints_to_keep", RL_DEFAULT_KEEP)
    enabled = args.boolean("enable_checkpointing", True)
    interval = args.integer("eval_interval", int(RL_DEFAULTS["eval_interval"]))
    test_batches = args.integer("num_test_batches", int(RL_DEFAULTS["num_test_batches"]))
    eval_total = eval_examples(args, RL_DEFAULTS)  # eval_batch_size, not batch_size, when set
    rewards = reward_curve_of(args)
    # With real programs the export that follows is real: the checkpoints carry the loaded parameters.
    copied = load if getattr(ctx, "real_programs", None) is not None else None
    if period < 1:
        raise ProgramExit(1, message=f"checkpoint_period={period} must be >= 1")
    pinned_steps(ctx, args)
    actor = join(base, run_name, *RL_ACTOR_DIR)
    if not ctx.exists_under(load):
        raise ProgramExit(1, message=f"no checkpoint found at load_parameters_path={load}")
    ctx.hook("start")
    ctx.write(
        join(base, run_name, "tensorboard", f"events.out.tfevents.{now_ns(ctx) // 10**9}.pathways-head"),
        b"simulated tensorboard event file\n",
    )
    done = committed_steps(ctx, actor) if enabled else []
    start = done[-1] if done else 0
    ctx.pause(ctx.duration("train_startup"))
    functions = custom_rewards.load(ctx, args)  # as the trainer is built: after the inputs step checked them
    custom = partial(custom_rewards.mean_reward, ctx, functions) if functions else None
    if start:  # Tunix restores the newest committed step while the trainer is built
        ctx.log(
            absl_line(
                ctx, "I", "checkpoint_manager.py:292", f"Restored params from step: {start} in 1.250 seconds"
            )
        )
        ctx.note("resume", str(start))
    if test_batches > 0:
        ctx.log(
            absl_line(
                ctx,
                "W",
                "train_rl.py:785",
                f"Pre RL Training: {_eval_line(start, eval_total, rewards, custom)}",
            )
        )
        if interval > 0:
            message = (
                f"[intermediate-eval] hook installed: evaluate(...) will fire every {interval} outer steps."
            )
            ctx.log(absl_line(ctx, "W", "utils_rl.py:876", message))
    ctx.log(absl_line(ctx, "W", "train_rl.py:799", "Starting RL training..."))
    # Where rl_trainer.train() ends: max_steps, or earlier where the data ends (a resumed run skips
    # one batch per restored step); no batch at all raises out of train() before any step.
    final = final_step(args, train_split(ctx, args), start)
    evaluated = [0]

    def metrics(step: int) -> None:
        """Tunix writes step N's metrics during update N+1 (or at close), then runs the hook."""
        loss = 1.0 / math.sqrt(step + 1)
        line = f"Train step {step} training loss: {loss:f}  - training perplexity: {math.exp(loss):f}"
        ctx.log(absl_line(ctx, "I", "peft_trainer.py:735", line))
        outer = step // iterations
        if (
            test_batches > 0
            and interval > 0
            and outer > 0
            and outer != evaluated[0]
            and outer % interval == 0
        ):
            evaluated[0] = outer
            message = f"Intermediate Eval (step={outer}): {_eval_line(step, eval_total, rewards, custom)}"
            ctx.log(absl_line(ctx, "W", "hooks.py:98", message))

    if start < final:
        ctx.hook("peak", start + 1)
    saved = set(done)
    for step in range(start + 1, final + 1):
        saving = enabled and step % period == 0
        ctx.hook("step", step, saving=saving or (enabled and step == final))
        ctx.pause(ctx.duration("step"))
        if functions and step == start + 1:
            custom_rewards.score_rollout(functions)
        if step > start + 1:
            metrics(step - 1)
        ctx.note("step", str(step))
        if saving:
            # Only the final step carries the loaded parameters (export reads that one): copying
            # a real conversion's ten thousand files into every step made a demo take minutes.
            _save_rl_checkpoint(ctx, actor, step, keep, copied if step == final else None)
            saved.add(step)
    if start < final:
        metrics(final)  # close(): the last buffered metrics, then the forced final save
    if enabled and final >= 1 and final not in saved and (not done or done[-1] < final):
        _save_rl_checkpoint(ctx, actor, final, keep, copied)
    ctx.log(absl_line(ctx, "W", "train_rl.py:810", "RL Training Completed Successfully!"))
    if test_batches > 0:
        ctx.log(
            absl_line(
                ctx,
                "W",
                "train_rl.py:823",
                f"Post RL Training: {_eval_line(final, eval_total, rewards, custom)}",
            )
        )
    return 0


def _copy_loaded(ctx: ProgramContext, load: str, params_dir: str) -> None:
    """The parameters train_rl loaded, unchanged, as the step's ``model_params`` (real programs:
    the real export must read a checkpoint a real program wrote, and no step is trained here).
    Orbax's own commit marker is written after, as for a played item."""
    source = load.rstrip("/") + "/"
    for uri in ctx.list(source):
        name = uri[len(source) :]
        if name.rsplit("/", 1)[-1] != COMMIT_FILE:
            ctx.copy(uri, join(params_dir, name))  # type: ignore[attr-defined]  # runtime.ProgramRun's


def _save_rl_checkpoint(
    ctx: ProgramContext, actor: str, step: int, keep: int, load: str | None = None
) -> None:
    """Orbax's order on GCS: item files, step metadata, each item's commit file, the step's last.
    ``load``: with real programs, the parameters loaded from there are the step's (``_copy_loaded``)."""
    step_dir = join(actor, str(step))
    params = pytree_files(
        [
            "decoder.decoder_norm.scale",
            "token_embedder.embedding",
            "decoder.layers_0.self_attention.query.kernel",
        ]
    )
    optimizer = pytree_files(["opt_state.0.v.decoder.decoder_norm.scale", "opt_state.1.count"])
    save_time = ctx.duration("checkpoint_save")
    if load is not None:
        _copy_loaded(ctx, load, join(step_dir, RL_CHECKPOINTABLES[0]))
    else:
        write_all(ctx, join(step_dir, RL_CHECKPOINTABLES[0]), params, save_time * 0.5)
    write_all(ctx, join(step_dir, RL_CHECKPOINTABLES[1]), optimizer, save_time * 0.5)
    ctx.write(join(step_dir, CHECKPOINT_METADATA), checkpoint_metadata(now_ns(ctx), {}))
    items = [join(step_dir, item) for item in RL_CHECKPOINTABLES]
    ctx.write(join(items[0], COMMIT_FILE), commit_marker(items[0]))
    ctx.hook("save", step)  # a preemption here leaves model_params committed but not the step
    ctx.write(join(items[1], COMMIT_FILE), commit_marker(items[1]))
    ctx.write(join(step_dir, COMMIT_FILE), commit_marker(step_dir))
    ctx.note("checkpoint", str(step))
    steps = committed_steps(ctx, actor)
    for old in steps[:-keep] if len(steps) > keep else []:
        for uri in ctx.list(join(actor, str(old))):
            ctx.delete(uri)
        ctx.note("deleted", f"step {old} (max_num_checkpoints_to_keep={keep})")
