"""When a finished training attempt is done: the train done rule's verdict.

train_rl exited 0 (the workload succeeded), its log ends the way train_rl ends a training, and the
newest step-level commit is the last step it reported: then training is done, at that step, even
below the config's final step (the data ended it; ``core.steps`` derives the end). Anything else
after an exit 0 names the evidence that is missing. Pure: numbers and strings in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rlpipe.core.steps import TrainingSteps

END_LINE = "RL Training Completed Successfully!"  # train_rl.py:810, after Tunix's loop returned


class TrainVerdict(StrEnum):
    DONE = "done"  # a clean end: exit 0, the end line, the newest commit is the last reported step
    NOT_DONE = "not-done"  # still running, or failed (the cluster's failure class decides what next)
    NO_CHECKPOINT = "no-checkpoint"  # exit 0 and nothing committed
    NO_END_LINE = "no-end-line"  # exit 0 without "RL Training Completed Successfully!" in the log
    STEP_MISMATCH = "step-mismatch"  # exit 0, but the newest commit is not the last step reported


@dataclass(frozen=True)
class TrainOutcome:
    verdict: TrainVerdict
    reason: str
    committed: int | None  # the newest step-level commit
    expected: int  # the step a run with plentiful data ends at (the config's)
    reported: int | None = None  # the last step this attempt's log reported
    explanation: str | None = None  # done: why the end is not max_steps, in words (None: it is)

    @property
    def final(self) -> int | None:
        """The step training ended at, when it ended cleanly."""
        return self.committed if self.verdict == TrainVerdict.DONE else None

    @property
    def short(self) -> bool:
        """A clean end below the config's final step (the data ran out earlier)."""
        return self.final is not None and self.final < self.expected


def train_outcome(
    head: str,
    committed: int | None,
    effective: TrainingSteps,
    *,
    reported: int | None = None,
    end_line: bool = False,
    resumed_from: int | None = None,
) -> TrainOutcome:
    """What a finished (or not yet finished) training attempt means.

    ``head`` is the workload's phase as the cluster reports it (``succeeded``: the head's program
    exited 0 and the JobSet completed). ``committed`` is the newest step with its step-level
    ``commit_success.txt`` (``layout.latest_committed_step``). ``reported`` is the last
    ``Train step N`` this attempt printed (or, if it printed none, the step it restored), and
    ``end_line`` whether it printed ``RL Training Completed Successfully!``, which train_rl prints
    only after Tunix's loop returned and close() saved the last step (train_rl.py:800-810).

    Done means all three agree: exit 0, the end line, and the newest commit is the last step
    reported. Where that step is below the config's final step, the data ran out earlier (a short
    split, prompts dropped by the length filter, a resume's skipped batches): a clean end, with
    the reason in words.
    """
    expected = effective.final_step

    def out(verdict: TrainVerdict, reason: str) -> TrainOutcome:
        return TrainOutcome(verdict, reason, committed, expected, reported)

    if head != "succeeded":
        return out(TrainVerdict.NOT_DONE, f"the head is {head}")
    if committed is None:
        return out(TrainVerdict.NO_CHECKPOINT, "train_rl exited 0 but committed no checkpoint")
    if not end_line:
        return out(
            TrainVerdict.NO_END_LINE,
            f"train_rl exited 0 with step {committed} committed, but its log never printed "
            f"{END_LINE!r}: training did not end the way train_rl ends it",
        )
    if reported is None:
        return out(
            TrainVerdict.STEP_MISMATCH,
            f"train_rl exited 0 with step {committed} committed, but its log reported no training "
            "step and no restored one, so the commit cannot be matched to this attempt",
        )
    if committed != reported:
        return out(
            TrainVerdict.STEP_MISMATCH,
            f"train_rl exited 0 but the newest committed step is {committed} while its log's last "
            f"step is {reported}: the last save did not land (or the directory holds other checkpoints)",
        )
    limit = max(expected, effective.final_with_examples(None, resumed_from=resumed_from or 0))
    if committed > limit and effective.rule_known:
        return out(
            TrainVerdict.STEP_MISMATCH,
            f"step {committed} is committed beyond the expected final step {expected}: the step rule "
            "(core/steps.py) does not match what train_rl did, or the output directory holds another "
            "configuration's checkpoints",
        )
    why = effective.explain_end(committed, resumed_from=resumed_from)
    reason = f"final step {committed} committed" + (f"; {why}" if why else "")
    return TrainOutcome(TrainVerdict.DONE, reason, committed, expected, reported, why)
