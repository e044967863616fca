"""What a sweep's early-stopping rule can save, bounded before it runs (``rlpipe plan``).

Why bounds and not a forecast: how much a rule saves depends on the reward curves, which nobody
knows before the children train. What the rule's definition fixes (``core.early_stop``) is how
little it can leave trained and how much: a plan that says "between 16% and 100% of the steps of
``none``" lets a person see whether a rule is worth asking for, and no number in it is a guess.

The worst case is no child stopped: every child trains to its final step, as under ``none``.

The best case, derived from the rules as ``core.early_stop`` states them, with n children, at most
P of them training at once (``max_parallel``), each judged at every evaluation it records:

* No child is judged before its first judged step f (ASHA's first rung; the median rule's first
  evaluation step from ``min_step``), so every child trains at least to f.
* ASHA judges a child once at each rung, when it reaches it (``asha``'s ``new_steps``). The first
  eta-1 children to reach any rung find fewer than eta there and go on; so eta-1 children reach
  the second rung, are again the first there, and so on: at least eta-1 train to their final
  step, whatever the slots. Every other child can be stopped at the first rung f.
* Median: some children cannot be stopped the first time they are judged; call their count k. A
  child judged with fewer than 3 peers evaluated goes on (``MIN_PEERS``); when f is a child's
  first evaluation, the first 3 children to evaluate are judged so, k = 3; when the children
  evaluate before f, they can all have peers by f, and only the slot bound below holds.
* Median: at least 2 children are never stopped. Take the stopped child X whose best is the
  highest of the stopped children's; a stopped peer's running average is at most its own best,
  so at most X's; X was judged with at least 3 peers, and a median of 3 or more values above X's
  best needs at least 2 of them above it: 2 children that are never stopped.
* Median: nobody can be stopped before 4 children have been judged, so until then a slot frees
  only when a child ends at its final step: with P <= 3, at least 4-P children end at their
  final step. The others of the k are judged again at their next evaluation, f + eval_interval,
  where the rule may stop them.
* Every other child can be stopped at f (values and arrival order chosen to make it so).

So, at best: ASHA, n-(eta-1) children train to f and eta-1 to their final step; median, n-k
train to f, max(2, 4-P) to their final step, and the rest of the k to f + eval_interval (the
final step if that is not before it). With fewer children than the rule needs to stop one (eta;
4), nobody is ever stopped. ``tests/core/test_plan_early_stop.py`` holds this to the rules: simulated sweeps
decided by ``core.early_stop`` itself never train less, and small ones reach it. When every child has the same steps this is reached by some order of
arrival and some values (``tight``); when the children's steps differ, the costliest roles are
given to the cheapest children and the number is a lower bound only. Chip-hours follow training
steps (``rl.num_iterations`` per evaluation step; every child has the same slice), so the bound is
in training steps and in the fraction of ``none``; ``rlpipe plan --step-seconds`` turns it into
chip-hours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlpipe.core import early_stop, steps
from rlpipe.core.request import Request, stop_schedule
from rlpipe.core.request.sweep import EarlyStop

# The two assumptions a person must know to read the bound; ``rlpipe plan`` prints them.
ASSUMPTION = (
    "best: the rule stops every child it may, as early as it may (any order of arrival, any "
    "rewards; asha judges a child once per rung, median at every evaluation); worst: no child "
    "stopped, as none"
)


@dataclass(frozen=True)
class ChildSteps:
    """One child as the bound needs it: its evaluation steps and the steps its rule judges at."""

    index: int
    eval_interval: int  # outer steps between evaluations
    final: int  # the final outer step
    judged: tuple[int, ...]  # ASHA's rungs, or the median rule's steps (``stop_schedule.rungs_of``)
    per_step: int = 1  # training steps per outer step (rl.num_iterations): what chip-hours follow


@dataclass(frozen=True)
class Bound:
    """Training steps the sweep uses under ``none`` and at best under the rule; ``best_by_child``
    is each child's outer step in the best case (None when the bound is not tight)."""

    rule: str
    none_steps: int
    best_steps: int
    first_judged: int  # k: the children judged too early to be stopped the first time
    to_final: int  # at least this many train to their final step
    judged_again: int  # the others of the k, stopped at their next evaluation
    tight: bool
    best_by_child: dict[int, int] | None

    @property
    def best_fraction(self) -> float:
        return self.best_steps / self.none_steps if self.none_steps else 1.0


