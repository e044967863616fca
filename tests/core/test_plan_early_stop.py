"""The best and worst a stopping rule allows (``core.stop_plan``), on hand-computed sweeps, and held
to the rules themselves: sweeps simulated with ``core.early_stop``'s own decisions, in random
orders of arrival with random rewards and ``max_parallel`` slots, never train fewer steps than
the bound, and for small sweeps the search reaches it (the bound is the least, not a guess)."""

from __future__ import annotations

import functools
import random

import pytest

from rlpipe.core import early_stop
from rlpipe.core.stop_plan import ChildSteps, bound


def _children(n: int, *, eval_interval: int, final: int, judged: tuple[int, ...]) -> list[ChildSteps]:
    return [ChildSteps(i, eval_interval, final, judged) for i in range(n)]


def test_asha_16_children_eta_3_rungs_10_30_of_100() -> None:
    """By hand: the first eta-1 = 2 children at each rung go on, so 2 reach the final step 100 and
    the other 14 can be stopped at the first rung (10): 14·10 + 2·100 = 340 of 1600, 0.2125."""
    kids = _children(16, eval_interval=10, final=100, judged=(10, 30))
    b = bound("asha", 3, 16, kids)
    assert (b.none_steps, b.best_steps) == (1600, 340)
    assert b.best_fraction == pytest.approx(0.2125)
    assert (b.first_judged, b.to_final, b.judged_again, b.tight) == (2, 2, 0, True)
    assert sorted((b.best_by_child or {}).values()) == [10] * 14 + [100, 100]


def test_one_slot_at_a_time_leaves_the_first_eta_minus_1_children_their_whole_run() -> None:
    """max_parallel 1: nobody can be stopped until a third child reaches the rung, and the first two
    hold the only slot until they end: 2·100 + 14·10 = 340."""
    b = bound("asha", 3, 1, _children(16, eval_interval=10, final=100, judged=(10, 30)))
    assert (b.best_steps, b.to_final, b.judged_again) == (340, 2, 0)


def test_median_judged_from_the_first_evaluation_and_from_a_later_min_step() -> None:
    """The median rule never stops its 2 best children (a median of 3 or more peers above a stopped
    child's best needs 2 above it that are never stopped)."""
    steps = tuple(range(10, 100, 10))
    # min_step = eval_interval: the first 3 to evaluate have too few peers: two to 100, one to 20.
    first = bound("median", 3, 16, _children(16, eval_interval=10, final=100, judged=steps))
    assert first.best_steps == 13 * 10 + 20 + 2 * 100  # 350
    # min_step 30: every child has evaluated at 10 and 20 before it is judged, so all may have peers.
    later = bound("median", 3, 16, _children(16, eval_interval=10, final=100, judged=steps[2:]))
    assert later.best_steps == 14 * 30 + 2 * 100  # 620
    # One slot: the first 3 children hold it in turn and end at 100 before a 4th can be judged.
    alone = bound("median", 3, 1, _children(16, eval_interval=10, final=100, judged=steps))
    assert alone.best_steps == 13 * 10 + 3 * 100  # 430


def test_too_few_children_are_never_stopped() -> None:
    assert bound("asha", 3, 2, _children(2, eval_interval=10, final=100, judged=(10, 30))).best_steps == 200
    assert bound("median", 3, 3, _children(3, eval_interval=10, final=100, judged=(10,))).best_steps == 300


def test_children_with_different_steps_get_a_lower_bound_with_their_own_steps() -> None:
    kids = [ChildSteps(0, 10, 100, (10, 30)), ChildSteps(1, 10, 100, (10, 30)), ChildSteps(2, 10, 50, (10, 30)),
            ChildSteps(3, 10, 50, (10, 30), per_step=2)]  # fmt: skip
    b = bound("asha", 3, 4, kids)
    # Every child to 10 (10+10+10+20), the eta-1 = 2 cheapest to their end (child 2: +40; child 3,
    # two steps per outer step: +80).
    assert (b.tight, b.none_steps, b.best_steps) == (False, 350, 50 + 40 + 80)


# ---- held to the rules ---------------------------------------------------------------------------


def simulate(
    rule: str, n: int, eta: int, slots: int, eval_interval: int, final: int, judged: tuple[int, ...],
    rng: random.Random,
) -> int:  # fmt: skip
    """One sweep: children start as slots free, a random running child records its next evaluation
    (a random reward), the rule judges it; the steps every child trained, summed."""
    tables: dict[int, dict[int, float]] = {i: {} for i in range(n)}
    waiting, running, ended = list(range(n)), [], {}
    at = dict.fromkeys(range(n), 0)
    while len(ended) < n:
        while waiting and len(running) < slots:
            running.append(waiting.pop(0))
        child = rng.choice(running)
        step = at[child] + eval_interval
        if step >= final:
            ended[child] = final
            running.remove(child)
            continue
        at[child] = step
        tables[child][step] = rng.choice((0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9))
        if rule == "asha":  # as the control plane asks: this read brought the evaluation at `step`
            d = early_stop.asha(tables, child, f"c{child}", "max", rungs=judged, eta=eta, new_steps={step})
        else:
            d = early_stop.median(tables, child, f"c{child}", "max", min_step=judged[0])
        if d.stop:
            ended[child] = step
            running.remove(child)
    return sum(ended.values())


CASES = [  # rule, n, eta, slots, eval_interval, final, judged
    ("asha", 5, 3, 5, 1, 10, (1, 3, 9)),
    ("asha", 5, 3, 2, 1, 10, (1, 3, 9)),
    ("asha", 5, 3, 1, 1, 10, (1, 3, 9)),
    ("asha", 5, 2, 5, 1, 9, (1, 2, 4, 8)),
    ("median", 5, 3, 5, 1, 8, tuple(range(1, 8))),
    ("median", 5, 3, 2, 1, 8, tuple(range(1, 8))),
    ("median", 5, 3, 5, 1, 8, tuple(range(3, 8))),
]


TRIALS = 1500


@functools.cache
def _least(case: tuple[object, ...], trials: int) -> int:
    rule, n, eta, slots, interval, final, judged = case
    rng = random.Random(f"stop-plan-{case}")
    return min(
        simulate(str(rule), int(n), int(eta), int(slots), int(interval), int(final), judged, rng)  # type: ignore[arg-type]
        for _ in range(trials)
    )


def _bound(case: tuple[object, ...]) -> int:
    rule, n, eta, slots, interval, final, judged = case
    kids = _children(int(n), eval_interval=int(interval), final=int(final), judged=judged)  # type: ignore[arg-type]
    return bound(str(rule), int(eta), int(slots), kids).best_steps  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c[:4])))
def test_no_simulated_sweep_trains_less_than_the_bound_and_some_reach_it(case: tuple[object, ...]) -> None:
    assert _least(case, TRIALS) == _bound(case)


def optimistic_asha(n: int, eta: int, final: int, first: int) -> int:
    """A bound that forgets the first eta-1 at every rung go on: all but the best stopped at the
    first rung."""
    return (n - 1) * first + final


def test_the_simulation_refutes_a_bound_that_overstates_the_saving() -> None:
    """Mutation: the check bites. A bound that keeps only the best child says 5-child sweeps can
    train 4·1 + 10 = 14 steps; no simulated sweep does (the least is the bound's 3·1 + 2·10 = 23:
    the first two at each rung always go on)."""
    assert _least(CASES[0], TRIALS) == 23 > optimistic_asha(5, 3, 10, 1) == 14
