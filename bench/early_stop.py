"""12. Early stopping for sweeps: chip-hours, winner and wall time against stopping nobody.

Run on its own: ``.venv/bin/python -m bench.early_stop [--early-sweeps 200] [--early-seed 1]
[--early-final-steps 50 200] [--early-max-parallel 4] [--early-poll-seconds 300]``.

Simulated, in process, no servers: many seeded sweeps of a 4×4 grid (learning_rate ×
rl.grpo_beta) whose children print the played train_rl's evaluations
(``rlpipe.local.simulator.reward_curve.curve``, the same function the simulator's train_rl
prints from). What decides is production's code, imported, never re-implemented:

* the rungs: ``core.request.stop_schedule.rungs_of`` on a validated request with
  ``training.num_batches`` = the final step (eval_interval is the request's default, 10);
* the verdict: ``core.early_stop.decide`` on the sweep's tables as the control plane holds them,
  asked about one child whenever that child's status read records a new evaluation.

The time model (an event queue by time, children in slots advancing concurrently):

* a child holds a v6e-32 slice (32 chips) from its launch: ``startup`` seconds, then one step
  every ``step`` seconds; its evaluation at step s exists from ``launch + startup + s·step``;
* the control plane reads a child's status every ``poll`` seconds from its launch (the
  pipeline's poll, ``workflows/pipeline.yaml``: 300 s); a read records every evaluation printed
  since the last one and, if there is a new one, asks the rule about that child;
* a stopped child's workloads are deleted at that read: its chip-hours end there, its slot is free,
  and the next queued child (grid order, last key fastest) is launched at once. A child that
  finished holds its chips until its last step; its slot is freed at the read that sees it done;
* the selection happens when the last child has ended (the makespan); the winner is the child
  with the best post evaluation (the curve at the final step) among those not stopped.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.common import Section, quantile, say, table
from rlpipe.core.early_stop import decide
from rlpipe.core.request import validate_request
from rlpipe.core.request.stop_schedule import rungs_of
from rlpipe.core.request.sweep import EarlyStop, SelectRule
from rlpipe.local.simulator.reward_curve import DEFAULT_KL_WEIGHT, REFERENCE_LEARNING_RATE, Curve, curve
from rlpipe.local.simulator.timing import Timing

CHIPS = 32  # v6e-32: a 4x8 slice
SELECT = SelectRule(metric="post_mean_reward", direction="max")
GRID_SIDE = 4  # values per key: a 4×4 grid
SPAN_DECADES = 1.0  # each key spans a factor of 10 each side of its reference
FIXED_DECADES = (-1.0, -1 / 3, 1 / 3, 1.0)  # the fixed grid: log-evenly from 10× below to 10× above
RULES: tuple[tuple[str, EarlyStop], ...] = (
    ("median", EarlyStop(rule="median")),
    ("asha, eta 3", EarlyStop(rule="asha", eta=3)),
    ("asha, eta 2", EarlyStop(rule="asha", eta=2)),
    # A grace period: the first rung at step 30 instead of the first evaluation (Ray's grace_period).
    ("asha, eta 3, min_step 30", EarlyStop(rule="asha", eta=3, min_step=30)),
)


@dataclass(frozen=True)
class Setup:
    """One sweep's schedule: the steps and the seconds (simulated)."""

    final_step: int
    step_seconds: float = 60.0
    startup_seconds: float = Timing().train_startup  # Pathways connect, load, compile, pre-RL eval
    poll_seconds: float = 300.0
    max_parallel: int = 4


@dataclass
class Child:
    """What happened to one child in one simulated sweep (times in seconds from the sweep's start)."""

    index: int
    launched: float = -1.0
    released: float = -1.0  # when its chips were freed (its last step, or the read that stopped it)
    seen_ended: float = -1.0  # the read that saw it end: its slot is free from here
    stopped_at: int | None = None  # the evaluation step a rule stopped it at
    final: float = 0.0  # its post evaluation (stopped children's is not a candidate)


