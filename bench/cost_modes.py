"""10. What each TPU provisioning mode costs: a seeded simulation of many trainings per mode.

Run on its own: ``.venv/bin/python -m bench.cost_modes [--runs 2000] [--seed 1] [--final-step 500,50]
[--step-seconds 60] [--spot-rates 0.05,0.1,0.25,0.5] [--flex-mean-wait-min 30] [--flex-fail-p 0.1]
[--price-ratio spot=0.4 ...]``.

The policy is production's, imported, never re-implemented:

* the request: ``validate_request`` of a minimal document with ``tpu.provisioning`` and
  ``training.num_batches = F``; its defaulting gives the checkpoint period (spot:
  ``provisioning.spot_checkpoint_period(F)``; other modes: ``presets.MAXTEXT_CHECKPOINT_PERIOD``),
  its ``retry`` the budgets, cap and backoff, its ``timeouts`` the train and queued deadlines;
* the steps that commit: ``steps.checkpoint_schedule(F, period)``; a new attempt resumes from the
  newest committed step (production reads it with ``layout.latest_committed_step``);
* the verdict on a failed attempt: ``budgets.classify`` on a ``RunRecord`` holding the attempts so
  far (``permanent`` once a class's budget or the retry cap is spent: the run fails);
* the wait before a retry: the Workflows backoff (``initial_delay × multiplier**n`` capped at
  ``max_delay``, ``rlpipe.local.workflows.retry_policies.backoff_delay``).

What is assumed (Google publishes neither a TPU spot reclaim rate nor a flex-start wait
distribution, nor v6e prices) is stated in ``ASSUMPTIONS`` and printed under the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from rlpipe.core import cost, presets, steps
from rlpipe.core.failures import FailureClass
from rlpipe.core.identity import Stage
from rlpipe.core.request import Request, validate_request
from rlpipe.core.request.provisioning import spot_checkpoint_period
from rlpipe.core.runs import budgets
from rlpipe.core.runs.record import Attempt, RunRecord, Source
from rlpipe.local.simulator.timing import Timing
from rlpipe.local.workflows.retry_policies import backoff_delay

PRESET = "v6e-32"
CHIPS = 32  # v6e-32: a 4x8 slice
MODEL = {"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"}
STAGE: Stage = "train"
SIMULATED = ("on-demand", "spot", "flex-start")
_TIMING = Timing()
STARTUP_S = _TIMING.train_startup  # Pathways connect, load, first compile, pre-RL eval
SAVE_S = _TIMING.checkpoint_save  # one Orbax save, paid at each committed step

DEFAULT_FINAL_STEPS = (500, 50)
DEFAULT_SPOT_RATES = (0.05, 0.1, 0.25, 0.5)


def _flex_max_discount() -> float:
    """Google's only published flex-start figure ("Discounted (up to 53%)"), from prices.json."""
    data = json.loads(resources.files("rlpipe.core").joinpath("prices.json").read_text())
    return float(data["prices"][cost.family(PRESET)]["flex-start"]["max_discount"])


FLEX_MIN_PRICE_RATIO = round(1.0 - _flex_max_discount(), 4)  # 0.47: a floor, so costs are lower bounds
DEFAULT_PRICE_RATIOS: dict[str, float] = {"on-demand": 1.0, "flex-start": FLEX_MIN_PRICE_RATIO}


@dataclass(frozen=True)
class Model:
    """One simulated row's parameters."""

    mode: str
    final_step: int
    step_seconds: float = 60.0
    spot_rate_per_hour: float = 0.0
    flex_mean_wait_s: float = 1800.0
    flex_fail_p: float = 0.1
    checkpoint_period: int | None = None  # None: the mode's policy default (the request's defaulting)


@dataclass
class RunOutcome:
    succeeded: bool
    wall_s: float
    chip_s: float
    committed: int
    steps_lost: int
    reclaims: int
    attempts: int
    ended: str  # "done", or the permanent failure's message


