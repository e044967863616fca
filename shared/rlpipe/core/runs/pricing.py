"""What a run's chip-hours cost at its provisioning mode's list price (``core.cost``), read from
the request as the record keeps it (``RunRecord.request``)."""

from __future__ import annotations

from typing import Any

from rlpipe.core import cost


def run_price(request: dict[str, Any], prices_json: str) -> tuple[str, cost.Price] | None:
    """The run's provisioning mode and its list price per chip-hour (None without a TPU type).

    A deployment's ``RLPIPE_PRICES`` that cannot be read makes the price unset, with the reason:
    a run must not fail on every status read because of a cost setting, and the list price is
    not what a deployment that overrides it pays (``rlpipe plan`` refuses the setting outright)."""
    tpu = request.get("tpu") or {}
    if not tpu.get("type"):
        return None
    mode = str(tpu.get("provisioning") or "reservation")
    try:
        override = cost.parse_override(prices_json) if prices_json else None
    except cost.PricesInvalid as exc:
        return mode, cost.Price(None, cost.SETTING, "now", f"{cost.SETTING} is invalid: {exc}")
    return mode, cost.price(str(tpu["type"]), mode, override)


def cost_estimate(request: dict[str, Any], chip_hours: float | None, prices_json: str) -> float | None:
    """What ``chip_hours`` cost at the run's provisioning mode's list price (None when unpublished)."""
    priced = run_price(request, prices_json)
    return priced[1].cost(chip_hours) if priced and chip_hours else None
