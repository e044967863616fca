"""Early stopping rules for sweeps (core.early_stop), on hand-made evaluation tables.

Every expected decision below is worked out from the rule as the module's docstrings state it
(values are multiples of 1/8 so the arithmetic is exact); none is read back from the code.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlpipe.core import early_stop
from rlpipe.core.early_stop import asha, median
from rlpipe.core.request.stop_schedule import asha_rungs
from tests.harness.mutants import mutant

# ---- median ---------------------------------------------------------------------------------------

# Child 0 is worse than the rest when higher is better. Running averages up to step 20:
# child 1 (0.5 + 0.75) / 2 = 0.625, child 2 (0.25 + 0.75) / 2 = 0.5, child 3 (0.25 + 0.5) / 2 = 0.375;
# their median is 0.5, and child 0's best so far is 0.25.
BEHIND = {
    0: {10: 0.125, 20: 0.25},
    1: {10: 0.5, 20: 0.75},
    2: {10: 0.25, 20: 0.75},
    3: {10: 0.25, 20: 0.5},
}


def test_median_stops_a_child_whose_best_is_below_the_median_of_the_others_running_averages() -> None:
    d = median(BEHIND, 0, "run-c0", "max", metric="post_mean_reward")
    assert d.stop is True
    assert (d.rule, d.child, d.run_id, d.step, d.value, d.threshold) == ("median", 0, "run-c0", 20, 0.25, 0.5)
    assert d.compared == ((1, 0.625), (2, 0.5), (3, 0.375))
    assert "step 20" in d.reason and "0.2500" in d.reason and "0.5000" in d.reason


def test_median_a_child_exactly_at_the_median_continues() -> None:
    # Child 0's best (0.5 at step 20) equals the peers' median 0.5: a tie never stops.
    tables = {**BEHIND, 0: {10: 0.25, 20: 0.5}}
    d = median(tables, 0, "run-c0", "max")
    assert d.stop is False
    assert (d.value, d.threshold) == (0.5, 0.5)


def test_median_uses_the_best_value_so_far_not_the_latest() -> None:
    # Latest 0.25 is below the median 0.5, but the best so far (0.75 at step 10) is above it.
    tables = {**BEHIND, 0: {10: 0.75, 20: 0.25}}
    d = median(tables, 0, "run-c0", "max")
    assert d.stop is False
    assert d.value == 0.75


def test_median_lower_is_better_reads_the_same_table_the_other_way() -> None:
    # Losses. Child 0's best (lowest) is 0.625. Peers' running averages: child 1 0.375,
    # child 2 0.5, child 3 0.5 → median 0.5; 0.625 is worse (higher) → stop.
    tables = {
        0: {10: 0.75, 20: 0.625},
        1: {10: 0.5, 20: 0.25},
        2: {10: 0.5, 20: 0.5},
        3: {10: 0.75, 20: 0.25},
    }
    lower = median(tables, 0, "run-c0", "min")
    assert lower.stop is True
    assert (lower.value, lower.threshold) == (0.625, 0.5)
    # Read as higher-is-better, child 0's best is 0.75, above the same median 0.5: it continues.
    higher = median(tables, 0, "run-c0", "max")
    assert higher.stop is False
    assert (higher.value, higher.threshold) == (0.75, 0.5)


def test_median_too_few_peers_never_stops() -> None:
    # Two peers far ahead and one with no evaluation yet: two peers, fewer than the three required.
    tables = {0: {10: 0.0}, 1: {10: 1.0}, 2: {10: 1.0}, 3: {}}
    d = median(tables, 0, "run-c0", "max")
    assert d.stop is False
    assert d.threshold is None
    assert "only 2 other children" in d.reason
    # The same table with a requirement of two peers: median 1.0, best 0.0 → stop.
    assert median(tables, 0, "run-c0", "max", min_peers=2).stop is True


def test_median_compares_only_evaluations_up_to_the_childs_step() -> None:
    # At step 10 the peers' running averages are 0.5, 0.5, 0.25 → median 0.5 = child 0's 0.5: continue.
    # Counting the peers' step-20 values (1.0) would raise the median to 0.75 and stop it.
    tables = {0: {10: 0.5}, 1: {10: 0.5, 20: 1.0}, 2: {10: 0.5, 20: 1.0}, 3: {10: 0.25, 20: 1.0}}
    d = median(tables, 0, "run-c0", "max")
    assert d.stop is False
    assert d.step == 10
    assert d.compared == ((1, 0.5), (2, 0.5), (3, 0.25))


def test_median_of_an_even_number_of_peers_is_the_mean_of_the_middle_two() -> None:
    # Peers' averages 0.25, 0.5, 0.75, 1.0 → median 0.625.
    peers = {1: {10: 0.25}, 2: {10: 0.5}, 3: {10: 0.75}, 4: {10: 1.0}}
    below = median({0: {10: 0.5}, **peers}, 0, "r", "max")
    assert (below.stop, below.threshold) == (True, 0.625)
    at = median({0: {10: 0.625}, **peers}, 0, "r", "max")
    assert at.stop is False


def test_median_judges_nothing_before_min_step() -> None:
    assert median(BEHIND, 0, "run-c0", "max", min_step=30).stop is False
    assert median(BEHIND, 0, "run-c0", "max", min_step=20).stop is True


def test_median_a_child_without_evaluations_continues() -> None:
    assert median({**BEHIND, 0: {}}, 0, "run-c0", "max").stop is False
    assert median({k: v for k, v in BEHIND.items() if k != 0}, 0, "run-c0", "max").stop is False


def test_median_non_finite_values_are_not_evaluations() -> None:
    # Child 3's only values are nan and inf: it is no peer, which leaves two (too few).
    tables = {0: {10: 0.0}, 1: {10: 1.0}, 2: {10: 1.0}, 3: {10: math.nan, 20: math.inf}}
    assert median(tables, 0, "run-c0", "max").stop is False
    # A child whose own value is nan has no evaluation: it is not stopped by it.
    assert median({**BEHIND, 0: {10: math.nan}}, 0, "run-c0", "max").stop is False


def test_median_is_idempotent_and_independent_of_the_order_tables_were_built_in() -> None:
    reordered = {i: dict(reversed(list(BEHIND[i].items()))) for i in reversed(list(BEHIND))}
    first = median(BEHIND, 0, "run-c0", "max")
    assert median(BEHIND, 0, "run-c0", "max") == first
    assert median(reordered, 0, "run-c0", "max") == first


# ---- asha -----------------------------------------------------------------------------------------

# eval_interval 10, final step 100, eta 3, min_step 10: rungs at 10, 30, 90 (270 is past the end).
RUNGS = (10, 30, 90)
# Nine children at the first rung, child i with value i/8: the top floor(9/3) = 3 are children 8, 7
# and 6 (1.0, 0.875, 0.75); the threshold is the third best, 0.75.
NINE = {i: {10: i / 8} for i in range(9)}


def test_asha_rungs_are_min_step_times_powers_of_eta_below_the_final_step() -> None:
    rungs = asha_rungs(eval_interval=10, final_step=100, eta=3, min_step=10)
    assert rungs.steps == RUNGS
    assert rungs.problems == ()
    # A rung exactly at the final step is not a rung: 10, 20, 40, 80 below 160, but not 160.
    assert asha_rungs(eval_interval=10, final_step=160, eta=2, min_step=10).steps == (10, 20, 40, 80)


def test_asha_nine_children_eta_three_keeps_the_top_three() -> None:
    decisions = {i: asha(NINE, i, f"run-c{i}", "max", rungs=RUNGS, eta=3) for i in NINE}
    assert sorted(i for i, d in decisions.items() if d.stop) == [0, 1, 2, 3, 4, 5]
    five = decisions[5]
    assert (five.rule, five.step, five.value, five.threshold) == ("asha", 10, 0.625, 0.75)
    assert five.compared == tuple((i, i / 8) for i in range(9) if i != 5)
    assert "top 3 of the 9" in five.reason
    assert decisions[6].stop is False


def test_asha_ties_with_the_threshold_all_continue() -> None:
    # Children 5 and 6 share 0.75, the third best: both continue, so four go on.
    tables = {**NINE, 5: {10: 0.75}}
    stopped = [i for i in tables if asha(tables, i, "r", "max", rungs=RUNGS, eta=3).stop]
    assert stopped == [0, 1, 2, 3, 4]


def test_asha_decides_on_what_has_arrived_at_the_rung() -> None:
    # Four of nine reached step 10 (0.5, 0.25, 0.75, 0.125); floor(4/3) = 1 continues: child 2.
    tables = {0: {10: 0.5}, 1: {10: 0.25}, 2: {10: 0.75}, 3: {10: 0.125}, **{i: {} for i in range(4, 9)}}
    stopped = [i for i in range(4) if asha(tables, i, "r", "max", rungs=RUNGS, eta=3).stop]
    assert stopped == [0, 1, 3]
    assert asha(tables, 0, "r", "max", rungs=RUNGS, eta=3).threshold == 0.75


def test_asha_too_few_children_at_the_rung_never_stop_one() -> None:
    # Two children at the rung with eta 3: the worse one continues.
    tables = {0: {10: 0.0}, 1: {10: 1.0}, 2: {}}
    d = asha(tables, 0, "r", "max", rungs=RUNGS, eta=3)
    assert d.stop is False
    assert (d.step, d.threshold) == (10, None)
    # eta 2: two are enough; the top one continues and child 0 stops.
    assert asha(tables, 0, "r", "max", rungs=RUNGS, eta=2).stop is True


def test_asha_a_child_past_a_rung_is_judged_again_as_more_children_reach_it() -> None:
    # Child 0 went on past step 10 when only one other child had reached it.
    early = {0: {10: 0.25, 20: 0.5}, 1: {10: 0.5}}
    assert asha(early, 0, "r", "max", rungs=RUNGS, eta=3).stop is False
    # Two more arrive above it: four at the rung, one kept (0.75); child 0's 0.25 at the rung stops it.
    later = {**early, 2: {10: 0.75}, 3: {10: 0.625}}
    d = asha(later, 0, "r", "max", rungs=RUNGS, eta=3)
    assert d.stop is True
    assert (d.step, d.value, d.threshold) == (10, 0.25, 0.75)


def test_asha_judges_a_child_at_its_highest_rung() -> None:
    # Child 0 is the worst of nine at step 10 but reached step 30 with two others, where three
    # children are enough for eta 3 and it is the best: it continues.
    tables = {**NINE, 0: {10: 0.0, 30: 1.0}, 7: {10: 0.875, 30: 0.5}, 8: {10: 1.0, 30: 0.25}}
    d = asha(tables, 0, "r", "max", rungs=RUNGS, eta=3)
    assert d.stop is False
    assert (d.step, d.threshold) == (30, 1.0)
    # Child 8 is the worst of the three at step 30: only the best (child 0, 1.0) goes on.
    assert asha(tables, 8, "r", "max", rungs=RUNGS, eta=3).stop is True


def test_asha_lower_is_better() -> None:
    # Losses 0.5, 0.25, 0.75 at the rung; floor(3/3) = 1 continues: the lowest, child 1.
    tables = {0: {10: 0.5}, 1: {10: 0.25}, 2: {10: 0.75}}
    assert [asha(tables, i, "r", "min", rungs=RUNGS, eta=3).stop for i in range(3)] == [True, False, True]


def test_asha_before_the_first_rung_continues() -> None:
    assert (
        asha({0: {}, **{i: {10: 1.0} for i in range(1, 9)}}, 0, "r", "max", rungs=RUNGS, eta=3).stop is False
    )


def test_asha_is_idempotent_and_independent_of_the_order_tables_were_built_in() -> None:
    reordered = {i: NINE[i] for i in reversed(list(NINE))}
    first = asha(NINE, 4, "r", "max", rungs=RUNGS, eta=3)
    assert asha(NINE, 4, "r", "max", rungs=RUNGS, eta=3) == first
    assert asha(reordered, 4, "r", "max", rungs=RUNGS, eta=3) == first


# ---- the rungs' problems (for the request's validation) -------------------------------------------


def test_a_rung_that_is_not_an_evaluation_step_is_a_problem_naming_min_step() -> None:
    # Evaluations every 10 steps; min_step 15, eta 2: rungs 15, 30, 60, of which only 15 is off.
    rungs = asha_rungs(eval_interval=10, final_step=100, eta=2, min_step=15)
    assert rungs.steps == (15, 30, 60)
    [problem] = rungs.problems
    assert problem.path == "sweep.early_stop.min_step"
    assert "15" in problem.message and "30" not in problem.message
    assert "20" in problem.fix  # the next multiple of eval_interval


def test_no_rung_before_the_final_step_is_a_problem_naming_min_step() -> None:
    rungs = asha_rungs(eval_interval=10, final_step=100, eta=3, min_step=100)
    assert rungs.steps == ()
    [problem] = rungs.problems
    assert problem.path == "sweep.early_stop.min_step"
    assert "100" in problem.message
    assert "eval_interval (10)" in problem.fix


@pytest.mark.parametrize(
    ("eval_interval", "eta", "min_step", "path"),
    [
        (10, 1, 10, "sweep.early_stop.eta"),
        (10, 3, 0, "sweep.early_stop.min_step"),
        (0, 3, 10, "training.eval_interval"),
    ],
)
def test_unusable_parameters_name_their_field(eval_interval: int, eta: int, min_step: int, path: str) -> None:
    rungs = asha_rungs(eval_interval=eval_interval, final_step=100, eta=eta, min_step=min_step)
    assert [p.path for p in rungs.problems] == [path]
    assert rungs.steps == ()
    assert all(p.fix for p in rungs.problems)


# ---- the tests bite --------------------------------------------------------------------------------


def test_a_non_strict_comparison_would_stop_ties(tmp_path: Path) -> None:
    # `<` → `<=` in "strictly worse": the child exactly at the median and the children tied with
    # the ASHA threshold would be stopped, which the tests above forbid.
    at_median = {**BEHIND, 0: {10: 0.25, 20: 0.5}}
    tied = {**NINE, 5: {10: 0.75}}
    assert median(at_median, 0, "r", "max").stop is False
    assert asha(tied, 6, "r", "max", rungs=RUNGS, eta=3).stop is False
    with mutant(
        early_stop,
        'return value < than if direction == "max" else value > than',
        'return value <= than if direction == "max" else value >= than',
        tmp_path,
    ) as mutated:
        assert mutated.median(at_median, 0, "r", "max").stop is True
        assert mutated.asha(tied, 6, "r", "max", rungs=RUNGS, eta=3).stop is True


def test_asha_keeping_the_top_ceil_n_over_eta_would_keep_one_child_too_many(tmp_path: Path) -> None:
    # floor → ceil: of four children at the rung with eta 3, two would go on instead of one.
    tables = {0: {10: 0.5}, 1: {10: 0.25}, 2: {10: 0.75}, 3: {10: 0.125}}
    assert asha(tables, 0, "r", "max", rungs=RUNGS, eta=3).stop is True
    with mutant(
        early_stop, "keep = len(cohort) // eta", "keep = -(-len(cohort) // eta)", tmp_path
    ) as mutated:
        assert mutated.asha(tables, 0, "r", "max", rungs=RUNGS, eta=3).stop is False


def test_a_running_average_over_all_steps_would_change_the_median(tmp_path: Path) -> None:
    # Peers' values after the child's step counted: the median rises from 0.5 to 0.75 and stops it.
    tables = {0: {10: 0.5}, 1: {10: 0.5, 20: 1.0}, 2: {10: 0.5, 20: 1.0}, 3: {10: 0.25, 20: 1.0}}
    assert median(tables, 0, "r", "max").stop is False
    with mutant(
        early_stop,
        "upto = [v for s, v in _finite(tables[index]).items() if s <= step]",
        "upto = list(_finite(tables[index]).values())",
        tmp_path,
    ) as mutated:
        assert mutated.median(tables, 0, "r", "max").stop is True


def test_asha_judges_a_child_at_a_rung_once_when_its_evaluation_there_arrives() -> None:
    """Child 2 reached the rung at step 10 first, alone, and went on; its read now brings step 20,
    which is no rung (eta 3: 10, 30): it is not judged at 10 again, though the rung has filled and
    two children are strictly better there (as Ray's ASHAScheduler records a trial at a milestone
    once). A read that brings the rung's own evaluation is judged: outside the top 1 of 3."""
    tables = {0: {10: 0.9}, 1: {10: 0.8}, 2: {10: 0.1, 20: 0.15}}
    later = asha(tables, 2, "c2", "max", rungs=(10, 30), eta=3, new_steps={20})
    assert not later.stop
    assert later.reason == "judged at the rung at step 10 when it reached it; the next rung is at step 30"
    arrived = asha(tables, 2, "c2", "max", rungs=(10, 30), eta=3, new_steps={10, 20})
    assert arrived.stop and (arrived.step, arrived.threshold) == (10, 0.9)