@dataclass
class ModeResult:
    model: Model
    period: int
    runs: list[RunOutcome] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def success_rate(self) -> float:
        return sum(r.succeeded for r in self.runs) / self.n

    @property
    def chip_hours(self) -> float:
        """Mean chip-hours per run, failed runs included (what they burned)."""
        return sum(r.chip_s for r in self.runs) / self.n * CHIPS / 3600

    @property
    def chip_hours_per_committed_step(self) -> float:
        committed = sum(r.committed for r in self.runs)
        return math.inf if committed == 0 else sum(r.chip_s for r in self.runs) * CHIPS / 3600 / committed

    def wall_hours(self, q: float | None = None) -> float:
        """Succeeded runs' wall time (queue waits and backoff included): mean, or quantile ``q``."""
        walls = sorted(r.wall_s / 3600 for r in self.runs if r.succeeded)
        if not walls:
            return math.nan
        if q is None:
            return sum(walls) / len(walls)
        pos = (len(walls) - 1) * q
        lo, hi = math.floor(pos), math.ceil(pos)
        return walls[lo] + (walls[hi] - walls[lo]) * (pos - lo)

    @property
    def steps_lost(self) -> float:
        return sum(r.steps_lost for r in self.runs) / self.n

    @property
    def steps_lost_per_reclaim(self) -> float:
        reclaims = sum(r.reclaims for r in self.runs)
        return 0.0 if reclaims == 0 else sum(r.steps_lost for r in self.runs) / reclaims

    @property
    def attempts(self) -> float:
        return sum(r.attempts for r in self.runs) / self.n


# ---- the policy, from production ---------------------------------------------------------------------


def request_for(mode: str, final_step: int, checkpoint_period: int | None = None) -> Request:
    """A real request in ``mode`` whose training ends at ``final_step`` (preset v6e-32 otherwise)."""
    training: dict[str, Any] = {"num_batches": final_step}
    if checkpoint_period is not None:
        training["checkpoint_period"] = checkpoint_period
    return validate_request({**MODEL, "preset": PRESET, "tpu": {"provisioning": mode}, "training": training})


def policy_period(req: Request, *, chosen: bool = False) -> int:
    """The request's effective checkpoint period. Unless the caller ``chosen`` it, checked against
    the rule the table states (spot: ``spot_checkpoint_period(F)``, else MaxText's default)."""
    effective = steps.training_steps(req)
    if chosen:
        return effective.checkpoint_period
    expected = (
        spot_checkpoint_period(effective.final_step)
        if req.tpu.provisioning == "spot"
        else presets.MAXTEXT_CHECKPOINT_PERIOD
    )
    if effective.checkpoint_period != expected:
        raise AssertionError(
            f"{req.tpu.provisioning}: the request's period {effective.checkpoint_period} is not the "
            f"stated rule's {expected}; update this benchmark's description"
        )
    return expected


def _record() -> RunRecord:
    return RunRecord(
        run_id="sim", key="sim", source=Source(kind="cli"), request={}, state="training", stage=STAGE
    )


def _launch(record: RunRecord, number: int, resume: int) -> Attempt:
    attempt = Attempt(
        stage=STAGE,
        attempt=number,
        workload=f"sim-{STAGE}-{number}",
        launched_at="1970-01-01T00:00:00.000000Z",
        resume_step=resume,
    )
    record.attempts.append(attempt)
    record.attempt = number
    return attempt


# ---- one attempt on a held slice ---------------------------------------------------------------------


