"""Which committed step export turns into the served model (``export.step``: last, best or a
step), chosen once training ended, and what may leave the bucket once export has ended.

Why here, pure: the stage function chooses from what the bucket holds and the evaluations the run's
record keeps, and the pruning after export keeps what the run's own retention would have kept
(``core.request.export_checks``: what the request alone decides, the retention that keeps the
step included, with the MaxText and Orbax behaviour they follow).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlpipe.core import gate
from rlpipe.core.request.export_checks import DEFAULT_SELECT, shown_steps
from rlpipe.core.request.model import ExportSpec
from rlpipe.core.runs.stop_record import evaluations


class NoSuchStep(ValueError):
    """The step export.step asks for is not in the bucket: a permanent failure, which says why."""


@dataclass(frozen=True)
class ExportChoice:
    step: int
    reason: str  # in words, with the numbers: what the record and the model card say


def choose(
    spec: ExportSpec | None, results: Mapping[str, Any], committed: Sequence[int], final: int
) -> ExportChoice:
    """The step export loads, once training ended at ``final`` with ``committed`` steps in the
    bucket and the record's ``results``. Raises :class:`NoSuchStep`, which says why."""
    if spec is None or spec.step == "last":
        return ExportChoice(final, f"the last step, {final} (export.step: last)")
    if spec.step != "best":
        if spec.step not in committed:
            raise NoSuchStep(
                f"export.step {spec.step} has no committed checkpoint: training ended at step {final} "
                f"and the bucket holds {shown_steps(sorted(committed)) or 'no step'}; a retry asks for the "
                "same step, so submit the request again naming one of those steps, or export.step: last"
            )
        return ExportChoice(spec.step, f"step {spec.step}, as export.step asks (training ended at {final})")
    rule = spec.select or DEFAULT_SELECT
    values = {s: v for s, v in evaluations(results, rule.metric).items() if s in committed and s <= final}
    post = gate.metric(results, rule.metric)
    if post is not None and final in committed:
        values[final] = post  # the final evaluation is the one train_rl printed last, at this step
    if not values:
        raise NoSuchStep(
            f"export.step best found no evaluated step in the bucket: {rule.metric} was read at no "
            f"committed step (the bucket holds {shown_steps(sorted(committed)) or 'no step'}); the "
            "head's log has no evaluation line: `rlpipe logs RUN --stage train` shows what it printed"
        )
    sign = 1 if rule.direction == "max" else -1
    # The best value; on a tie the later step, which trained longer on the same evidence.
    best = max(values, key=lambda step: (sign * values[step], step))
    table = ", ".join(f"{step}: {values[step]:.4f}" for step in sorted(values))
    where = "the last step" if best == final else f"step {best} of {final}"
    return ExportChoice(
        best,
        f"{where}: the best {rule.metric} ({'highest' if sign > 0 else 'lowest'}) of the evaluated "
        f"checkpoints ({table})",
    )


def kept_after_export(committed: Sequence[int], exported: int, keep: int) -> set[int]:
    """The steps that stay once export has ended: the exported one and the newest ``keep`` committed
    (what the run's own retention would have left). Every other step was kept only for the choice."""
    newest = set(sorted(committed)[-keep:]) if keep > 0 else set()
    return newest | {exported}