@dataclass
class Sweep:
    """One simulated sweep under one rule."""

    children: list[Child]
    chip_hours: float
    makespan: float
    winner: int | None

    @property
    def stopped(self) -> int:
        return sum(1 for c in self.children if c.stopped_at is not None)


def grid(rng: random.Random | None) -> list[tuple[float, float]]:
    """The sweep's 16 points, learning rate first and KL weight fastest (the grid's order).

    ``rng`` None: the fixed grid (``FIXED_DECADES``). Otherwise each key's four values are drawn
    one per quarter of the span, log-uniformly (a stratified draw), so sweeps differ in where
    their points fall and not only in noise, as different people's grids would."""
    if rng is None:
        xs, bs = list(FIXED_DECADES), list(FIXED_DECADES)
    else:
        width = 2 * SPAN_DECADES / GRID_SIDE
        xs = [-SPAN_DECADES + (i + rng.random()) * width for i in range(GRID_SIDE)]
        bs = [-SPAN_DECADES + (i + rng.random()) * width for i in range(GRID_SIDE)]
    return [(REFERENCE_LEARNING_RATE * 10**x, DEFAULT_KL_WEIGHT * 10**b) for x in xs for b in bs]


def rungs_for(stop: EarlyStop, final_step: int) -> tuple[int, ...]:
    """The steps production judges at, for a request whose final step is ``final_step``."""
    request = validate_request(
        {
            "model": "gemma4-26b",
            "hf_repo": "google/gemma-4-26b-a4b-it",
            "training": {"num_batches": final_step},
        }
    )
    return rungs_of(stop, request)


def simulate(curves: Sequence[Curve], setup: Setup, stop: EarlyStop, rungs: Sequence[int]) -> Sweep:
    """One sweep under ``stop``: an event queue of status reads, ``max_parallel`` slots."""
    final, interval = setup.final_step, 10
    eval_steps = [s for s in range(interval, final + 1, interval)]
    children = [Child(i, final=c.value(final)) for i, c in enumerate(curves)]
    tables: dict[int, dict[int, float]] = {}
    queue = list(range(len(curves)))[::-1]  # pop() gives grid order
    reads: list[tuple[float, int]] = []

    def launch(at: float) -> None:
        if queue:
            child = children[queue.pop()]
            child.launched = at
            heapq.heappush(reads, (at + setup.poll_seconds, child.index))

    for _ in range(setup.max_parallel):
        launch(0.0)
    while reads:
        now, index = heapq.heappop(reads)
        child = children[index]
        printed = now - child.launched - setup.startup_seconds  # seconds of stepping so far
        own = tables.setdefault(index, {})
        new = [s for s in eval_steps if s * setup.step_seconds <= printed and s not in own]
        for s in new:
            own[s] = curves[index].value(s)
        end = child.launched + setup.startup_seconds + final * setup.step_seconds
        if end <= now:  # done: its last step freed the chips; this read frees the slot
            child.released, child.seen_ended = end, now
            launch(now)
            continue
        if new:
            verdict = decide(stop, tables, index, f"child-{index}", SELECT, rungs, new_steps=set(new))
            if verdict is not None and verdict.stop:
                child.stopped_at = verdict.step
                child.released = child.seen_ended = now
                launch(now)
                continue
        heapq.heappush(reads, (now + setup.poll_seconds, index))
    candidates = [c for c in children if c.stopped_at is None]
    winner = max(candidates, key=lambda c: (c.final, -c.index)).index if candidates else None
    chip_seconds = sum(c.released - c.launched for c in children) * CHIPS
    return Sweep(children, chip_seconds / 3600, max(c.seen_ended for c in children), winner)