def test_a_childs_evaluations_are_read_as_the_select_metric_with_the_newest_attempt_standing() -> None:
    """Attempt 2 resumed and evaluated step 20 again: its value stands. reward_gain is the step's
    mean_reward minus the base model's (pre); accuracy is the Intermediate Eval's accuracy."""
    from rlpipe.core.runs.stop_record import evaluations

    results = {
        "pre": {"mean_reward": 0.25, "accuracy": 10.0},
        "intermediate": [
            {"step": 10, "attempt": 1, "mean_reward": 0.30, "accuracy": 20.0},
            {"step": 20, "attempt": 1, "mean_reward": 0.35, "accuracy": 25.0},
            {"step": 20, "attempt": 2, "mean_reward": 0.40, "accuracy": 30.0},
            {"step": 30, "attempt": 2, "mean_reward": None, "accuracy": 35.0},
        ],
    }
    assert evaluations(results, "post_mean_reward") == {10: 0.30, 20: 0.40}
    assert evaluations(results, "post_accuracy") == {10: 20.0, 20: 30.0, 30: 35.0}
    assert evaluations(results, "reward_gain") == pytest.approx({10: 0.05, 20: 0.15})
    # Without the base model's evaluation there is no gain, so no evaluation to judge.
    assert evaluations({**results, "pre": None}, "reward_gain") == {}
