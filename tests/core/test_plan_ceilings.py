"""Every derived count has a ceiling and is counted, not listed: no request makes validate or plan
die with MemoryError or OverflowError, or store a final step no 64-bit field holds.

Reproduction 4 of the issue: ``num_epoch: 1000000000000`` with ``checkpoint_period: 1`` made
``validate`` and ``plan`` build the checkpoint schedule as a list until MemoryError, and
``num_epoch: 4611686018427387904`` stored an 82-bit ``final_step``. The counts below are worked by
hand from the step rule (``final = num_batches × num_iterations × num_epoch`` with plentiful data).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.core import chip_hours, cost, step_counts, steps
from rlpipe.core.plan import build_plan
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import validate_request
from tests.conftest import ROOT, minimal_request


def _problems(**fields: Any) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(minimal_request(**fields))
    return {p.path: p.message for p in caught.value.problems}


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        # reproduction 4: a trillion epochs, a checkpoint every step
        (
            {"maxtext_overrides": {"num_epoch": 10**12}, "training": {"checkpoint_period": 1}},
            "maxtext_overrides.num_epoch",
        ),
        # reproduction 4: an 82-bit final step (2**62 epochs of 50 batches)
        ({"maxtext_overrides": {"num_epoch": 2**62}}, "maxtext_overrides.num_epoch"),
        ({"maxtext_overrides": {"rl.num_iterations": 2**40}}, "maxtext_overrides.rl.num_iterations"),
        # 1,000,000 batches × 2 epochs = 2,000,000 steps: over the 1,000,000 ceiling
        (
            {"training": {"num_batches": 1_000_000}, "maxtext_overrides": {"num_epoch": 2}},
            "maxtext_overrides.num_epoch",
        ),
        # 200,000 steps with a checkpoint every step: 200,000 checkpoints, over 100,000
        ({"training": {"num_batches": 200_000, "checkpoint_period": 1}}, "training.checkpoint_period"),
        # 1,000,000 outer steps evaluated every step: 1,000,000 evaluations, over 100,000
        (
            {"training": {"num_batches": 1_000_000}, "maxtext_overrides": {"eval_interval": 1}},
            "maxtext_overrides.eval_interval",
        ),
    ],
    ids=["trillion-epochs", "82-bit", "iterations", "steps", "checkpoints", "evaluations"],
)
def test_a_count_beyond_its_ceiling_is_refused_naming_the_field(fields: dict[str, Any], path: str) -> None:
    assert path in _problems(**fields)


def test_a_request_at_the_ceilings_is_accepted_and_planned() -> None:
    # 1,000,000 steps; a checkpoint every 10 is 100,000 checkpoints; an evaluation every 10 outer
    # steps is 100,000 evaluations: each exactly at its ceiling.
    req = validate_request(minimal_request(training={"num_batches": 1_000_000, "checkpoint_period": 10}))
    plan = build_plan(req, run_id="rceiling00001", bucket="b")
    training = plan["training"]
    assert training["final_step"] == 1_000_000 == steps.MAX_TRAIN_STEPS
    assert len(training["checkpoints"]) == 100_000 and training["checkpoints"][-1] == 1_000_000
    assert training["checkpoints_kept"] == list(range(999_910, 1_000_001, 10))
    assert len(training["evaluations"]["intermediate_steps"]) == 100_000
    json.dumps(plan, allow_nan=False)


def test_a_schedule_is_counted_and_only_what_is_asked_for_is_listed() -> None:
    assert step_counts.checkpoint_schedule(10, 3) == [3, 6, 9, 10]
    assert step_counts.checkpoint_schedule(9, 3) == [3, 6, 9]
    assert step_counts.checkpoint_schedule(10, 3, last=2) == [9, 10]
    assert step_counts.checkpoint_count(10**18, 1) == 10**18
    # the newest three of a trillion steps, without the others (a list of them cannot be built)
    assert step_counts.checkpoint_schedule(10**12, 1, last=3) == [10**12 - 2, 10**12 - 1, 10**12]


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_the_cli_answers_a_request_beyond_a_ceiling_with_its_field_not_a_traceback(
    tmp_path: Path, command: str
) -> None:
    request = tmp_path / "r.yaml"
    request.write_text(
        yaml.safe_dump(
            minimal_request(maxtext_overrides={"num_epoch": 10**12}, training={"checkpoint_period": 1})
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPIPE_")}
    done = subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", command, str(request)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "maxtext_overrides.num_epoch" in done.stderr


@pytest.mark.parametrize("seconds", [math.inf, 1e308, -5.0])
def test_an_estimate_beyond_the_chip_hour_ceiling_is_not_stated(seconds: float) -> None:
    req = validate_request(minimal_request())
    plan = build_plan(req, run_id="rceiling00002", bucket="b", step_seconds=seconds)
    capacity = plan["capacity"]
    assert capacity["expected_hours"] is None and capacity["expected_chip_hours"] is None
    assert any("--step-seconds" in w for w in capacity["warnings"])
    json.dumps(plan, allow_nan=False)


@pytest.mark.parametrize("price", ["1e400", str(10**400), "-1"])
def test_a_price_no_float_holds_is_refused_by_name(price: str) -> None:
    text = '{"v6e": {"spot": {"price": ' + price + ', "source": "ours", "read": "2026-12-01"}}}'
    with pytest.raises(cost.PricesInvalid, match=r"RLPIPE_PRICES\.v6e\.spot\.price"):
        cost.parse_override(text)
    unread = cost.price("v6e-32", "spot", {"v6e": {"spot": {"price": 10**400, "source": "x", "read": "y"}}})
    assert unread.per_chip_hour is None


def test_a_pod_claiming_more_chips_than_any_host_has_adds_no_chip_hours() -> None:
    def pod(chips: str) -> dict[str, Any]:
        return {
            "spec": {"containers": [{"resources": {"limits": {chip_hours.TPU_RESOURCE: chips}}}]},
            "status": {"startTime": "2026-12-01T00:00:00Z"},
        }

    now = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
    assert chip_hours.chip_hours([pod("8")], now) == 8.0  # one hour of one v6e host
    assert chip_hours.chip_hours([pod("9" * 400), pod(str(10**4000))], now) == 0.0