def _progress(resume: int, schedule: Sequence[int], held_s: float, step_s: float) -> tuple[int, int, float]:
    """Where an attempt that held the slice ``held_s`` seconds got: (committed, steps done past it,
    seconds the whole remaining training would take from slice to final commit)."""
    t = STARTUP_S
    committed, prev = resume, resume
    for k in (s for s in schedule if s > resume):
        segment = (k - prev) * step_s + SAVE_S
        if held_s < t + segment:
            done = min(int(max(0.0, held_s - t) // step_s), k - prev)
            return committed, done, math.inf
        t += segment
        committed = prev = k
    return committed, 0, t


def simulate_run(model: Model, req: Request, schedule: Sequence[int], rng: random.Random) -> RunOutcome:
    retry, final = req.retry, schedule[-1]
    record = _record()
    t = 0.0  # wall seconds since the stage's first launch
    chip_s = 0.0
    committed = 0
    lost = reclaims = retries = 0
    number = 0
    while True:
        if t >= req.timeouts.train:  # the workflow's launch_deadline: no new attempt
            return RunOutcome(False, t, chip_s, committed, lost, reclaims, number, "deadline exceeded")
        number += 1
        attempt = _launch(record, number, committed)
        deadline_left = req.timeouts.train - t
        cls: FailureClass | None = None
        reason = ""
        if model.mode == "flex-start":
            wait = rng.expovariate(1.0 / model.flex_mean_wait_s) if model.flex_mean_wait_s > 0 else 0.0
            failed = rng.random() < model.flex_fail_p
            if min(wait, req.timeouts.queued) >= deadline_left:
                t += deadline_left
                return RunOutcome(False, t, chip_s, committed, lost, reclaims, number, "deadline exceeded")
            if wait >= req.timeouts.queued:  # cluster.status: queued past timeouts.queued → capacity
                t += req.timeouts.queued
                cls, reason = FailureClass.CAPACITY, "queued past timeouts.queued"
            else:
                t += wait
                deadline_left -= wait
                if failed:
                    cls, reason = FailureClass.CAPACITY, "provisioning request failed"
        if cls is None:
            reclaim_at = (
                rng.expovariate(model.spot_rate_per_hour / 3600)
                if model.mode == "spot" and model.spot_rate_per_hour > 0
                else math.inf
            )
            _, _, needed = _progress(committed, schedule, math.inf, model.step_seconds)
            if needed <= min(reclaim_at, deadline_left):
                t += needed
                chip_s += needed
                return RunOutcome(True, t, chip_s, final, lost, reclaims, number, "done")
            held = min(reclaim_at, deadline_left)
            new_committed, done, _ = _progress(committed, schedule, held, model.step_seconds)
            t += held
            chip_s += held
            committed = new_committed
            if reclaim_at >= deadline_left:  # stage.status: running past timeouts.train → permanent
                return RunOutcome(False, t, chip_s, committed, lost, reclaims, number, "deadline exceeded")
            lost += done
            reclaims += 1
            cls, reason = FailureClass.PREEMPTED, "spot VM reclaimed"
        verdict = budgets.classify(record, req, STAGE, number, cls, reason)
        attempt.failure_class, attempt.reason = verdict["tag"], verdict["message"]
        if verdict["tag"] == FailureClass.PERMANENT.value or retries >= retry.max_retries:
            return RunOutcome(False, t, chip_s, committed, lost, reclaims, number, verdict["message"])
        t += backoff_delay(
            retries, retry.backoff.initial_delay, retry.backoff.max_delay, retry.backoff.multiplier
        )
        retries += 1


def simulate(model: Model, runs: int, seed: int) -> ModeResult:
    """``runs`` trainings of one row. Spot rows share their random stream across reclaim rates
    (common random numbers), so rows differ by the rate, not by the draw."""
    req = request_for(model.mode, model.final_step, model.checkpoint_period)
    period = policy_period(req, chosen=model.checkpoint_period is not None)
    final = steps.training_steps(req).final_step
    schedule = steps.checkpoint_schedule(final, period)
    rng = random.Random(f"{seed}:{final}:{model.mode}:{model.step_seconds}")
    result = ModeResult(model, period)
    for _ in range(runs):
        result.runs.append(simulate_run(model, req, schedule, rng))
    return result


# ---- prices and the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PriceRatio:
    value: float | None
    label: str


def price_ratios(
    given: Mapping[str, float], override: Mapping[str, Any] | None
) -> tuple[dict[str, PriceRatio], dict[str, cost.Price]]:
    """Each mode's price as a ratio to on-demand: the user's ``--price-ratio``, else real prices
    (``RLPIPE_PRICES``) when both are set, else the defaults; spot has no default."""
    prices = {m: cost.price(PRESET, m, override) for m in SIMULATED}
    ratios: dict[str, PriceRatio] = {}
    on_demand = prices["on-demand"].per_chip_hour
    for mode in SIMULATED:
        own = prices[mode].per_chip_hour
        if mode in given:
            ratios[mode] = PriceRatio(given[mode], "your assumption, --price-ratio")
        elif own is not None and on_demand:
            ratios[mode] = PriceRatio(own / on_demand, "RLPIPE_PRICES")
        elif mode == "flex-start":
            ratios[mode] = PriceRatio(FLEX_MIN_PRICE_RATIO, "floor: published max discount 53%")
        elif mode in DEFAULT_PRICE_RATIOS:
            ratios[mode] = PriceRatio(DEFAULT_PRICE_RATIOS[mode], "definition")
        else:
            ratios[mode] = PriceRatio(None, "unpublished")
    return ratios, prices


def _f(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) or math.isinf(value) else f"{value:,.{digits}f}"


@dataclass
class Table:
    final_step: int
    rows: list[ModeResult]
    ratios: dict[str, PriceRatio]
    prices: dict[str, cost.Price]
    markdown: str = ""

    @property
    def baseline(self) -> ModeResult:
        return next(r for r in self.rows if r.model.mode == "on-demand")

    def chip_ratio(self, row: ModeResult) -> float:
        return row.chip_hours / self.baseline.chip_hours

    def step_ratio(self, row: ModeResult) -> float:
        return row.chip_hours_per_committed_step / self.baseline.chip_hours_per_committed_step

    def cost_ratio(self, row: ModeResult) -> float | None:
        """Mean cost per run over on-demand's, both measured here (None: the price is unknown)."""
        ratio = self.ratios[row.model.mode].value
        return None if ratio is None else self.chip_ratio(row) * ratio

    def row(self, mode: str, rate: float | None = None) -> ModeResult:
        return next(
            r
            for r in self.rows
            if r.model.mode == mode and (rate is None or r.model.spot_rate_per_hour == rate)
        )


def _interruptions(m: Model) -> str:
    if m.mode == "spot":
        return f"reclaims {m.spot_rate_per_hour:g}/h"
    if m.mode == "flex-start":
        return f"wait ~Exp({m.flex_mean_wait_s / 60:g} min), fail p={m.flex_fail_p:g}"
    return "none"


def _cost_cell(table: Table, row: ModeResult, ratio: float | None) -> str:
    if ratio is None:
        return f"{_f(table.chip_ratio(row))} × r_spot"
    floor = row.model.mode == "flex-start" and table.ratios["flex-start"].label.startswith("floor")
    return f"{'≥ ' if floor else ''}{_f(ratio)}"


def render(table: Table, runs: int, seed: int, step_seconds: float) -> str:
    absolute = any(p.per_chip_hour is not None for p in table.prices.values())
    head = [
        "mode",
        "interruptions (assumed)",
        "ckpt period",
        "runs",
        "success",
        "wall h, succeeded: mean / p90",
        "chip-h / run",
        "chip-h ratio",
        "price ratio",
        "cost ratio",
        "cost / committed step ratio",
        "steps lost / run",
        "steps lost / reclaim",
        "attempts / run",
    ]
    if absolute:
        head.append("$ / run")
    lines = [
        f"**F = {table.final_step} steps** × {step_seconds:g} s, {PRESET} ({CHIPS} chips), "
        f"N = {runs} runs per row, seed {seed}; ratios against the on-demand row of this table.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for row in table.rows:
        m, pr = row.model, table.ratios[row.model.mode]
        cost_ratio = table.cost_ratio(row)
        step_cost = None if cost_ratio is None else table.step_ratio(row) * (pr.value or 0.0)
        price_cell = "n/a (unpublished)" if pr.value is None else f"{pr.value:.3g} ({pr.label})"
        step_cell = (
            f"{_f(table.step_ratio(row))} × r_spot"
            if step_cost is None
            else ("≥ " if m.mode == "flex-start" and pr.label.startswith("floor") else "") + _f(step_cost)
        )
        cells = [
            f"`{m.mode}`",
            _interruptions(m),
            str(row.period),
            str(row.n),
            f"{row.success_rate:.1%}",
            f"{_f(row.wall_hours())} / {_f(row.wall_hours(0.9))}",
            _f(row.chip_hours, 1),
            _f(table.chip_ratio(row), 3),
            price_cell,
            _cost_cell(table, row, cost_ratio),
            step_cell,
            _f(row.steps_lost, 1),
            _f(row.steps_lost_per_reclaim, 1) if m.mode == "spot" else "–",
            _f(row.attempts),
        ]
        if absolute:
            price = table.prices[m.mode]
            cells.append(
                "unset"
                if price.per_chip_hour is None
                else f"{price.cost(row.chip_hours) or 0:,.2f} ({price.source}, read {price.read})"
            )
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(
        "| `reservation` | – | – | – | – | – | – | – | – | n/a: committed capacity | "
        "n/a: committed capacity | – | – | –" + (" | –" if absolute else "") + " |"
    )
    return "\n".join(lines)


def assumptions(
    step_seconds: float,
    spot_rates: Sequence[float],
    flex_mean_wait_min: float,
    flex_fail_p: float,
    ratios: Mapping[str, PriceRatio],
) -> list[str]:
    req = request_for("on-demand", DEFAULT_FINAL_STEPS[0])
    r = req.retry
    preset_retry = presets.preset_defaults(PRESET)["retry"]
    same = preset_retry["budgets"] == r.budgets.model_dump() and preset_retry["max_retries"] == r.max_retries
    spot_price = ratios["spot"]
    return [
        f"Policy (production code): checkpoint period spot = `spot_checkpoint_period(F)` "
        f"(≤ {presets.SPOT_MAX_STEPS_AT_RISK:.0%} of the run at risk), on-demand and flex-start = "
        f"`MAXTEXT_CHECKPOINT_PERIOD` = {presets.MAXTEXT_CHECKPOINT_PERIOD}; commits at "
        "`checkpoint_schedule(F, period)`; a new attempt resumes from the newest committed step; "
        f"`budgets.classify` with the {PRESET} preset's retry (budgets preempted {r.budgets.preempted}, "
        f"capacity {r.budgets.capacity}, at most {r.max_retries} retries per stage"
        f"{'' if same else ' (NOT the preset: check the request defaults)'}), backoff "
        f"{r.backoff.initial_delay:g} s × {r.backoff.multiplier:g}^n ≤ {r.backoff.max_delay:g} s; "
        f"deadlines: train {req.timeouts.train / 3600:g} h from the first launch, queued "
        f"{req.timeouts.queued / 3600:g} h (then `capacity`).",
        f"Timing: startup {STARTUP_S:g} s per attempt and {SAVE_S:g} s per committed save "
        f"(the simulator's `Timing` defaults), {step_seconds:g} s per step. Chip-hours = {CHIPS} chips × "
        "the time the slice is held (startup + steps + saves, up to a reclaim); waiting in a queue and "
        "backoff cost none. A failed run counts the chip-hours it burned; its committed steps count "
        "(`rlpipe retry` resumes from them). A reclaim is seen and the slice released at once.",
        '`on-demand`: never reclaimed ("On-demand resources aren\'t preempted"), no queue wait.',
        f"`spot` (ASSUMED rates: Google publishes no TPU reclaim rate): reclaims are Poisson at "
        f"{', '.join(f'{x:g}' for x in spot_rates)} per hour held; no wait to get a spot slice back; each "
        "reclaim loses the steps done since the last commit (a save in flight is lost too) and costs a "
        "new startup, and is `preempted` for the budget.",
        f"`flex-start` (ASSUMED: Google publishes no wait distribution): before each attempt a wait "
        f"~ Exponential(mean {flex_mean_wait_min:g} min), then with p = {flex_fail_p:g} a provisioning "
        "failure (`capacity`, new attempt); never reclaimed once running (flex-start VMs run up to 7 days).",
        "Prices: no official v6e price was found (`prices.json`: all null), so costs are ratios to "
        "on-demand: cost ratio = chip-hour ratio × price ratio. flex-start's price ratio "
        f"{FLEX_MIN_PRICE_RATIO:g} is 1 − the published maximum discount (53%), so its cost figures are "
        "lower bounds (≥). "
        + (
            "spot has no published price: its cost ratio is the chip-hour ratio × r_spot, the spot/on-demand "
            "price ratio (pass `--price-ratio spot=R` for a number)."
            if spot_price.value is None
            else f"spot's price ratio {spot_price.value:g} is from {spot_price.label}, not from Google."
        ),
        "`reservation` is billed by its commitment whether or not a run uses it: not a per-run cost.",
    ]


def run(
    *,
    runs: int = 2000,
    seed: int = 1,
    final_steps: Sequence[int] = DEFAULT_FINAL_STEPS,
    step_seconds: float = 60.0,
    spot_rates: Sequence[float] = DEFAULT_SPOT_RATES,
    flex_mean_wait_min: float = 30.0,
    flex_fail_p: float = 0.1,
    price_ratio: Mapping[str, float] | None = None,
    spot_checkpoint_period_override: int | None = None,
    prices_override: Mapping[str, Any] | None = None,
) -> tuple[list[Table], str]:
    """Every table (one per final step) and the markdown of all of them with the assumptions."""
    if prices_override is None:
        prices_override = cost.parse_override(os.environ.get("RLPIPE_PRICES", ""))
    ratios, prices = price_ratios(price_ratio or {}, prices_override)
    tables: list[Table] = []
    for final in final_steps:
        models = [Model("on-demand", final, step_seconds)]
        models += [
            Model(
                "spot",
                final,
                step_seconds,
                spot_rate_per_hour=rate,
                checkpoint_period=spot_checkpoint_period_override,
            )
            for rate in spot_rates
        ]
        models.append(
            Model(
                "flex-start",
                final,
                step_seconds,
                flex_mean_wait_s=flex_mean_wait_min * 60,
                flex_fail_p=flex_fail_p,
            )
        )
        table = Table(final, [simulate(m, runs, seed) for m in models], ratios, prices)
        table.markdown = render(table, runs, seed, step_seconds)
        tables.append(table)
    notes = assumptions(step_seconds, spot_rates, flex_mean_wait_min, flex_fail_p, ratios)
    text = "\n\n".join(t.markdown for t in tables)
    text += "\n\nAssumptions:\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return tables, text


def _ratio_arg(text: str) -> tuple[str, float]:
    mode, sep, value = text.partition("=")
    priced = [m for m in SIMULATED if m != "on-demand"]  # on-demand is the unit
    if not sep or mode not in priced:
        raise argparse.ArgumentTypeError(f"{text!r}: write MODE=R with MODE one of {', '.join(priced)}")
    try:
        number = float(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from e
    if number < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a price ratio is >= 0")
    return mode, number


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m bench.cost_modes", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="trainings simulated per row")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--final-step",
        type=_ints,
        default=list(DEFAULT_FINAL_STEPS),
        help="F, comma-separated for one table each (default 500,50; 50 is the tutorials')",
    )
    parser.add_argument("--step-seconds", type=float, default=60.0)
    parser.add_argument("--spot-rates", type=_floats, default=list(DEFAULT_SPOT_RATES), help="reclaims/hour")
    parser.add_argument("--flex-mean-wait-min", type=float, default=30.0)
    parser.add_argument("--flex-fail-p", type=float, default=0.1)
    parser.add_argument(
        "--spot-checkpoint-period",
        type=int,
        default=None,
        help="set training.checkpoint_period on the spot requests (default: the policy's)",
    )
    parser.add_argument(
        "--price-ratio",
        type=_ratio_arg,
        action="append",
        default=[],
        metavar="MODE=R",
        help="a mode's price over on-demand's (your assumption), e.g. spot=0.4",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    _, text = run(
        runs=args.runs,
        seed=args.seed,
        final_steps=args.final_step,
        step_seconds=args.step_seconds,
        spot_rates=args.spot_rates,
        flex_mean_wait_min=args.flex_mean_wait_min,
        flex_fail_p=args.flex_fail_p,
        price_ratio=dict(args.price_ratio),
        spot_checkpoint_period_override=args.spot_checkpoint_period,
    )
    print(text)
    print(f"<sub>{time.monotonic() - started:.1f} s</sub>")
    return text


if __name__ == "__main__":
    main()
