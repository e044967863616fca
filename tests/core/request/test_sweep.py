"""Sweeps, the pure part: a grid's children, what a sweep may not vary, and the selection rule."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from rlpipe.core import sweep
from rlpipe.core.commands import conversion_flags
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import TrainingSpec, load_request
from rlpipe.core.request.policy import Policy
from rlpipe.core.request.sweep import SelectRule
from tests.conftest import ROOT, minimal_request

SHA = "0" * 40


def _request(policy: Policy | None = None, **fields: Any) -> Any:
    return load_request(yaml.safe_dump(minimal_request(**fields), sort_keys=False), policy=policy)


def _problems(policy: Policy | None = None, **fields: Any) -> list[Any]:
    with pytest.raises(RequestInvalid) as caught:
        _request(policy, **fields)
    return caught.value.problems


GRID = {"training.learning_rate": [1e-5, 2e-5], "maxtext_overrides.rl.grpo_beta": [0.04, 0.08, 0.16]}


def test_a_grid_is_every_combination_last_key_fastest_and_nothing_else_changes() -> None:
    req = _request(sweep={"grid": GRID})
    children = sweep.children(req)
    assert [
        (c.point["training.learning_rate"], c.point["maxtext_overrides.rl.grpo_beta"]) for c in children
    ] == [
        (1e-5, 0.04),
        (1e-5, 0.08),
        (1e-5, 0.16),
        (2e-5, 0.04),
        (2e-5, 0.08),
        (2e-5, 0.16),
    ]
    base = req.model_dump(mode="json")
    for child in children:
        got = child.request.model_dump(mode="json")
        assert got["sweep"] is None
        assert got["training"]["learning_rate"] == child.point["training.learning_rate"]
        assert got["maxtext_overrides"]["rl.grpo_beta"] == child.point["maxtext_overrides.rl.grpo_beta"]
        # Everything the point does not name is the parent's.
        got["training"]["learning_rate"] = base["training"]["learning_rate"]
        del got["maxtext_overrides"]["rl.grpo_beta"]
        assert got == {**base, "sweep": None}


def test_a_list_of_points_makes_one_child_each_in_order() -> None:
    points = [
        {"training.num_generations": 8},
        {"training.learning_rate": 5e-6, "training.num_generations": 2},
    ]
    children = sweep.children(_request(sweep={"points": points}))
    assert [c.request.training.num_generations for c in children] == [8, 2]
    assert children[1].request.training.learning_rate == 5e-6
    assert children[0].label == "num_generations=8"


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("tpu.type", "v6e-64", "tpu is shared by every child"),
        ("dataset.repo", "open-r1/OpenR1-Math-220k", "dataset is shared by every child"),
        ("hf_revision", "main", "hf_revision is shared"),
        ("training.command_env", "x", "the variables train_rl runs with"),
        ("training.scan_layers", False, "every child shares one conversion"),
        ("training.no_such_field", 1, "training has no field 'no_such_field'"),
        ("maxtext_overrides.learning_rate", 1e-5, "the request's training.learning_rate"),
        ("maxtext_overrides.dataset_name", "x/y", "the request's dataset.repo"),
    ],
)
def test_a_grid_over_a_protected_key_is_refused_naming_it(key: str, value: Any, says: str) -> None:
    problems = _problems(sweep={"grid": {key: [value]}})
    assert any(p.path == f"sweep.grid.{key}" and says in p.message for p in problems), problems


def test_a_point_over_a_pipeline_controlled_maxtext_key_is_refused_in_the_child() -> None:
    problems = _problems(sweep={"points": [{"maxtext_overrides.rl.run_name": "mine"}]})
    assert any(p.path.startswith("sweep child 0") and "run_name" in p.message for p in problems), problems


def test_a_child_whose_value_is_out_of_range_names_the_child_and_the_field() -> None:
    problems = _problems(sweep={"grid": {"training.learning_rate": [1e-5, 2.0]}})
    [problem] = problems
    assert problem.path == "sweep child 1 (learning_rate=2.0): training.learning_rate"


def test_a_grid_larger_than_the_deployment_allows_is_refused_before_it_is_expanded() -> None:
    grid = {"training.learning_rate": [1e-6 * i for i in range(1, 41)], "training.num_generations": [2, 4, 8]}
    problems = _problems(sweep={"grid": grid})
    [problem] = [p for p in problems if p.path == "sweep"]
    assert "makes 120 children" in problem.message and "at most 16" in problem.message
    assert "RLPIPE_MAX_SWEEP_CHILDREN" in problem.fix
    assert len(problems) == 1  # not 120 children's worth of anything
    small = Policy(max_sweep_children=3)
    assert _problems(small, sweep={"grid": {"training.num_generations": [2, 4, 8, 16]}})[0].path == "sweep"
    assert len(sweep.children(_request(small, sweep={"grid": {"training.num_generations": [2, 4, 8]}}))) == 3


def test_children_that_would_be_the_same_run_are_refused() -> None:
    repeated = _problems(sweep={"grid": {"training.num_generations": [4, 8, 4]}})
    assert [p.message for p in repeated] == [
        "children 0 (num_generations=4) and 2 (num_generations=4) would be the same run"
    ]
    # 4 is the preset's value: a point that sets it is the same run as a point that sets nothing new.
    same = _problems(sweep={"points": [{"training.num_generations": 4}, {"training.batch_size": 4}]})
    assert "children 0" in same[0].message and "1 (batch_size=4)" in same[0].message


def test_a_sweep_that_publishes_needs_a_select_rule() -> None:
    publish = {"repo": "rlpipe-demo/model", "private": True}
    [problem] = _problems(sweep={"grid": GRID}, publish=publish)
    assert problem.path == "sweep.select" and "rlpipe-demo/model@main" in problem.message
    assert _request(sweep={"grid": GRID, "select": {"metric": "post_mean_reward"}}, publish=publish)


def test_a_sweep_has_a_grid_or_points_never_both_and_never_neither() -> None:
    both = _problems(sweep={"grid": GRID, "points": [{"training.num_generations": 8}]})
    neither = _problems(sweep={"max_parallel": 2})
    for problems in (both, neither):
        assert [p.path for p in problems] == ["sweep"]


def test_no_key_a_sweep_may_vary_changes_the_conversion_the_children_share() -> None:
    """Every training field outside the protected list, changed, leaves the conversion flags (its
    cache key) alone: so N children can share one conversion."""
    req = _request()
    base = conversion_flags(req, SHA)
    checked = 0
    for name, info in TrainingSpec.model_fields.items():
        if name in sweep.PROTECTED_TRAINING or sweep.key_problem(f"training.{name}") is not None:
            continue
        value = getattr(req.training, name)
        other = _another(value, info.annotation)
        if other is None:
            continue
        changed = req.model_copy(update={"training": req.training.model_copy(update={name: other})})
        assert conversion_flags(changed, SHA) == base, name
        checked += 1
    assert checked >= 20
    scan = req.model_copy(
        update={"training": req.training.model_copy(update={"scan_layers": not req.training.scan_layers})}
    )
    assert conversion_flags(scan, SHA) != base  # why scan_layers is protected


def _another(value: Any, annotation: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2
    if isinstance(value, str):
        return value + "x"
    return None


def test_the_example_is_a_two_by_two_grid_run_two_at_a_time() -> None:
    req = load_request((ROOT / "examples" / "sweep-lr.yaml").read_bytes())
    assert req.sweep is not None and sweep.size(req.sweep) == 4
    assert sweep.parallelism(req.sweep, 4) == 2


# ---- selection --------------------------------------------------------------------------------


def _child(
    index: int, post: float | None, *, arrived: bool = True, state: str = "exporting"
) -> sweep.Candidate:
    results = {"pre": {"mean_reward": 0.1, "accuracy": 10.0}}
    if post is not None:
        results["post"] = {"mean_reward": post, "accuracy": post * 100}
    return sweep.Candidate(f"r{index}", index, {"training.learning_rate": index}, state, arrived, results)


def test_the_highest_post_reward_wins_and_the_reason_names_the_others() -> None:
    chosen = sweep.select(
        SelectRule(metric="post_mean_reward"),
        [_child(0, 0.5), _child(1, 0.7), _child(2, None, arrived=False, state="gated"), _child(3, 0.6)],
    )
    assert (chosen.run_id, chosen.index, chosen.value) == ("r1", 1, 0.7)
    assert "has the highest post_mean_reward, 0.7000, of 3 candidates" in chosen.reason
    assert "child 0 0.5000" in chosen.reason and "child 3 0.6000" in chosen.reason
    assert "child 2 is not a candidate: it ended gated" in chosen.reason
    assert [row["selected"] for row in chosen.table] == [False, True, False, False]


def test_min_direction_a_gain_metric_and_a_tie_that_goes_to_the_lower_index() -> None:
    children = [_child(0, 0.6), _child(1, 0.4), _child(2, 0.4)]
    assert sweep.select(SelectRule(metric="post_mean_reward", direction="min"), children).run_id == "r1"
    gain = sweep.select(SelectRule(metric="reward_gain"), [_child(0, 0.3), _child(1, 0.3)])
    assert gain.run_id == "r0" and gain.value == pytest.approx(0.2)


def test_no_candidate_means_no_winner_with_every_childs_reason() -> None:
    chosen = sweep.select(
        SelectRule(metric="post_accuracy"),
        [_child(0, None), _child(1, 0.9, arrived=False, state="failed")],
    )
    assert chosen.run_id is None
    assert "child 0 is not a candidate: no post_accuracy was printed" in chosen.reason
    assert "child 1 is not a candidate: it ended failed" in chosen.reason


@pytest.mark.parametrize(
    ("states", "selecting", "winner", "cancelled", "expected"),
    [
        (["accepted", "accepted"], True, None, False, "accepted"),
        (["training", "accepted"], True, None, False, "training"),
        (["succeeded", "publishing"], True, "publishing", False, "publishing"),
        (["succeeded", "succeeded"], True, "succeeded", False, "succeeded"),
        (["succeeded", "failed"], True, "failed", False, "failed"),
        (["gated", "gated"], True, None, False, "gated"),
        (["gated", "failed"], True, None, False, "failed"),
        (["succeeded", "succeeded"], False, None, False, "succeeded"),
        (["succeeded", "failed"], False, None, False, "failed"),
        (["training", "succeeded"], True, None, True, "cancelled"),
        # children cancelled one by one (the CLI cancels their executions before the parent)
        (["cancelled", "cancelled"], True, None, False, "cancelled"),
        (["succeeded", "cancelled"], False, None, False, "cancelled"),
        (["failed", "cancelled"], False, None, False, "failed"),
    ],
)
def test_the_parents_state_follows_from_its_childrens(
    states: list[str], selecting: bool, winner: str | None, cancelled: bool, expected: str
) -> None:
    got = sweep.parent_state(states, selecting=selecting, winner_state=winner, cancelled=cancelled)
    assert got == expected