def _immune(rule: str, eta: int, children: Sequence[ChildSteps]) -> int:
    if rule == "asha":
        return eta - 1
    # The median rule: immune only when the first judged step is a child's first evaluation.
    if all(c.judged and c.judged[0] <= c.eval_interval for c in children):
        return early_stop.MIN_PEERS
    return 0


def bound(rule: str, eta: int, max_parallel: int, children: Sequence[ChildSteps]) -> Bound:
    """The best and worst the rule allows (the module's docstring derives it)."""
    none = sum(c.final * c.per_step for c in children)
    n = len(children)
    judgeable = [c for c in children if c.judged]
    peers_needed = eta if rule == "asha" else early_stop.MIN_PEERS + 1
    if rule not in ("asha", "median") or n < peers_needed or len(judgeable) < n:
        return Bound(rule, none, none, 0, n, 0, True, {c.index: c.final for c in children})
    k = _immune(rule, eta, children)
    slots = max(1, min(max_parallel, n))
    gate = eta - 1 if rule == "asha" else early_stop.MIN_PEERS  # judged before anyone can stop
    if rule == "asha":  # the first eta-1 at every rung go on, and a rung is judged once per child
        to_final, again = min(n, eta - 1), 0
    else:
        to_final = min(n, max(2, gate + 1 - slots))
        again = max(0, k - to_final)
    first = {c.index: c.judged[0] for c in children}
    extra_final = sorted(((c.final - first[c.index]) * c.per_step, c.index) for c in children)
    nxt = {c.index: min(first[c.index] + c.eval_interval, c.final) for c in children}
    extra_again = sorted(((nxt[c.index] - first[c.index]) * c.per_step, c.index) for c in children)
    base = sum(first[c.index] * c.per_step for c in children)
    shared = len({(c.eval_interval, c.final, c.judged, c.per_step) for c in children}) == 1
    if shared:  # any children may take the roles: exact, and who trains how far is known
        steps = dict(first)
        for _, index in extra_final[:to_final]:
            steps[index] = next(c.final for c in children if c.index == index)
        for _, index in [e for e in extra_again if steps[e[1]] == first[e[1]]][:again]:
            steps[index] = nxt[index]
        best = sum(steps[c.index] * c.per_step for c in children)
        return Bound(rule, none, best, k, to_final, again, True, steps)
    # Children whose steps differ: the cheapest child for each role, possibly twice: a lower bound.
    best = base + sum(e for e, _ in extra_final[:to_final]) + sum(e for e, _ in extra_again[:again])
    return Bound(rule, none, best, k, to_final, again, False, None)


def child_steps(index: int, stop: EarlyStop, request: Request) -> ChildSteps:
    """A sweep child's steps as the rule sees them (``stop``: its parent's ``sweep.early_stop``)."""
    eval_interval, final = stop_schedule.schedule_of(request)
    per_step = max(steps.training_steps(request).num_iterations, 1)
    return ChildSteps(index, eval_interval, final, stop_schedule.rungs_of(stop, request), per_step)


