"""`rlpipe plan` of a sweep with `sweep.early_stop` (docs/sweeps.md, "Early stopping"): the rule,
the steps it judges at, and the best and worst training steps and chip-hours it allows against
none, in the JSON form and in the text, on hand-computed sweeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cli import main as cli
from rlpipe.cli.exit_codes import ExitCode
from tests.conftest import ROOT, minimal_request

# 4 × 4 = 16 children; num_batches 100 (batch 4, one iteration) ends each at step 100; evaluations
# every 10 steps (the default eval_interval), so ASHA's rungs with eta 3 are 10, 30 and 90
GRID = {
    "training.learning_rate": [1e-5, 2e-5, 3e-5, 4e-5],
    "maxtext_overrides.rl.grpo_beta": [0.01, 0.02, 0.03, 0.04],
}


def _file(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _sweep(early_stop: object, **extra: object) -> dict[str, Any]:
    sweep = {"grid": GRID, "select": {"metric": "post_mean_reward"}, "early_stop": early_stop, **extra}
    return minimal_request(request_id="stop-plan", training={"num_batches": 100}, sweep=sweep)


def _plan(capsys: pytest.CaptureFixture[str], path: str, *args: str) -> dict[str, Any]:
    assert cli.main(["plan", path, "--json", *args]) == ExitCode.OK
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    return plan


def test_asha_on_16_children_shows_its_rungs_and_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(capsys, _file(tmp_path, _sweep("asha")), "--step-seconds", "9")
    stop = plan["sweep"]["early_stop"]
    assert (stop["rule"], stop["eta"], stop["judged_at"], stop["final_step"]) == (
        "asha",
        3,
        [10, 30, 90],
        100,
    )
    # Best: 14 stopped at the first rung, the first eta-1 = 2 at every rung to 100 = 340 of 1600.
    assert stop["steps"] == {"none": 1600, "best": 340, "worst": 1600}
    assert stop["fraction_of_none"] == {"best": 0.2125, "worst": 1.0}
    # 1600 steps × 9 s × 32 chips / 3600 = 128 chip-hours under none; 340 of them: 27.2.
    assert stop["chip_hours"] == {"none": 128.0, "best": 27.2, "worst": 128.0}
    assert stop["exact"] is True
    assert stop["best_case"] == "14 children stopped at step 10; 2 train to the final step 100"


def test_the_best_case_counts_the_steps_a_stopped_child_trains_before_its_stop_lands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's children stopped at step 10 trained to step 20: the control plane judges a child
    when it reads its status (the workflow's poll at the latest), and the plan's best case assumed
    they stop at the rung. With a 60 s poll and 9 s a step, each stopped child trains on up to
    ceil(60 / 9) = 7 more steps: 340 + 14 × 7 = 438 of 1600 (0.27375, kept as 0.2737: the float lies
    just below the half)."""
    monkeypatch.setenv("RLPIPE_CALLBACK_TIMEOUT_SECONDS", "60")
    path = _file(tmp_path, _sweep("asha"))
    delay = _plan(capsys, path, "--step-seconds", "9")["sweep"]["early_stop"]["stop_delay"]
    assert delay == {
        "poll_seconds": 60,
        "steps_per_stopped_child": 7,
        "best_steps": 438,
        "best_fraction": 0.2737,
    }
    assert cli.main(["plan", path, "--step-seconds", "9"]) == ExitCode.OK
    text = capsys.readouterr().out
    assert (
        "every 60 s at most): up to 7 more steps each at the given step time; at best 438 steps with it (27.4% of none)"
        in text
    )
    assert (
        _plan(capsys, path)["sweep"]["early_stop"]["stop_delay"]["best_steps"] is None
    )  # no step time: not counted


def test_without_step_seconds_the_text_gives_steps_and_the_fraction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["plan", _file(tmp_path, _sweep({"rule": "median", "min_step": 30}))]) == ExitCode.OK
    text = capsys.readouterr().out
    assert (
        "  early stop: median, reading post_mean_reward; evaluations judged at steps 30, 40, 50, 60, 70, 80, 90 of 100"
        in text
    )
    # Two never stopped (to 100), fourteen at 30: 620 of 1600 = 38.75%.
    assert "at best 620 (38.8% of none), at worst 1600 (no child stopped: the same as none)" in text
    assert "chip-hours of the rule: pass --step-seconds" in text
    assert "assumes: best: the rule stops every child it may, as early as it may" in text


def test_no_rule_has_no_early_stop_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _plan(capsys, _file(tmp_path, _sweep("none")))["sweep"]["early_stop"] is None


def test_the_example_sweep_with_asha_and_its_one_slot_mutation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/sweep-lr.yaml (4 children, 2 slots, final step 50) with early_stop: asha (eta 3): two
    stopped at 10, the first two at each rung to 50 = 120 of 200. Mutated to eta 2, one goes on at
    every rung: 3·10 + 50 = 80."""
    doc = yaml.safe_load((ROOT / "examples" / "sweep-lr.yaml").read_text())
    doc["sweep"]["early_stop"] = "asha"
    assert _plan(capsys, _file(tmp_path, doc))["sweep"]["early_stop"]["steps"]["best"] == 120
    doc["sweep"]["early_stop"] = {"rule": "asha", "eta": 2}
    assert _plan(capsys, _file(tmp_path, doc))["sweep"]["early_stop"]["steps"]["best"] == 80
