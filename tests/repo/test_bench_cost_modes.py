"""bench/cost_modes.py: properties its simulation must have whatever the assumed rates (small, seeded)."""

from __future__ import annotations

import pytest

from bench import cost_modes
from rlpipe.core import presets
from rlpipe.core.request.provisioning import spot_checkpoint_period

RUNS = 200


@pytest.fixture(scope="module")
def tables() -> dict[int, cost_modes.Table]:
    found, _ = cost_modes.run(runs=RUNS, seed=7, final_steps=(500, 50), prices_override={})
    return {t.final_step: t for t in found}


def test_on_demand_loses_nothing_and_runs_once(tables: dict[int, cost_modes.Table]) -> None:
    for table in tables.values():
        row = table.row("on-demand")
        assert row.success_rate == 1.0 and row.steps_lost == 0 and row.attempts == 1
        assert row.period == presets.MAXTEXT_CHECKPOINT_PERIOD


def test_spot_uses_the_policy_period_and_resumes_from_commits(tables: dict[int, cost_modes.Table]) -> None:
    for final, table in tables.items():
        row = table.row("spot", 0.5)
        assert row.period == spot_checkpoint_period(final)
        assert all(r.committed % row.period == 0 or r.committed == final for r in row.runs)


def test_a_higher_reclaim_rate_costs_more_chip_hours(tables: dict[int, cost_modes.Table]) -> None:
    for table in tables.values():
        low, high = table.row("spot", 0.05), table.row("spot", 0.25)
        assert high.chip_hours > low.chip_hours > table.row("on-demand").chip_hours
        assert high.steps_lost > low.steps_lost


def test_the_spot_period_loses_fewer_steps_per_reclaim_than_none() -> None:
    final = 500
    policy = cost_modes.simulate(cost_modes.Model("spot", final, spot_rate_per_hour=0.25), RUNS, 3)
    whole = cost_modes.simulate(
        cost_modes.Model("spot", final, spot_rate_per_hour=0.25, checkpoint_period=final), RUNS, 3
    )
    assert policy.period < whole.period == final
    assert policy.steps_lost_per_reclaim < whole.steps_lost_per_reclaim
    assert policy.chip_hours < whole.chip_hours


def test_flex_start_holds_chips_only_while_training(tables: dict[int, cost_modes.Table]) -> None:
    for table in tables.values():
        flex, on_demand = table.row("flex-start"), table.row("on-demand")
        assert flex.chip_hours == pytest.approx(on_demand.chip_hours)
        assert flex.wall_hours() > on_demand.wall_hours()
        cost_ratio = table.cost_ratio(flex)
        assert cost_ratio is not None
        assert cost_ratio <= cost_modes.FLEX_MIN_PRICE_RATIO * table.chip_ratio(flex) + 1e-9
        assert round(cost_modes.FLEX_MIN_PRICE_RATIO, 2) == 0.47


def test_budgets_come_from_production_classify() -> None:
    spot = cost_modes.simulate(cost_modes.Model("spot", 500, spot_rate_per_hour=50.0), 5, 1)
    for r in spot.runs:
        assert not r.succeeded and r.attempts == 6 and r.reclaims == 6
        assert r.ended.startswith("preempted budget of 5 exhausted")
    flex = cost_modes.simulate(cost_modes.Model("flex-start", 50, flex_fail_p=1.0), 5, 1)
    for r in flex.runs:
        assert not r.succeeded and r.chip_s == 0 and r.attempts == 11
        assert r.ended.startswith("capacity budget of 10 exhausted")


def test_same_seed_same_table_and_prices() -> None:
    kwargs = {"runs": 50, "final_steps": (50,), "spot_rates": (0.5,), "prices_override": {}}
    _, a = cost_modes.run(seed=1, **kwargs)
    _, b = cost_modes.run(seed=1, **kwargs)
    _, c = cost_modes.run(seed=2, **kwargs)
    assert a == b != c
    assert "× r_spot" in a and "n/a: committed capacity" in a
    _, given = cost_modes.run(seed=1, price_ratio={"spot": 0.4}, **kwargs)
    assert "0.4 (your assumption" in given and "× r_spot" not in given
    prices = {"v6e": {"on-demand": {"price": 2.0, "source": "test", "read": "2026-12-03"}}}
    [table], priced = cost_modes.run(seed=1, **{**kwargs, "prices_override": prices})
    dollars = 2.0 * table.row("on-demand").chip_hours  # (180 + 50 × 60 + 20) s × 32 chips × $2
    assert f"| {dollars:,.2f} (test, read 2026-12-03) |" in priced and "| unset |" in priced
