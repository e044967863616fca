"""tpu.provisioning: what each mode implies for the request, the plan and the cost (docs/provisioning.md)."""

from __future__ import annotations

import json

import pytest

from rlpipe.core import cost, presets
from rlpipe.core.plan import build_plan
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import provisioning, validate_request
from rlpipe.core.request.policy import Policy
from tests.conftest import minimal_request


def plan_of(**fields: object) -> dict:
    return build_plan(validate_request(minimal_request(**fields)), run_id="r1", bucket="b", step_seconds=60)


def test_the_tutorials_recipe_loses_the_whole_run_to_one_preemption() -> None:
    c = plan_of()["capacity"]
    assert (c["provisioning"], c["chips"], c["steps_at_risk_per_preemption"]) == ("reservation", 32, 50)
    assert c["expected_hours"] == pytest.approx(50 * 60 / 3600, rel=1e-3)


def test_spot_gets_a_checkpoint_period_that_bounds_the_loss_by_the_stated_rule() -> None:
    req = validate_request(minimal_request(tpu={"provisioning": "spot"}, training={"num_batches": 400}))
    assert req.training.checkpoint_period == 40 == provisioning.spot_checkpoint_period(400)
    c = build_plan(req, run_id="r1", bucket="b")["capacity"]
    assert c["steps_at_risk_per_preemption"] == 40 <= 400 * presets.SPOT_MAX_STEPS_AT_RISK
    assert not c["warnings"]
    # A period the request sets itself is kept, and warned about when it leaves no checkpoint.
    req = validate_request(minimal_request(tpu={"provisioning": "spot"}, training={"checkpoint_period": 50}))
    assert req.training.checkpoint_period == 50
    assert "restarts training from step 0" in provisioning.warnings(req.model_dump(mode="python"))[0]


def test_flex_start_runs_through_the_provisioning_request_queue_unless_one_is_named() -> None:
    assert validate_request(minimal_request(tpu={"provisioning": "flex-start"})).tpu.queue == "flex-queue"
    ours = Policy(queues=("mine", "user-queue", "flex-queue"))  # a queue of its own, the deployment lists
    assert (
        validate_request(minimal_request(tpu={"provisioning": "flex-start", "queue": "mine"}), ours).tpu.queue
        == "mine"
    )
    assert validate_request(minimal_request()).tpu.queue == "user-queue"
    mine = validate_request(minimal_request(tpu={"provisioning": "flex-start", "queue": "mine"}), ours)
    assert "ProvisioningRequest admission check" in provisioning.warnings(mine.model_dump(mode="python"))[0]


def test_a_reservation_name_outside_reservation_mode_is_refused() -> None:
    with pytest.raises(RequestInvalid) as info:
        validate_request(minimal_request(tpu={"provisioning": "spot", "reservation": "res-1"}))
    assert any(p.path == "tpu.reservation" and "provisioning" in p.fix for p in info.value.problems)


def test_no_price_is_invented_and_an_override_needs_its_source() -> None:
    for mode in cost.MODES:
        assert cost.price("v6e-32", mode).per_chip_hour is None  # nothing published for v6e
    assert all(row["expected_cost"] is None for row in plan_of()["capacity"]["per_mode"].values())
    override = cost.parse_override(
        json.dumps({"v6e": {"spot": {"price": 1.5, "source": "our contract", "read": "2026-11-30"}}})
    )
    assert cost.price("v6e-64", "spot", override).cost(10) == 15.0
    with pytest.raises(ValueError, match="source"):
        cost.parse_override(json.dumps({"v6e": {"spot": {"price": 1.5}}}))
    with pytest.raises(ValueError, match="unknown mode"):
        cost.parse_override(json.dumps({"v6e": {"cheap": {"price": 1, "source": "x", "read": "y"}}}))


def test_the_ledger_costs_what_an_attempt_held_only_at_a_price_someone_published() -> None:
    from rlpipe.core.runs.pricing import cost_estimate

    request = validate_request(minimal_request(tpu={"provisioning": "spot"})).model_dump(mode="json")
    assert cost_estimate(request, 12.5, "") is None  # no published v6e price: unset, not guessed
    prices = json.dumps({"v6e": {"spot": {"price": 1.2, "source": "our contract", "read": "2026-11-30"}}})
    assert cost_estimate(request, 12.5, prices) == 15.0
    assert cost_estimate(request, 0.0, prices) is None