@dataclass
class Row:
    """One rule on one schedule and grid, against ``none`` on the same sweeps."""

    final_step: int
    grid: str
    rule: str
    ratios: list[float] = field(default_factory=list)  # chip-hours / none's, per sweep
    same: list[bool] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)  # makespan / none's
    stopped: list[int] = field(default_factory=list)
    regret: list[float] = field(default_factory=list)  # none's winner's post value − this rule's
    late_winner: list[bool] = field(default_factory=list)  # none's winner was below the median at step 10

    def summary(self) -> dict[str, float]:
        return {
            "chip_ratio_mean": statistics.fmean(self.ratios),
            "chip_ratio_p10": quantile(self.ratios, 0.1),
            "chip_ratio_p90": quantile(self.ratios, 0.9),
            "same_winner": sum(self.same) / len(self.same),
            "wall_ratio_mean": statistics.fmean(self.walls),
            "stopped_mean": statistics.fmean(self.stopped),
            "regret_mean": statistics.fmean(self.regret),
            "regret_max": max(self.regret),
            "same_winner_when_late": (
                sum(s for s, late in zip(self.same, self.late_winner, strict=True) if late)
                / max(1, sum(self.late_winner))
            ),
            "late_winners": float(sum(self.late_winner)),
        }


def _late(curves: Sequence[Curve], winner: int, first: int) -> bool:
    values = [c.value(first) for c in curves]
    return values[winner] < statistics.median(values)


def run_rows(
    sweeps: int, seed: int, final_steps: Sequence[int], setup: Setup
) -> tuple[list[Row], dict[str, Any]]:
    """Every rule on every sweep, with ``none`` on the same sweeps as the baseline."""
    rows: list[Row] = []
    baseline: dict[str, Any] = {}
    for final in final_steps:
        s = Setup(final, setup.step_seconds, setup.startup_seconds, setup.poll_seconds, setup.max_parallel)
        rungs = {label: rungs_for(stop, final) for label, stop in RULES}
        for grid_name in ("jittered", "fixed"):
            made = [Row(final, grid_name, label) for label, _ in RULES]
            none_hours, none_walls = [], []
            for k in range(sweeps):
                sweep_seed = seed * 1_000_003 + k  # the sweep's data_shuffle_seed, the same for its children
                points = grid(random.Random(sweep_seed) if grid_name == "jittered" else None)
                curves = [curve(lr, beta, sweep_seed) for lr, beta in points]
                none = simulate(curves, s, EarlyStop(rule="none"), ())
                assert none.winner is not None and none.stopped == 0
                none_hours.append(none.chip_hours)
                none_walls.append(none.makespan)
                late = _late(curves, none.winner, 10)
                for row, (label, stop) in zip(made, RULES, strict=True):
                    got = simulate(curves, s, stop, rungs[label])
                    row.ratios.append(got.chip_hours / none.chip_hours)
                    row.walls.append(got.makespan / none.makespan)
                    row.same.append(got.winner == none.winner)
                    row.stopped.append(got.stopped)
                    won = got.children[got.winner].final if got.winner is not None else 0.0
                    row.regret.append(none.children[none.winner].final - won)
                    row.late_winner.append(late)
            baseline[f"{final}/{grid_name}"] = {
                "chip_hours_mean": statistics.fmean(none_hours),
                "makespan_h_mean": statistics.fmean(none_walls) / 3600,
                "rungs": {label: list(r) for label, r in rungs.items()},
            }
            rows += made
            say(f"early stopping: final step {final}, {grid_name} grid, {sweeps} sweeps done")
    return rows, baseline


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.early_stop", description=__doc__)
    p.add_argument("--early-sweeps", type=int, default=200, help="simulated sweeps per grid and final step")
    p.add_argument("--early-seed", type=int, default=1, help="the simulation's seed")
    p.add_argument(
        "--early-final-steps", type=int, nargs="+", default=[50, 200], help="final steps (evals every 10)"
    )
    p.add_argument("--early-max-parallel", type=int, default=4, help="children holding a slice at once")
    p.add_argument("--early-step-seconds", type=float, default=60.0, help="seconds per GRPO step")
    p.add_argument("--early-poll-seconds", type=float, default=300.0, help="the status poll interval")
    return p


