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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rlpipe.core.request.sweep import Direction, EarlyStop, SelectRule

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
    new_steps: Collection[int] | None = None,
) -> Decision:
    """Asynchronous successive halving, by stopping, exactly.

    ``rungs`` are the steps ``core.request.stop_schedule.asha_rungs`` returns (min_step * eta^k below the final step). The
    child is judged at its *rung*: the highest rung at which it has an evaluation; with none it
    continues. The *cohort* is every child of the sweep (this one included, running or ended) with
    an evaluation at exactly that step, each by its value there; n is its size. Asynchronous: only
    what has arrived counts. ``new_steps``, the steps the read being judged brought: a child is
    judged at a rung once, when its evaluation there arrives (a rung not among them: it
    continues, having passed that rung when it reached it), as Ray Tune's ASHAScheduler records a
    trial at a milestone once and never demotes it; the paper's promoted configurations are not
    demoted either. None judges at the highest rung whatever arrived (a table read afterwards).

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
    if new_steps is not None and rung not in new_steps:
        later = [r for r in sorted(rungs) if r > rung]
        return Decision(
            child, run_id, "asha", False,
            f"judged at the rung at step {rung} when it reached it; "
            + (f"the next rung is at step {later[0]}" if later else "no rung is left before the final step"),
            rung, value,
        )  # fmt: skip
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
            f"stopped before {eta} have (ASHA judges each child when its evaluation arrives, so the "
            "first to arrive go on: two runs of one sweep can stop different children)",
            rung, value, None, peers,
        )  # fmt: skip
    keep = len(cohort) // eta
    ranked = sorted((v for _, v in cohort), reverse=direction == "max")
    threshold = ranked[keep - 1]
    stop = _worse(value, threshold, direction)
    standing = "outside" if stop else "within"
    reason = (
        f"at the rung at step {rung} its evaluation there ({evaluated(metric)} {value:.4f}) is {standing} "
        f"the top {keep} of the {len(cohort)} children evaluated there: with eta {eta}, ASHA keeps the "
        f"best 1/{eta} of those at a rung (here {keep}), and the {_ranked(keep)} there was {threshold:.4f} "
        f"(the others: {_listed(peers)})"
    )
    return Decision(child, run_id, "asha", stop, reason, rung, value, threshold, peers)


def _ranked(n: int) -> str:
    """``best`` for 1, else ``2nd best``…: the place of the value a child must at least match."""
    if n == 1:
        return "best"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix} best"


def evaluated(metric: str) -> str:
    """What a rung compares: the intermediate evaluation of the select metric's field, named as
    the evaluation it is (``post_mean_reward`` is the post-training one, which a rung never has)."""
    return metric.removeprefix("post_")


def decide(
    stop: EarlyStop,
    tables: Tables,
    child: int,
    run_id: str,
    select: SelectRule,
    rungs: Sequence[int],
    new_steps: Collection[int] | None = None,
) -> Decision | None:
    """The request's rule on one child (None: the sweep stops nobody early). ``rungs``: ASHA's
    (``core.request.stop_schedule.rungs``); the median rule judges from ``min_step`` on.
    ``new_steps``: the steps of the child's evaluations this read brought (``asha``)."""
    if stop.rule == "median":
        first = stop.min_step if stop.min_step is not None else (min(rungs) if rungs else 1)
        return median(tables, child, run_id, select.direction, metric=select.metric, min_step=first)
    if stop.rule == "asha":
        return asha(
            tables, child, run_id, select.direction,
            rungs=rungs, eta=stop.eta, metric=select.metric, new_steps=new_steps,
        )  # fmt: skip
    return None