def plan_entry(
    stop: EarlyStop,
    children: Sequence[tuple[int, Request]],
    max_parallel: int,
    none_chip_hours: float | None,
    *,
    poll_seconds: float | None = None,
    step_seconds: float | None = None,
) -> dict[str, Any] | None:
    """The plan's ``sweep.early_stop`` (docs/plan.md): the rule, the steps it judges at, and the
    best and worst it allows against ``none`` in training steps, as a fraction, and in chip-hours
    when the plan has them (``none_chip_hours``: the sweep's total). None: the sweep stops nobody.

    ``stop_delay``: a child the rule stops does not stop at the step it is judged at. The control
    plane judges it when it reads the child's status, at the workflow's next poll
    (``poll_seconds``, the deployment's RLPIPE_CALLBACK_TIMEOUT_SECONDS) at the latest, and the
    child trains on until its workload is deleted. With ``step_seconds`` that delay is counted:
    each child the best case stops trains up to ``ceil(poll / step)`` more training steps (never
    past its final step), and ``best_steps`` is the best case with them."""
    if stop.rule == "none":
        return None
    kids = [child_steps(index, stop, request) for index, request in children]
    b = bound(stop.rule, stop.eta, max_parallel, kids)
    shared = len({(k.judged, k.final) for k in kids}) == 1
    fraction = b.best_fraction

    def hours(share: float) -> float | None:
        return round(none_chip_hours * share, 2) if none_chip_hours is not None else None

    return {
        "rule": stop.rule,
        "eta": stop.eta if stop.rule == "asha" else None,
        "min_step": stop.min_step,
        "judged_at": list(kids[0].judged) if shared and kids else None,
        "final_step": kids[0].final if shared and kids else None,
        "steps": {"none": b.none_steps, "best": b.best_steps, "worst": b.none_steps},
        "fraction_of_none": {"best": round(fraction, 4), "worst": 1.0},
        "chip_hours": {"none": hours(1.0), "best": hours(fraction), "worst": hours(1.0)}
        if none_chip_hours is not None
        else None,
        "best_case": _best_case(b, kids),
        "exact": b.tight,
        "assumption": ASSUMPTION,
        "stop_delay": _stop_delay(b, kids, poll_seconds, step_seconds) if poll_seconds else None,
    }


def _stop_delay(
    b: Bound, kids: Sequence[ChildSteps], poll_seconds: float, step_seconds: float | None
) -> dict[str, Any]:
    """The best case with each stopped child's delay counted (``plan_entry``); steps null without
    ``step_seconds``, or when who stops where is not known (the children's steps differ)."""
    per_child = math.ceil(poll_seconds / step_seconds) if step_seconds else None
    best: int | None = None
    if per_child is not None and b.best_by_child is not None:
        finals = {k.index: (k.final, k.per_step) for k in kids}
        best = 0
        for index, step in b.best_by_child.items():
            final, per_step = finals[index]
            trained = step * per_step
            best += trained if step == final else min(trained + per_child, final * per_step)
    return {
        "poll_seconds": poll_seconds,
        "steps_per_stopped_child": per_child,
        "best_steps": best,
        "best_fraction": round(best / b.none_steps, 4) if best is not None and b.none_steps else None,
    }


def _best_case(b: Bound, kids: Sequence[ChildSteps]) -> str:
    """Who trains how far in the best case, in words."""
    if b.best_steps == b.none_steps:
        least = "eta" if b.rule == "asha" else f"{early_stop.MIN_PEERS + 1}"
        return f"no child can be stopped: {len(kids)} children are fewer than the rule needs ({least})"
    if b.best_by_child is None:
        return (
            f"the children's steps differ: at least {b.to_final} train to their final step and every "
            "child to its first judged step; a lower bound"
        )
    finals = {k.index: k.final for k in kids}
    counts: dict[int, int] = {}
    for index, step in b.best_by_child.items():
        if step != finals[index]:
            counts[step] = counts.get(step, 0) + 1
    stopped = ", ".join(
        f"{count} child{'ren' if count != 1 else ''} stopped at step {step}"
        for step, count in sorted(counts.items())
    )
    final = next(iter(finals.values()))
    return f"{stopped}; {b.to_final} train{'s' if b.to_final == 1 else ''} to the final step {final}"
