"""When a sweep's stopping rule judges its children, and what is wrong with ``sweep.early_stop``.

Why with the request and not with the rules (``core.early_stop``): whether a rung falls on an
evaluation step, and before the final step, is a property of the request (eval_interval,
num_batches, the iterations), checked when the request is validated, so a request that asks for
early stopping and would get none is refused with the field and the fix. The rules read the rungs
computed here at run time, and ``rlpipe plan`` shows them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from rlpipe.core import steps
from rlpipe.core.problems import Problem
from rlpipe.core.request.model import Request
from rlpipe.core.request.sweep import EarlyStop, SweepSpec


class Labelled(Protocol):
    """A sweep's child as the checks here need it (``core.request.grid.Child``)."""

    @property
    def index(self) -> int: ...
    @property
    def request(self) -> Request: ...
    @property
    def label(self) -> str: ...


@dataclass(frozen=True)
class Rungs:
    """The steps ASHA judges at, and what is wrong with the parameters (empty when usable)."""

    steps: tuple[int, ...]
    problems: tuple[Problem, ...]


def asha_rungs(*, eval_interval: int, final_step: int, eta: int, min_step: int) -> Rungs:
    """The rungs min_step * eta^k (k = 0, 1, ...) strictly below ``final_step``, and the problems.

    Why each problem: a rung is judged on the evaluation at exactly that step, so a rung that is
    not a multiple of ``eval_interval`` would never be reached by any child (and silently never
    stop one); with no rung before the final step ASHA would judge nothing, which is a request
    that asks for early stopping and gets none. ``final_step`` is in the unit of the evaluations'
    steps (outer steps). Problems name the request field to change and how.
    """
    problems: list[Problem] = []
    if eval_interval < 1:
        problems.append(
            Problem(
                "training.eval_interval",
                "early stopping decides at evaluations and this run prints none",
                "set eval_interval to 1 or more (and num_test_batches above 0)",
            )
        )
    if eta < 2:
        problems.append(
            Problem(
                "sweep.early_stop.eta",
                f"eta {eta} keeps every child at every rung",
                "give eta 2 or more (3 keeps the top third at each rung)",
            )
        )
    if min_step < 1:
        problems.append(
            Problem("sweep.early_stop.min_step", f"min_step {min_step} is not a step", "give 1 or more")
        )
    if problems:
        return Rungs((), tuple(problems))
    steps: list[int] = []
    rung = min_step
    while rung < final_step:
        steps.append(rung)
        rung *= eta
    if not steps:
        fix = (
            f"lower min_step below {final_step}, e.g. to eval_interval ({eval_interval})"
            if eval_interval < final_step
            else f"lower eval_interval below the final step {final_step} and min_step with it"
        )
        problems.append(
            Problem(
                "sweep.early_stop.min_step",
                f"the first rung, step {min_step}, is not before the final step {final_step}: no child would be judged",
                fix,
            )
        )
    off = [s for s in steps if s % eval_interval]
    if off:
        multiple = -(-min_step // eval_interval) * eval_interval
        problems.append(
            Problem(
                "sweep.early_stop.min_step",
                f"rung{'s' if len(off) != 1 else ''} at step{'s' if len(off) != 1 else ''} "
                f"{', '.join(map(str, off))} {'are' if len(off) != 1 else 'is'} not an evaluation step "
                f"(evaluations every {eval_interval} steps), so no child would be judged there",
                f"make min_step a multiple of eval_interval, e.g. {multiple}"
                if multiple < final_step
                else f"make min_step a multiple of eval_interval ({eval_interval})",
            )
        )
    return Rungs(tuple(steps), tuple(problems))


def stop_problems(spec: SweepSpec, made: Sequence[Labelled]) -> list[Problem]:
    """What is wrong with ``sweep.early_stop`` for these children (each judged on its own steps).

    Why against every child: a rung is judged on the evaluation each child prints at exactly that
    step, so it must be an evaluation step of every child, before every child's final step; a
    sweep that varies eval_interval or num_batches can make a rung one child never prints."""
    stop = spec.stopping
    if stop.rule == "none":
        return []
    if spec.select is None:
        return [
            Problem(
                "sweep.early_stop",
                f"{stop.rule} reads the metric of sweep.select at each evaluation, and this sweep has no select rule",
                "add sweep.select (a metric and its direction), or set early_stop to none",
            )
        ]
    found: dict[tuple[int, int], list[Problem]] = {}
    for child in made:
        schedule = schedule_of(child.request)
        if schedule not in found:
            found[schedule] = _schedule_problems(stop.rule, stop.eta, stop.min_step, *schedule)
    if len(found) == 1:
        return next(iter(found.values()))
    labelled: list[Problem] = []
    for child in made:  # the children differ: say whose steps each problem is about
        for p in found.pop(schedule_of(child.request), []):
            labelled.append(replace(p, message=f"for sweep child {child.index} ({child.label}): {p.message}"))
    return labelled


def schedule_of(request: Request) -> tuple[int, int]:
    """(eval_interval, the final step) in the unit of ``Intermediate Eval (step=N)``: outer steps."""
    ts = steps.training_steps(request)
    evaluates = ts.num_test_batches > 0 and ts.eval_interval > 0
    return (ts.eval_interval if evaluates else 0), ts.final_step // max(ts.num_iterations, 1)


def _schedule_problems(
    rule: str, eta: int, min_step: int | None, eval_interval: int, final: int
) -> list[Problem]:
    if rule == "asha":
        first = min_step if min_step is not None else max(eval_interval, 1)
        return list(
            asha_rungs(eval_interval=eval_interval, final_step=final, eta=eta, min_step=first).problems
        )
    if eval_interval < 1:
        return list(asha_rungs(eval_interval=0, final_step=final, eta=eta, min_step=1).problems)
    first = min_step if min_step is not None else eval_interval
    judged = [s for s in range(eval_interval, final, eval_interval) if s >= first]
    if judged:
        return []
    return [
        Problem(
            "sweep.early_stop.min_step",
            f"no evaluation falls from step {first} to before the final step {final} "
            f"(evaluations every {eval_interval} steps), so no child would be judged",
            f"lower min_step to {eval_interval}"
            if eval_interval < final
            else f"lower eval_interval below the final step {final}",
        )
    ]


def rungs(request: Request) -> tuple[int, ...]:
    """The steps a sweep child's rule judges at: ASHA's rungs, or for the median rule every
    evaluation step from min_step to before the final step. () without a rule (or with one the
    request's validation refuses)."""
    spec = request.sweep
    stop = spec.stopping if spec is not None else None
    return rungs_of(stop, request) if stop is not None else ()


def rungs_of(stop: EarlyStop, request: Request) -> tuple[int, ...]:
    """``rungs`` for a child, whose own request carries no sweep: ``stop`` is its parent's."""
    eval_interval, final = schedule_of(request)
    if stop.rule == "none" or eval_interval < 1:
        return ()
    first = stop.min_step if stop.min_step is not None else eval_interval
    if stop.rule == "asha":
        made = asha_rungs(eval_interval=eval_interval, final_step=final, eta=stop.eta, min_step=first)
        return () if made.problems else made.steps
    return tuple(s for s in range(eval_interval, final, eval_interval) if s >= first)
