"""``sweep.early_stop`` as intake checks it: against every child's evaluation steps, each problem
naming its field and the fix (``core.request.stop_schedule``). The expected steps are worked out by
hand from the minimal request: batch 4, one iteration, evaluations every 10 steps (rl.yml's
eval_interval), 50 steps unless num_batches says otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import grid, load_request, validate_request
from rlpipe.core.request.stop_schedule import rungs
from tests.conftest import ROOT, minimal_request
from tests.harness.mutants import mutant

SELECT = {"metric": "post_mean_reward"}
GRID = {"training.learning_rate": [1e-5, 2e-5]}


def _problems(**sweep: Any) -> list[tuple[str, str, str]]:
    doc = minimal_request(sweep={"grid": GRID, **sweep})
    try:
        validate_request(doc)
    except RequestInvalid as exc:
        return [(p.path, p.message, p.fix) for p in exc.problems]
    return []


def test_the_rule_alone_or_with_its_parameters_is_accepted_and_none_is_the_default() -> None:
    assert _problems(select=SELECT, early_stop="asha") == []
    assert _problems(select=SELECT, early_stop={"rule": "median", "min_step": 20}) == []
    req = validate_request(minimal_request(sweep={"grid": GRID, "select": SELECT}))
    assert req.sweep is not None and req.sweep.stopping.rule == "none" and rungs(req) == ()


def test_the_example_judges_at_10_30_and_90_of_200() -> None:
    req = load_request((ROOT / "examples" / "sweep-asha.yaml").read_bytes())
    assert rungs(req) == (10, 30, 90)


def test_a_rule_without_select_has_no_metric_to_read() -> None:
    [(path, message, fix)] = _problems(early_stop="median")
    assert path == "sweep.early_stop" and "no select rule" in message
    assert "add sweep.select" in fix


def test_a_rung_off_the_evaluation_steps_names_the_multiple_to_use() -> None:
    [(path, message, fix)] = _problems(select=SELECT, early_stop={"rule": "asha", "eta": 2, "min_step": 15})
    assert path == "sweep.early_stop.min_step"
    assert "rung at step 15 is not an evaluation step (evaluations every 10 steps)" in message  # 15, 30
    assert fix == "make min_step a multiple of eval_interval, e.g. 20"


def test_no_judged_step_before_the_end_is_refused_for_either_rule() -> None:
    [(path, message, _)] = _problems(select=SELECT, early_stop={"rule": "median", "min_step": 45})
    assert path == "sweep.early_stop.min_step" and "before the final step 50" in message
    [(path, message, _)] = _problems(select=SELECT, early_stop={"rule": "asha", "min_step": 50})
    assert path == "sweep.early_stop.min_step" and "the first rung, step 50" in message


def test_a_run_that_prints_no_evaluation_cannot_be_stopped_early() -> None:
    doc = minimal_request(
        sweep={"grid": GRID, "select": SELECT, "early_stop": "asha"},
        maxtext_overrides={"num_test_batches": 0},
    )
    with pytest.raises(RequestInvalid) as refused:
        validate_request(doc)
    assert "training.eval_interval" in {p.path for p in refused.value.problems}


def test_children_whose_steps_differ_are_named_in_the_problem() -> None:
    """num_batches 50 and 15: eta 2 from step 20 gives the first child rungs 20 and 40 (before its
    end at 50); for the second, which ends at 15, the first rung is past its end: only it is named."""
    problems = _problems(
        grid={"training.num_batches": [50, 15]},
        select=SELECT,
        early_stop={"rule": "asha", "eta": 2, "min_step": 20},
    )
    assert [p for p in problems if p[0] == "sweep.early_stop.min_step"] == [
        (
            "sweep.early_stop.min_step",
            "for sweep child 1 (num_batches=15): the first rung, step 20, is not before the final step 15: "
            "no child would be judged",
            "lower min_step below 15, e.g. to eval_interval (10)",
        )
    ]


def test_min_step_is_bounded() -> None:
    [(path, _, _)] = _problems(select=SELECT, early_stop={"rule": "asha", "min_step": 10**9})
    assert path == "sweep.early_stop.min_step"


def test_mutation_the_sweep_check_without_the_stopping_rule_lets_a_bad_rung_through(tmp_path: Path) -> None:
    """The check bites: grid's children check without ``stop_problems``."""
    doc = minimal_request(
        sweep={"grid": GRID, "select": SELECT, "early_stop": {"rule": "asha", "min_step": 15}}
    )
    req = validate_request(minimal_request(sweep={"grid": GRID, "select": SELECT}))
    parsed = type(req).model_validate({**req.model_dump(mode="json"), "sweep": doc["sweep"]})
    assert grid.problems(parsed, grid.Policy(), validate_request)
    with mutant(grid, "found.extend(stop_problems(spec, made))", "pass", tmp_path) as bare:
        assert bare.problems(parsed, bare.Policy(), validate_request) == []
