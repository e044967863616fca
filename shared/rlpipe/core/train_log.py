"""What the head's log says about a training run, read from the lines train_rl really prints.

MaxText 0.2.4 prints rewards in three WARNING lines only (through absl, so each line starts with
absl's prefix ``W0102 15:04:05.123456 12345 train_rl.py:785] ``):

* ``Pre RL Training: corr=…, total=…, accuracy=…%, partial_accuracy=…%, format_accuracy=…%,
  mean_reward=…`` before training (only when ``num_test_batches > 0``);
* ``Intermediate Eval (step=N): …`` with the same fields, every ``eval_interval`` outer steps;
* ``Post RL Training: …`` with the same fields, after training.

Progress comes from Tunix's INFO line ``Train step N training loss: … - training perplexity: …``,
where N counts optimizer updates (the unit of checkpoint steps). There is no per-step reward line.
Two more lines tell how an attempt began and ended: Tunix's ``Restored params from step: N in …
seconds`` when it resumed, and train_rl's WARNING ``RL Training Completed Successfully!``, printed
only after Tunix's training loop returned (train_rl.py:800-810), i.e. after close() saved the last
step; a clean end of training is that line, not the exit code alone.
The facts, with their sources, are in ``tests/fixtures/maxtext_facts.yaml``.

Pure: text in, values out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# `{x=}` prints repr(): ints, floats such as 33.33333333333333 or 1e-05, and nan/inf; `:.4f` can
# also print nan or inf.
_NUM = r"-?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|nan|inf)"
_FIELDS = (
    rf"corr=(?P<corr>{_NUM}), total=(?P<total>[0-9]+), accuracy=(?P<accuracy>{_NUM})%, "
    rf"partial_accuracy=(?P<partial>{_NUM})%, format_accuracy=(?P<format>{_NUM})%, "
    rf"mean_reward=(?P<reward>{_NUM})\s*$"
)
# absl's prefix: severity letter, MMDD, time with microseconds, thread id, file:line, "] ".
ABSL_PREFIX = r"[IWEF][0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} +[0-9]+ [^ \]]+:[0-9]+\] "
_PREFIX = rf"(?:^|\s|\]){ABSL_PREFIX}"

PRE_EVAL = re.compile(rf"{_PREFIX}Pre RL Training: {_FIELDS}")
POST_EVAL = re.compile(rf"{_PREFIX}Post RL Training: {_FIELDS}")
INTERMEDIATE_EVAL = re.compile(rf"{_PREFIX}Intermediate Eval \(step=(?P<step>[0-9]+)\): {_FIELDS}")
RESTORED = re.compile(rf"{_PREFIX}Restored params from step: (?P<step>[0-9]+) in [0-9.]+ seconds\s*$")
COMPLETED = re.compile(rf"{_PREFIX}RL Training Completed Successfully!\s*$")
TRAIN_STEP = re.compile(
    rf"{_PREFIX}Train step (?P<step>[0-9]+) training loss: (?P<loss>{_NUM})  - training perplexity: "
    rf"(?P<perplexity>{_NUM})\s*$"
)


@dataclass(frozen=True)
class Eval:
    """One evaluation's numbers, as train_rl printed them (accuracies in percent)."""

    corr: float
    total: int
    accuracy: float
    partial_accuracy: float
    format_accuracy: float
    mean_reward: float


@dataclass(frozen=True)
class IntermediateEval:
    step: int  # outer (batch) steps: rl_cluster.global_steps, not optimizer updates
    eval: Eval

    @property
    def mean_reward(self) -> float:
        return self.eval.mean_reward

    @property
    def accuracy(self) -> float:
        return self.eval.accuracy


