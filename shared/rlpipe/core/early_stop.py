"""Early stopping for sweeps: whether one child should stop, from every child's evaluations so far.

Why pure (no I/O): the control plane decides whenever a child's status read records a new
evaluation, possibly twice for the same evaluation (a retried read) and with the children's reads
arriving in any order. A function of the tables alone gives the same answer every time it is asked
the same question, and the decision can be recomputed and explained from the ledgers afterwards.

The input is, per child (its point index), its evaluations so far as step → value of the metric the
sweep's select rule names, and which way is better (``SelectRule.direction``). Steps are the ones
train_rl prints in ``Intermediate Eval (step=N)`` (every ``eval_interval`` outer steps,
``core.steps.Steps.eval_steps``). Only finite numbers are evaluations: a ``nan`` or ``inf`` that
train_rl printed is left out, so it can neither stop a child nor count as a peer.

Two rules, each stated exactly in its function's docstring:

* ``median``: the median stopping rule of Golovin et al. 2017, "Google Vizier: A Service for
  Black-Box Optimization" (KDD 2017, §3.2.2, https://research.google.com/pubs/pub46180.html), as
  Katib's ``medianstop`` (https://www.kubeflow.org/docs/components/katib/early-stopping/) and Ray
  Tune's ``MedianStoppingRule`` (https://docs.ray.io/en/latest/tune/api/doc/ray.tune.schedulers.MedianStoppingRule.html)
  implement it.
* ``asha``: asynchronous successive halving, Li et al. 2018, "A System for Massively Parallel
  Hyperparameter Tuning" (MLSys 2020, https://arxiv.org/abs/1810.05934, Algorithm 2), as Ray Tune's
  ``ASHAScheduler`` (https://docs.ray.io/en/latest/tune/api/doc/ray.tune.schedulers.AsyncHyperBandScheduler.html)
  runs it: by stopping, since a child cannot be paused and resumed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rlpipe.core.problems import Problem
from rlpipe.core.request.sweep import Direction

Rule = Literal["median", "asha"]
# A child's evaluations: step → the select metric's value at that step.
Evaluations = Mapping[int, float]
# Every child's, by its point index.
Tables = Mapping[int, Evaluations]

# Ray Tune's MedianStoppingRule computes no median over fewer than 3 trials (min_samples_required=3,
# the page cited above); Katib's medianstop has the same default (min_trials_required: 3, "minimal
# number of successful trials to compute median value", the Katib page cited above).
MIN_PEERS = 3


@dataclass(frozen=True)
class Decision:
    """One child's verdict, with what a status message needs to say why.

    ``compared`` holds the values the child was measured against, by peer index (the peers'
    running averages for ``median``, the values at the rung for ``asha``), and ``threshold`` the
    number it had to reach (the median, or the worst value still in the rung's top 1/eta)."""

    child: int
    run_id: str
    rule: Rule
    stop: bool
    reason: str
    step: int | None = None
    value: float | None = None
    threshold: float | None = None
    compared: tuple[tuple[int, float], ...] = ()


def _finite(evaluations: Evaluations) -> dict[int, float]:
    return {
        step: float(value)
        for step, value in evaluations.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def _worse(value: float, than: float, direction: Direction) -> bool:
    """Strictly worse: an equal value is never worse, so a tie never stops a child."""
    return value < than if direction == "max" else value > than


def _best(values: Sequence[float], direction: Direction) -> float:
    return max(values) if direction == "max" else min(values)


def _listed(compared: Sequence[tuple[int, float]]) -> str:
    return ", ".join(f"child {index} {value:.4f}" for index, value in compared)


def median(
    tables: Tables,
    child: int,
    run_id: str,
    direction: Direction,
    *,
    metric: str = "metric",
    min_peers: int = MIN_PEERS,
    min_step: int = 1,
) -> Decision:
    """The median stopping rule, exactly.

    Let s be the child's latest evaluated step. The child is judged only when s >= ``min_step``
    (the role of Ray's grace_period; Katib's start_step counts reported results instead). Its *best* is its best value at any step <= s (the
    highest for ``max``, the lowest for ``min``). A *peer* is any other child of the sweep, running
    or ended, with at least one evaluation at a step <= s; its *running average* is the mean of its
    values at steps <= s. With fewer than ``min_peers`` peers the child continues. Otherwise it
    stops if and only if its best is strictly worse than the median of the peers' running averages
    (``statistics.median``: the mean of the middle two for an even count). A best equal to the
    median continues: a tie never stops.

    Where this differs from Vizier, Katib and Ray: they take the median over *completed* trials
    only. Here every child of a sweep starts at once and none completes before the others are
    mostly done, so waiting for completed peers would never stop anyone; the peers are the other
    children's evaluations up to the same step instead, which is what "the same step" compares.
    """
    own = _finite(tables.get(child, {}))
    if not own:
        return Decision(child, run_id, "median", False, f"child {child} has no {metric} evaluation yet")
    step = max(own)
    best = _best(list(own.values()), direction)  # every evaluation so far is at a step <= s
    if step < min_step:
        return Decision(
            child, run_id, "median", False,
            f"step {step} is before min_step {min_step}: not judged yet", step, best,
        )  # fmt: skip
    peers: list[tuple[int, float]] = []
    for index in sorted(tables):
        if index == child:
            continue
        upto = [v for s, v in _finite(tables[index]).items() if s <= step]
        if upto:
            peers.append((index, statistics.fmean(upto)))
    if len(peers) < min_peers:
        return Decision(
            child, run_id, "median", False,
            f"only {len(peers)} other child{'ren' if len(peers) != 1 else ''} evaluated by step {step}; "
            f"the median rule needs {min_peers}",
            step, best, None, tuple(peers),
        )  # fmt: skip
    middle = statistics.median(v for _, v in peers)
    stop = _worse(best, middle, direction)
    relation = ("below" if direction == "max" else "above") if stop else "not worse than"
    reason = (
        f"at step {step} its best {metric} so far, {best:.4f}, is {relation} the median {middle:.4f} of "
        f"the other {len(peers)} children's running averages ({_listed(peers)})"
    )
    return Decision(child, run_id, "median", stop, reason, step, best, middle, tuple(peers))


def asha(
    tables: Tables,
    child: int,
    run_id: str,
    direction: Direction,
    *,
    rungs: Sequence[int],
    eta: int,
    metric: str = "metric",
) -> Decision:
    """Asynchronous successive halving, by stopping, exactly.

    ``rungs`` are the steps ``asha_rungs`` returns (min_step * eta^k below the final step). The
    child is judged at its *rung*: the highest rung at which it has an evaluation; with none it
    continues. The *cohort* is every child of the sweep (this one included, running or ended) with
    an evaluation at exactly that step, each by its value there; n is its size. Asynchronous: only
    what has arrived counts, so the same child can be judged again at the same rung as more
    children reach it (until it records an evaluation at a higher rung), which is the paper's "a
    configuration is promoted only if it is in the top 1/eta of its rung", applied to a child that
    went on before the rung filled up.

    * n < eta: the child continues. The top 1/eta of fewer than eta children is less than one
      child, so too few peers never stop anyone.
    * n >= eta: the top floor(n / eta) continue. The *threshold* is the floor(n / eta)-th best
      value in the cohort; the child stops if and only if its value is strictly worse than the
      threshold, i.e. at least floor(n / eta) children are strictly better. Children tied with the
      threshold all continue: a tie never stops.

    The count is the paper's top_k(rung, |rung| / eta) (Algorithm 2, get_job), read as "may this
    child go on" instead of "which paused configuration is promoted next".
    """
    own = _finite(tables.get(child, {}))
    reached = [r for r in sorted(rungs) if r in own]
    if not reached:
        first = min(rungs) if rungs else None
        where = f"the first rung, step {first}" if first is not None else "a rung (there are none)"
        return Decision(child, run_id, "asha", False, f"child {child} has not reached {where}")
    rung = reached[-1]
    value = own[rung]
    cohort: list[tuple[int, float]] = []
    for index in sorted(tables):
        at = _finite(tables[index]).get(rung)
        if at is not None:
            cohort.append((index, at))
    peers = tuple((i, v) for i, v in cohort if i != child)
    if len(cohort) < eta:
        return Decision(
            child, run_id, "asha", False,
            f"{len(cohort)} of the children reached the rung at step {rung}; with eta {eta} none is "
            f"stopped before {eta} have",
            rung, value, None, peers,
        )  # fmt: skip
    keep = len(cohort) // eta
    ranked = sorted((v for _, v in cohort), reverse=direction == "max")
    threshold = ranked[keep - 1]
    stop = _worse(value, threshold, direction)
    standing = "outside" if stop else "within"
    reason = (
        f"at the rung at step {rung} its {metric}, {value:.4f}, is {standing} the top {keep} of the "
        f"{len(cohort)} children there (1/{eta}; the {keep}{_ordinal(keep)} best is {threshold:.4f}; "
        f"others: {_listed(peers)})"
    )
    return Decision(child, run_id, "asha", stop, reason, rung, value, threshold, peers)


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


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
