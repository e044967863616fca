"""What a run's TPU time costs: list prices per chip-hour, by TPU family and provisioning mode.

The prices live in one data file (``prices.json``), each with its source and the date it was read;
a deployment overrides entries with ``RLPIPE_PRICES`` (``Settings.prices_json``). A price nobody
published stays ``None`` and every cost computed from it is ``None`` too: reported as unset, never
guessed. Pure: the file is package data, read once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from rlpipe.core import tpu

MODES = ("reservation", "on-demand", "spot", "flex-start")
# The highest price per chip-hour a deployment may state: list prices are a few dollars, and a
# bound keeps every cost computed from one finite (a JSON 1e400 reads as infinity, 10**400 as an
# integer no float can hold).
MAX_PRICE_PER_CHIP_HOUR = 10_000.0


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
    value = float(raw) if isinstance(raw, int | float) and _is_price(raw) else None
    return Price(
        value,
        str(entry.get("source") or "no source"),
        str(entry.get("read") or "?"),
        str(entry.get("note") or ""),
    )


def _is_price(raw: object) -> bool:
    """A number from 0 to ``MAX_PRICE_PER_CHIP_HOUR`` (finite; compared before any conversion)."""
    return isinstance(raw, int | float) and not isinstance(raw, bool) and 0 <= raw <= MAX_PRICE_PER_CHIP_HOUR


SETTING = "RLPIPE_PRICES"
SETTING_SHAPE = '{family: {mode: {"price": number or null, "source": "...", "read": "date"}}}'
SETTING_EXAMPLE = '{"v6e": {"spot": {"price": 1.2, "source": "our contract", "read": "2026-11-30"}}}'
# Where a deployment sets it: terraform's tpu_prices_json becomes the functions' and the CLI's
# RLPIPE_PRICES (infra/terraform, docs/deploy.md).
SETTING_FIX = f"set {SETTING} (terraform: tpu_prices_json) to {SETTING_SHAPE}, e.g. {SETTING_EXAMPLE}"


class PricesInvalid(ValueError):
    """A deployment's ``RLPIPE_PRICES`` that cannot be read. The message names the setting, the
    entry and the fix, because the person who reads it set an environment variable (or a
    terraform variable) and has no other way to find which part of the JSON is wrong."""


def families() -> tuple[str, ...]:
    """The TPU families a request can name (``tpu.SHAPES``): the only ones a price can apply to."""
    return tuple(sorted({family(t) for t in tpu.SHAPES}))


def parse_override(text: str) -> dict[str, Any]:
    """``RLPIPE_PRICES``: JSON ``{family: {mode: {price, source, read}}}``; every price needs its
    source and date, so an override cannot slip in an unexplained number. Anything else raises
    :class:`PricesInvalid` rather than being ignored: a price that silently reads as unset would
    let a deployment believe its costs are reported when they are not."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PricesInvalid(
            f"{SETTING} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); {SETTING_FIX}"
        ) from None
    if not isinstance(data, dict):
        raise PricesInvalid(f"{SETTING} must be a JSON object, not {type(data).__name__}; {SETTING_FIX}")
    for fam, modes in data.items():
        if fam not in families():
            raise PricesInvalid(
                f"{SETTING}.{fam}: unknown TPU family; use one of {', '.join(families())} (as in v6e-32)"
            )
        if not isinstance(modes, dict):
            raise PricesInvalid(
                f"{SETTING}.{fam} must be an object of modes ({', '.join(MODES)}); {SETTING_FIX}"
            )
        for mode, entry in modes.items():
            where = f"{SETTING}.{fam}.{mode}"
            if mode not in MODES:
                raise PricesInvalid(f"{where}: unknown mode; use one of {', '.join(MODES)}")
            if not isinstance(entry, dict) or not entry.get("source") or not entry.get("read"):
                raise PricesInvalid(f"{where}: give price, source and read (the date)")
            raw = entry.get("price")
            if raw is not None and not _is_price(raw):
                shown = (
                    json.dumps(raw) if not isinstance(raw, int) or raw.bit_length() <= 64 else "a huge number"
                )
                raise PricesInvalid(
                    f"{where}.price is {shown}: give the price per chip-hour as a number from 0 to "
                    f"{MAX_PRICE_PER_CHIP_HOUR:,.0f} (not a string), or null for no published price"
                )
    return data


def unset_hint(tpu_type: str, modes: Sequence[str]) -> str:
    """The one sentence a person reads when no price is known: which prices are missing and where
    to set them. Said once, plainly: the shipped list has no v6e price because nobody published
    one, which is not worth repeating per mode (``prices.json`` keeps each source)."""
    return (
        f"no published {family(tpu_type)} price for {', '.join(modes)}; set one with {SETTING} "
        "(terraform: tpu_prices_json; docs/deploy.md)"
    )