@dataclass(frozen=True)
class TrainLog:
    pre: Eval | None = None
    post: Eval | None = None
    intermediate: tuple[IntermediateEval, ...] = ()
    latest_step: int | None = None  # the newest "Train step N" (optimizer updates)
    latest_loss: float | None = None
    restored_step: int | None = None  # "Restored params from step: N": the attempt resumed at N
    completed: bool = False  # "RL Training Completed Successfully!": Tunix's loop returned

    @property
    def latest_mean_reward(self) -> float | None:
        """The newest reward printed: post, else the last intermediate eval, else pre."""
        if self.post is not None:
            return self.post.mean_reward
        if self.intermediate:
            return self.intermediate[-1].mean_reward
        return self.pre.mean_reward if self.pre is not None else None

    def progress(self) -> dict[str, Any] | None:
        """A JSON-ready summary for the run's ledger, or None when the log has none of the lines."""
        if self.pre is None and self.post is None and not self.intermediate and self.latest_step is None:
            return None
        out: dict[str, Any] = {"step": self.latest_step, "mean_reward": _json_number(self.latest_mean_reward)}
        if self.pre is not None:
            out["pre_mean_reward"] = _json_number(self.pre.mean_reward)
            out["pre_accuracy"] = _json_number(self.pre.accuracy)
        if self.intermediate:
            last = self.intermediate[-1]
            out["eval_step"] = last.step
            out["eval_mean_reward"] = _json_number(last.mean_reward)
        if self.post is not None:
            out["post_mean_reward"] = _json_number(self.post.mean_reward)
            out["post_accuracy"] = _json_number(self.post.accuracy)
        return out

    def results(self) -> dict[str, Any]:
        """Every evaluation, JSON-ready, for the run's ledger ``results`` (the gate reads these)."""
        return {
            "pre": _eval_dict(self.pre),
            "post": _eval_dict(self.post),
            "intermediate": [
                {
                    "step": e.step,
                    "mean_reward": _json_number(e.mean_reward),
                    "accuracy": _json_number(e.accuracy),
                }
                for e in self.intermediate
            ],
        }


def _eval_dict(e: Eval | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "corr": _json_number(e.corr),
        "total": e.total,
        "accuracy": _json_number(e.accuracy),
        "partial_accuracy": _json_number(e.partial_accuracy),
        "format_accuracy": _json_number(e.format_accuracy),
        "mean_reward": _json_number(e.mean_reward),
    }


def _json_number(value: float | None) -> float | None:
    """JSON has no nan or inf: such values are reported as missing."""
    return value if value is None or math.isfinite(value) else None


def _eval(m: re.Match[str]) -> Eval:
    return Eval(
        corr=float(m["corr"]),
        total=int(m["total"]),
        accuracy=float(m["accuracy"]),
        partial_accuracy=float(m["partial"]),
        format_accuracy=float(m["format"]),
        mean_reward=float(m["reward"]),
    )


def parse(text: str) -> TrainLog:
    """Every reward, progress, restore and end line in a head's log (any other line is ignored).

    When a line occurs more than once (an attempt's log holds one run of train_rl, but a caller
    may join several), the last one wins for ``pre``, ``post`` and the latest step.
    """
    pre = post = None
    intermediate: list[IntermediateEval] = []
    step: int | None = None
    loss: float | None = None
    restored: int | None = None
    completed = False
    for line in text.splitlines():
        if "Train step " in line and (m := TRAIN_STEP.search(line)):
            step, loss = int(m["step"]), float(m["loss"])
        elif "Restored params from step: " in line and (m := RESTORED.search(line)):
            restored = int(m["step"])
        elif "RL Training Completed Successfully!" in line and COMPLETED.search(line):
            completed = True
        elif "Intermediate Eval (" in line and (m := INTERMEDIATE_EVAL.search(line)):
            intermediate.append(IntermediateEval(int(m["step"]), _eval(m)))
        elif "Pre RL Training: " in line and (m := PRE_EVAL.search(line)):
            pre = _eval(m)
        elif "Post RL Training: " in line and (m := POST_EVAL.search(line)):
            post = _eval(m)
    return TrainLog(pre, post, tuple(intermediate), step, loss, restored, completed)


def training_progress(log_text: str) -> dict[str, Any] | None:
    """Drop-in for ``control.stage.service.training_progress``: the ledger's ``progress`` from a log tail."""
    return parse(log_text).progress()


# Where the stage keeps one attempt's end evidence, folded over every read of its log (the run's
# ``progress``, which status reads back on its next poll).
ATTEMPT_LOG = "attempt_log"


def fold_attempt(previous: Any, attempt: int, parsed: TrainLog) -> dict[str, Any]:
    """One attempt's end evidence after one more read of its log, for the train done rule
    (``core.train_verdict.train_outcome``): its last ``Train step``, the step it restored, and whether it
    printed the end line. ``previous`` is what earlier reads folded (another attempt's counts for
    nothing: each attempt is one run of train_rl)."""
    same = previous if isinstance(previous, dict) and previous.get("attempt") == attempt else {}
    last = parsed.latest_step if parsed.latest_step is not None else same.get("last_step")
    restored = parsed.restored_step if parsed.restored_step is not None else same.get("restored_step")
    return {
        "attempt": attempt,
        "last_step": last,
        "restored_step": restored,
        "end_line": bool(parsed.completed or same.get("end_line")),
    }


def reported_step(evidence: dict[str, Any]) -> int | None:
    """The step an attempt's log says it stopped at: its last ``Train step``, else (it trained
    nothing more) the step it restored."""
    last = evidence.get("last_step")
    return last if isinstance(last, int) else evidence.get("restored_step")
