"""What a run's TPU time costs: list prices per chip-hour, by TPU family and provisioning mode.

The prices live in one data file (``prices.json``), each with its source and the date it was read;
a deployment overrides entries with ``RLPIPE_PRICES`` (``Settings.prices_json``). A price nobody
published stays ``None`` and every cost computed from it is ``None`` too: reported as unset, never
guessed. Pure: the file is package data, read once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

MODES = ("reservation", "on-demand", "spot", "flex-start")


@dataclass(frozen=True)
class Price:
    per_chip_hour: float | None
    source: str
    read: str
    note: str = ""

    def cost(self, chip_hours: float) -> float | None:
        return None if self.per_chip_hour is None else round(chip_hours * self.per_chip_hour, 2)

    def describe(self) -> str:
        if self.per_chip_hour is None:
            return f"unset ({self.note or 'no published price'}; {self.source}, read {self.read})"
        return f"${self.per_chip_hour:g}/chip-hour ({self.source}, read {self.read})"


@cache
def _shipped() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("rlpipe.core").joinpath("prices.json").read_text())
    return data


def family(tpu_type: str) -> str:
    """``v6e-32`` → ``v6e``: a chip costs the same whatever the slice size."""
    return tpu_type.split("-", 1)[0]


def price(tpu_type: str, mode: str, override: Mapping[str, Any] | None = None) -> Price:
    """The list price of one chip-hour; ``override`` is a deployment's ``prices`` mapping."""
    entry = dict((_shipped()["prices"].get(family(tpu_type)) or {}).get(mode) or {})
    entry.update(((override or {}).get(family(tpu_type)) or {}).get(mode) or {})
    raw = entry.get("price")
    value = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) and raw >= 0 else None
    return Price(
        value,
        str(entry.get("source") or "no source"),
        str(entry.get("read") or "?"),
        str(entry.get("note") or ""),
    )


def parse_override(text: str) -> dict[str, Any]:
    """``RLPIPE_PRICES``: JSON ``{family: {mode: {price, source, read}}}``; every price needs its
    source and date, so an override cannot slip in an unexplained number."""
    if not text.strip():
        return {}
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("RLPIPE_PRICES must be a JSON object {family: {mode: {price, source, read}}}")
    for fam, modes in data.items():
        for mode, entry in (modes or {}).items():
            if mode not in MODES:
                raise ValueError(f"RLPIPE_PRICES.{fam}.{mode}: unknown mode; use one of {', '.join(MODES)}")
            if not isinstance(entry, dict) or not entry.get("source") or not entry.get("read"):
                raise ValueError(f"RLPIPE_PRICES.{fam}.{mode}: give price, source and read (the date)")
    return data
