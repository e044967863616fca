"""The ``export`` section's rules that the request alone decides: can the step it asks for ever be
exported, and how many checkpoints must train_rl keep for it (``core.export_step`` chooses the step
once training ended, from these rules and what the bucket holds).

What MaxText does, at maxtext-v0.2.4:

* train_rl hands Orbax ``CheckpointManagerOptions(save_interval_steps=checkpoint_period,
  max_to_keep=max_num_checkpoints_to_keep)`` (trainers/post_train/rl/train_rl.py:443-446): a
  checkpoint every ``checkpoint_period`` steps and the forced final save, of which only the newest
  ``max_to_keep`` stay (rl.yml:188 keeps 10; Orbax's ``LatestN`` preservation policy, as
  common/checkpointing.py:422 builds it for pre-training). Nothing passes Orbax's ``best_fn`` in this
  path, so Orbax keeps by age, not by a metric: an early step that evaluated best is deleted unless
  the run keeps enough checkpoints, and rlpipe passes ``max_num_checkpoints_to_keep`` for that.
* The intermediate evaluations (``RLTrainingHooks.on_train_step_end``, rl/hooks.py:76-105) run
  every ``eval_interval`` *outer* steps and print ``Intermediate Eval (step=N)``; the final
  evaluation is ``Post RL Training``, at the step training ended. A checkpoint step counts
  optimizer steps, which are outer steps only with ``rl.num_iterations`` 1, which ``best`` asks for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rlpipe.core import steps
from rlpipe.core.problems import Problem
from rlpipe.core.request.model import Request
from rlpipe.core.request.sweep import SelectRule
from rlpipe.core.step_counts import checkpoint_schedule

KEEP_KEY = "max_num_checkpoints_to_keep"
# best, when the request names no rule: the highest post-training mean reward, as a sweep's select
DEFAULT_SELECT = SelectRule(metric="post_mean_reward", direction="max")


def shown_steps(values: Sequence[int]) -> str:
    if len(values) <= 8:
        return ", ".join(map(str, values))
    return ", ".join(map(str, values[:5])) + f", … {values[-1]} ({len(values)} steps)"


def candidate_steps(s: steps.TrainingSteps, final: int | None = None) -> list[int]:
    """The steps ``best`` chooses from: evaluation steps that are checkpoint steps, and the final
    step (its evaluation is ``Post RL Training``). ``final``: where training ended (default: the
    config's end)."""
    end = s.final_step if final is None else final
    saved = set(checkpoint_schedule(end, s.checkpoint_period))
    return sorted({e for e in s.eval_steps(end) if e in saved} | {end})


def first_needed(step: object, s: steps.TrainingSteps) -> int | None:
    """The earliest step ``export.step`` may load (None: the last, which Orbax always keeps)."""
    if step == "best":
        return candidate_steps(s)[0]
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def kept_for(s: steps.TrainingSteps, first: int) -> int:
    """How many checkpoints ``max_to_keep`` must be for ``first`` to survive to the end."""
    return sum(1 for step in s.checkpoint_steps() if step >= first)


def retention(req: Request) -> int | None:
    """The ``max_num_checkpoints_to_keep`` rlpipe passes to train_rl so the step export may choose
    is still there; None when MaxText's own (or the request's) keeps it already."""
    s = steps.training_steps(req)
    first = first_needed(req.export.step if req.export else "last", s)
    if first is None:
        return None
    needed = kept_for(s, first)
    return needed if needed > s.max_to_keep else None


def problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """What makes ``export`` impossible, known from the request alone (validation's check)."""
    export = doc.get("export")
    if not isinstance(export, Mapping):
        return
    step, select = export.get("step"), export.get("select")
    if step != "best" and select is not None:
        yield Problem(
            "export.select", "select only chooses a step with export.step: best", "remove export.select"
        )
    if step == "last" or not (
        step == "best" or (isinstance(step, int) and not isinstance(step, bool) and step >= 1)
    ):
        return
    s = steps.steps_for_check(doc)
    if s is None:
        return
    # (enable_checkpointing: false is refused by the training-steps check: no step could be exported)
    saved = s.checkpoint_steps()
    if step == "best":
        yield from _best_problems(s, saved)
    elif step not in saved:
        yield Problem(
            "export.step",
            f"step {step} is not a checkpoint step: train_rl commits {shown_steps(saved)} (every "
            f"checkpoint_period, {s.checkpoint_period}, and the final step {s.final_step})",
            "choose one of those steps, or best",
        )
        return
    sweep = doc.get("sweep")
    judged_by = [
        name
        for name, asks in (
            ("the gate", isinstance(doc.get("gate"), Mapping)),
            ("sweep.select", isinstance(sweep, Mapping) and sweep.get("select") is not None),
        )
        if asks
    ]
    evaluated = (set(s.eval_steps()) if s.num_iterations == 1 else set()) | {s.final_step}
    if isinstance(step, int) and step not in evaluated and judged_by:
        yield Problem(
            "export.step",
            f"{' and '.join(judged_by)} {'judges' if len(judged_by) == 1 else 'judge'} the exported "
            "step by its evaluation, and train_rl "
            f"evaluates at {shown_steps(sorted(evaluated))}, not at step {step}",
            "choose a step train_rl evaluates at (a multiple of eval_interval that is a checkpoint "
            "step), or best",
        )
    first = first_needed(step, s)
    overrides = doc.get("maxtext_overrides")
    if first is not None and isinstance(overrides, Mapping) and KEEP_KEY in overrides:
        needed = kept_for(s, first)
        if needed > s.max_to_keep:
            yield Problem(
                f"maxtext_overrides.{KEEP_KEY}",
                f"{s.max_to_keep} keeps only the newest {s.max_to_keep} checkpoints, so step {first} "
                f"is deleted before export: {needed} are needed from it to the final step",
                f"remove {KEEP_KEY} (rlpipe then keeps {needed}), or set it to at least {needed}",
            )


def _best_problems(s: steps.TrainingSteps, saved: list[int]) -> Iterator[Problem]:
    if s.num_iterations != 1:
        yield Problem(
            "export.step",
            f"with rl.num_iterations {s.num_iterations} an evaluation's step counts outer steps and a "
            "checkpoint's counts optimizer steps, so no evaluation names the checkpoint it judged",
            "set export.step: last or a checkpoint step, or remove rl.num_iterations",
        )
        return
    evaluated = s.eval_steps()
    if not s.evaluates or not evaluated:
        yield Problem(
            "export.step",
            "train_rl prints no intermediate evaluation (eval_interval or num_test_batches is 0, or "
            "training ends before the first), so best could only choose the last step",
            "set export.step: last, or let train_rl evaluate during training",
        )
        return
    if len(candidate_steps(s)) < 2:
        yield Problem(
            "export.step",
            f"no evaluation falls on a checkpoint step: train_rl evaluates at {shown_steps(evaluated)} "
            f"(eval_interval {s.eval_interval}) and commits {shown_steps(saved)} (checkpoint_period "
            f"{s.checkpoint_period}), so best could only choose the last step",
            f"set training.checkpoint_period to a divisor of eval_interval ({s.eval_interval}), "
            "or export.step: last",
        )