def run(args: argparse.Namespace) -> Section:
    started = time.monotonic()
    setup = Setup(
        0, args.early_step_seconds, poll_seconds=args.early_poll_seconds, max_parallel=args.early_max_parallel
    )
    rows, baseline = run_rows(args.early_sweeps, args.early_seed, args.early_final_steps, setup)
    summaries = [(r, r.summary()) for r in rows]
    body_rows = [
        [
            f"{r.final_step}",
            r.grid,
            r.rule,
            ", ".join(map(str, baseline[f"{r.final_step}/{r.grid}"]["rungs"][r.rule][:6]))
            + ("…" if len(baseline[f"{r.final_step}/{r.grid}"]["rungs"][r.rule]) > 6 else ""),
            f"×{m['chip_ratio_mean']:.2f} ({m['chip_ratio_p10']:.2f} – {m['chip_ratio_p90']:.2f})",
            f"{m['same_winner']:.0%}",
            f"{m['same_winner_when_late']:.0%} of {m['late_winners']:.0f}"
            if m["late_winners"]
            else "none was",
            f"{m['regret_mean']:.4f} / {m['regret_max']:.4f}",
            f"×{m['wall_ratio_mean']:.2f}",
            f"{m['stopped_mean']:.1f} of 16",
        ]
        for r, m in summaries
    ]
    base_rows = [
        [
            key.split("/")[0],
            key.split("/")[1],
            f"{b['chip_hours_mean']:,.0f}",
            f"{b['makespan_h_mean']:.1f} h",
        ]
        for key, b in baseline.items()
    ]
    n = args.early_sweeps
    text = "\n".join(
        [
            f"{n} seeded sweeps per final step and grid (seed {args.early_seed}), 4×4 grid of learning_rate × "
            f"rl.grpo_beta spanning 10× each side of 2e-5 and 0.08, evaluations every 10 steps, "
            f"`max_parallel` {args.early_max_parallel}, v6e-32 (32 chips), {args.early_step_seconds:g} s per step, "
            f"{setup.startup_seconds:g} s startup, status reads every {args.early_poll_seconds:g} s. "
            "`jittered`: each sweep draws its grid (one value per quarter of each key's span); "
            "`fixed`: the same 16 points every sweep (only the noise differs). "
            "Every ratio is to `none` on the same sweeps.",
            "",
            table(
                [
                    "final step",
                    "grid",
                    "rule",
                    "judged at",
                    "chip-hours vs none (mean, p10 – p90)",
                    "same winner",
                    "same winner when none's winner was below the median at step 10",
                    "post reward lost (mean / max)",
                    "wall time to selection vs none",
                    "children stopped",
                ],
                body_rows,
            ),
            "",
            "Baseline `none` (every child to its final step), same sweeps:",
            "",
            table(
                ["final step", "grid", "chip-hours per sweep (mean)", "wall time to selection (mean)"],
                base_rows,
            ),
            "",
            "The issue's goal is at most ×0.5 the chip-hours with the same winner in at least 90% of sweeps; "
            "where a row falls short, the columns say why (see README.md §12).",
        ]
    )
    headline = []
    for final in args.early_final_steps:
        parts = [
            f"{r.rule} ×{m['chip_ratio_mean']:.2f}, {m['same_winner']:.0%} same winner"
            for r, m in summaries
            if r.final_step == final and r.grid == "jittered"
        ]
        headline.append(
            (
                f"early stopping, {final}-step 4×4 sweeps (simulated, {n} sweeps): chip-hours, same winner",
                "; ".join(parts),
                "none: ×1, 100%",
            )
        )
    data = {
        "baseline": baseline,
        "rows": [{"final_step": r.final_step, "grid": r.grid, "rule": r.rule, **m} for r, m in summaries],
    }
    return Section("early", "12. Early stopping for sweeps (simulated, not measured)", text, headline, data,
                   seconds=time.monotonic() - started)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> str:
    section = run(parser().parse_args(argv))
    print(section.body)
    return section.body


if __name__ == "__main__":
    main()
