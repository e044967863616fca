"""`rlpipe plan`'s chip-hours and costs, and a deployment's RLPIPE_PRICES that cannot be read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cli.test_cli import rlpipe

PRICE = {"v6e": {"reservation": {"price": 1.0, "source": "our contract", "read": "2026-11-30"}}}


def _plan(example: str, step_seconds: float) -> dict[str, Any]:
    result = rlpipe("plan", f"examples/{example}", "--json", "--step-seconds", str(step_seconds))
    assert result.returncode == 0, result.stderr
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


@pytest.mark.parametrize(
    ("example", "chips", "step_seconds"),
    [
        ("gemma4-26b-v6e-64.yaml", 64, 60.0),  # 50 steps of 60 s on 64 chips: 53.33, not 53.31
        ("gemma4-26b-v6e-32.yaml", 32, 37.0),
        ("gemma4-26b-v6e-32x2.yaml", 64, 61.0),
    ],
)
def test_chip_hours_and_cost_come_from_the_unrounded_hours(
    example: str, chips: int, step_seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLPIPE_PRICES", json.dumps(PRICE))
    plan = _plan(example, step_seconds)
    capacity = plan["capacity"]
    assert capacity["chips"] == chips
    exact = plan["training"]["final_step"] * step_seconds / 3600 * chips
    assert capacity["expected_chip_hours"] == round(exact, 2)
    # At 1 dollar a chip-hour the cost is the chip-hours, to the cent.
    assert capacity["per_mode"]["reservation"]["expected_cost"] == round(exact, 2)
    text = rlpipe("plan", f"examples/{example}", "--step-seconds", str(step_seconds))
    assert f"= {round(exact, 2):g} chip-hours of training" in text.stdout


@pytest.mark.parametrize(
    ("setting", "names"),
    [
        ('{"v6e": {"spot": {"price": 1.2, ', "not valid JSON"),  # cut short
        ('["v6e"]', "must be a JSON object"),
        ('{"v6e": 1.2}', "RLPIPE_PRICES.v6e must be an object"),
        (
            '{"v6": {"spot": {"price": 1, "source": "s", "read": "r"}}}',
            "RLPIPE_PRICES.v6: unknown TPU family",
        ),
        (
            '{"v6e": {"cheap": {"price": 1, "source": "s", "read": "r"}}}',
            "RLPIPE_PRICES.v6e.cheap: unknown mode",
        ),
        ('{"v6e": {"spot": {"price": 1.2}}}', "RLPIPE_PRICES.v6e.spot: give price, source and read"),
        # A price written as a string used to plan as "unset": the deployment would believe its
        # prices were set.
        ('{"v6e": {"spot": {"price": "1.2", "source": "s", "read": "r"}}}', "RLPIPE_PRICES.v6e.spot.price"),
        ('{"v6e": {"spot": {"price": -1, "source": "s", "read": "r"}}}', "RLPIPE_PRICES.v6e.spot.price"),
    ],
)
def test_a_bad_prices_setting_is_named_with_its_fix_not_a_traceback(
    setting: str, names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLPIPE_PRICES", setting)
    result = rlpipe("plan", "examples/gemma4-26b-v6e-32.yaml")
    assert result.returncode == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr
    assert names in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, "one line: the setting, what is wrong, the fix"


def test_the_plan_says_once_which_prices_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four rows of "cost unset; price unset (not found: …)" become one line naming the modes
    without a price and the setting; a mode the deployment priced keeps its own row."""
    monkeypatch.setenv(
        "RLPIPE_PRICES", json.dumps({"v6e": {"spot": {"price": 2.0, "source": "ours", "read": "2026-11-30"}}})
    )
    plan = _plan("gemma4-26b-v6e-32.yaml", 60.0)
    text = rlpipe("plan", "examples/gemma4-26b-v6e-32.yaml", "--step-seconds", "60").stdout
    assert "unset" not in text
    (missing,) = [line for line in text.splitlines() if "RLPIPE_PRICES" in line]
    unpriced = [m for m, row in plan["capacity"]["per_mode"].items() if row["price_per_chip_hour"] is None]
    assert unpriced and "spot" not in unpriced
    assert all(mode in missing for mode in unpriced) and "spot" not in missing
    (spot,) = [line for line in text.splitlines() if line.strip().startswith("spot")]
    exact = plan["training"]["final_step"] * 60 / 3600 * plan["capacity"]["chips"]
    assert f"${exact * 2.0:,.2f}" in spot and "ours" in spot


def test_a_bad_prices_setting_leaves_a_runs_cost_unset_and_says_why() -> None:
    """The stage function prices every attempt on each status read: a setting `rlpipe plan`
    refuses must not fail the run there; the cost is unset, naming the setting."""
    from rlpipe.core.runs import pricing

    request = {"tpu": {"type": "v6e-32", "provisioning": "spot"}}
    mode, price = pricing.run_price(request, '{"v6e": {"spot": {"price": "cheap"}}}') or ("", None)
    assert mode == "spot" and price is not None and price.per_chip_hour is None
    assert "RLPIPE_PRICES is invalid" in price.describe()
    assert pricing.cost_estimate(request, 10.0, "not json") is None
