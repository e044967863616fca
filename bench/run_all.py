"""`make bench`: run every benchmark and write bench/RESULTS.md (how to read it: bench/README.md).

Each benchmark runs in its own interpreter (``--section``), so one that crashes or leaves state
behind (environment variables, logging handlers, threads) cannot skew the next; the parent
collects their results as JSON and writes one report. Figures are never asserted; the exit code is
1 only when a correctness check inside a benchmark failed (e.g. a burst made two runs, a soak run
ended in the wrong state), so a broken pipeline cannot produce a green benchmark.

    .venv/bin/python -m bench.run_all                     # all twelve, ~8 minutes on 2 cores
    .venv/bin/python -m bench.run_all --only soak --seed 1234
    .venv/bin/python -m bench.run_all --quick             # smaller repetitions, for a quick look
    .venv/bin/python -m bench.run_all --smoke --out /tmp/R.md  # every section at its smallest: correctness only

``--smoke`` is what the suite runs (tests/repo/test_bench_smoke.py), so a change that breaks a
benchmark fails ``make test``; its figures mean nothing and RESULTS.md is not where it writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import CACHE, PYTHON, ROOT, Section, dump_json, loadavg, machine, say, table

SECTIONS = {
    "tpu": "bench.tpu_hours",
    "cold": "bench.cold_start",
    "fastpath": "bench.fastpath",
    "latency": "bench.latency",
    "intake": "bench.intake_burst",
    "soak": "bench.soak",
    "list": "bench.list_runs",
    "report": "bench.report",
    "publish": "bench.publish",
    "cost": "bench.cost_modes",
    "team": "bench.team_limits",
    "early": "bench.early_stop",
}
ORDER = (
    "tpu",
    "cold",
    "fastpath",
    "latency",
    "intake",
    "soak",
    "list",
    "report",
    "publish",
    "cost",
    "team",
    "early",
)
TITLES = {
    "tpu": "1. TPU chips held outside training",
    "cold": "2. Function cold start",
    "fastpath": "3. `artifact_event` fast path",
    "latency": "4. Control-plane latency (local stack, zero-duration stages)",
    "intake": "5. Intake under a duplicate burst",
    "soak": "6. Soak: concurrent runs with random faults",
    "list": "7. `rlpipe list` over a bucket of checkpoints",
    "report": "8. `rlpipe report` render time",
    "publish": "9. Publishing to the Hub: memory and disk against export size",
    "cost": "10. Cost by provisioning mode (simulated, not measured)",
    "team": "11. A team's limits at plan",
    "early": "12. Early stopping for sweeps (simulated, not measured)",
}
QUICK = {
    "cold_reps": 5,
    "cold_entry_reps": 3,
    "latency_runs": 10,
    "burst_sizes": [10, 100],
    "soak_runs": 8,
    "fastpath_events": 1000,
    "fastpath_seconds": 0.2,
    "reps": 3,
    "publish_shard_mib": [8, 32],
    "cost_runs": 500,
    "early_sweeps": 40,
}


# Every section at its smallest, for correctness only (the suite's bench test): one of each thing.
SMOKE = {
    "cold_reps": 1,
    "cold_entry_reps": 1,
    "latency_runs": 1,
    "latency_warmup": 0,
    "drop_concurrency": 1,
    "burst_sizes": [5],
    "soak_timing": "fast",
    "fastpath_events": 50,
    "fastpath_seconds": 0.05,
    "reps": 1,
    "points": 20,
    "attempts": 5,
    "list_objects": 200,
    "publish_shard_mib": [1],
    "publish_shards": 2,
    "publish_budget_shards": 0,
    "cost_runs": 50,
    "team_ledgers": 200,
    "team_reps": 1,
    "early_sweeps": 4,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.run_all",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", nargs="+", choices=ORDER, help="run only these benchmarks")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS.md")
    p.add_argument("--quick", action="store_true", help="smaller repetitions (stated in RESULTS.md)")
    p.add_argument("--smoke", action="store_true", help="every section at its smallest: correctness only")
    g = p.add_argument_group("1. TPU chip-hours (durations are the user's, not measured)")
    g.add_argument("--convert-hours", type=float, default=1.0, help="how long conversion runs (default 1)")
    g.add_argument("--export-hours", type=float, default=0.5, help="how long export runs (default 0.5)")
    g = p.add_argument_group("2. cold start")
    g.add_argument("--cold-reps", type=int, default=10, help="fresh interpreters per `import main` row")
    g.add_argument("--cold-entry-reps", type=int, default=5, help="fresh interpreters per first-call row")
    g = p.add_argument_group("3. artifact_event fast path")
    g.add_argument("--fastpath-events", type=int, default=3000, help="names posted through the real function")
    g.add_argument("--fastpath-seconds", type=float, default=0.5, help="minimum seconds per measured round")
    g = p.add_argument_group("4. latency and 6. soak (local stack)")
    g.add_argument("--poll-seconds", type=int, default=2, help="the workflow's poll interval on the stack")
    g.add_argument(
        "--latency-runs", type=int, default=30, help="runs per variant (events on, events dropped)"
    )
    g.add_argument("--latency-warmup", type=int, default=2)
    g.add_argument("--drop-concurrency", type=int, default=3, help="dropped-event runs at a time")
    g = p.add_argument_group("5. intake burst")
    g.add_argument("--burst-sizes", type=int, nargs="+", default=[10, 100, 1000])
    g = p.add_argument_group("6. soak")
    g.add_argument("--soak-runs", type=int, default=20)
    g.add_argument("--soak-timing", choices=("demo", "fast"), default="demo")
    g.add_argument("--soak-timeout", type=float, default=300.0)
    g.add_argument("--seed", type=int, default=None, help="soak scenario seed (default: random, printed)")
    g = p.add_argument_group("7. rlpipe list")
    g.add_argument("--list-runs", type=int, default=3, help="runs in the bucket")
    g.add_argument("--list-objects", type=int, default=10_000, help="checkpoint objects added to one run")
    g = p.add_argument_group("8. rlpipe report (`python -m bench.report --help`)")
    g.add_argument("--report-points", dest="points", type=int, default=1000, help="intermediate evaluations")
    g.add_argument(
        "--report-attempts", dest="attempts", type=int, default=30, help="attempts over the stages"
    )
    g.add_argument("--report-reps", dest="reps", type=int, default=5, help="timed renders (median reported)")
    g = p.add_argument_group("9. publishing to the Hub (`python -m bench.publish --help`)")
    g.add_argument("--publish-shard-mib", type=int, nargs="+", default=[8, 32, 128], help="shard sizes")
    g.add_argument("--publish-shards", type=int, default=3, help="shards per export")
    g.add_argument(
        "--publish-budget-shards",
        type=int,
        default=2,
        help="the middle size again with this many shards in flight at most (0: skip)",
    )
    g = p.add_argument_group(
        "10. cost by provisioning mode (its other knobs: `python -m bench.cost_modes --help`)"
    )
    g.add_argument("--cost-runs", type=int, default=2000, help="trainings simulated per row")
    g.add_argument("--cost-seed", type=int, default=1, help="the simulation's seed")
    g = p.add_argument_group(
        "12. early stopping for sweeps (its other knobs: `python -m bench.early_stop --help`)"
    )
    g.add_argument("--early-sweeps", type=int, default=200, help="simulated sweeps per final step and grid")
    g.add_argument("--early-seed", type=int, default=1, help="the simulation's seed")
    p.add_argument("--section", choices=ORDER, help=argparse.SUPPRESS)  # internal: run one, in this process
    p.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    return p


def _run_section(key: str, args: argparse.Namespace) -> Section:
    import importlib

    module = importlib.import_module(SECTIONS[key])
    if key == "cost":  # a simulation with keyword arguments: runs and seed from here, the rest its defaults
        started = time.monotonic()
        tables, text = module.run(runs=args.cost_runs, seed=args.cost_seed)
        return Section(key, TITLES[key], text, _cost_headline(tables), seconds=time.monotonic() - started)
    # The newer sections have parsers of their own: their defaults, where run_all has no option.
    if hasattr(module, "parser"):
        for name, value in vars(module.parser().parse_args([])).items():
            if not hasattr(args, name):
                setattr(args, name, value)
    return module.run(args)


def _cost_headline(tables: list[Any]) -> list[tuple[str, str, str]]:
    """Per final step: flex-start's cost and the highest spot rate's chip-hours, against on-demand."""
    rows = []
    for t in tables:
        flex = t.row("flex-start")
        cost = t.cost_ratio(flex)
        floor = "≥ " if t.ratios["flex-start"].label.startswith("floor") else ""
        spot = max((r for r in t.rows if r.model.mode == "spot"), key=lambda r: r.model.spot_rate_per_hour)
        rows.append(
            (
                f"cost, {t.final_step}-step training on v6e-32 (simulated, {flex.n:,} runs per mode)",
                ("flex-start cost: price unknown" if cost is None else f"flex-start cost {floor}×{cost:.2f}")
                + f"; spot at {spot.model.spot_rate_per_hour:g} reclaims/h: ×{t.chip_ratio(spot):.2f} "
                f"chip-hours, {spot.success_rate:.0%} succeed",
                f"on-demand: ×1, {t.baseline.success_rate:.0%} succeed",
            )
        )
    return rows


def _child(key: str, argv: list[str]) -> Section:
    """One benchmark in a fresh interpreter; a crash becomes a failed section, not a lost report."""
    out = CACHE / f"section-{key}.json"
    out.unlink(missing_ok=True)
    started = time.monotonic()
    say(f"=== {TITLES[key]}")
    done = subprocess.run(
        [PYTHON, "-m", "bench.run_all", *argv, "--section", key, "--json-out", str(out)],
        cwd=ROOT,
        check=False,
    )
    if done.returncode == 0 and out.exists():
        raw = json.loads(out.read_text())
        raw["headline"] = [tuple(h) for h in raw["headline"]]
        return Section(**raw)
    return Section(
        key,
        TITLES[key],
        f"**The benchmark crashed** (exit {done.returncode}); see the output of `make bench` above.",
        seconds=time.monotonic() - started,
        ok=False,
    )


def _settings(args: argparse.Namespace) -> str:
    return (
        f"`--convert-hours {args.convert_hours:g} --export-hours {args.export_hours:g} --cold-reps {args.cold_reps} "
        f"--cold-entry-reps {args.cold_entry_reps} --fastpath-events {args.fastpath_events} --poll-seconds "
        f"{args.poll_seconds} --latency-runs {args.latency_runs} --drop-concurrency {args.drop_concurrency} "
        f"--burst-sizes {' '.join(str(n) for n in args.burst_sizes)} --soak-runs {args.soak_runs} "
        f"--soak-timing {args.soak_timing} --list-objects {args.list_objects} --report-points {args.points} "
        f"--report-attempts {args.attempts} --report-reps {args.reps} --publish-shard-mib "
        f"{' '.join(str(n) for n in args.publish_shard_mib)} --publish-shards {args.publish_shards} "
        f"--publish-budget-shards {args.publish_budget_shards} --cost-runs {args.cost_runs} "
        f"--cost-seed {args.cost_seed} --early-sweeps {args.early_sweeps} --early-seed {args.early_seed}`"
    )


# A 1-minute load average above this when the run starts means other work shares the machine.
BUSY_LOAD = 1.5


def _busy_note(info: dict[str, object]) -> list[str]:
    """A note in RESULTS.md when the machine was already busy as the run started."""
    load = float(str(info["loadavg"]).split()[0])
    if load <= BUSY_LOAD:
        return []
    return [
        f"**Other work was running on the machine when this run started** (1-minute load {load:g} on "
        f"{info['nproc']} CPUs, above {BUSY_LOAD:g}): absolute times are inflated and noisier than on an "
        "idle machine; the ratios to baselines measured in the same run suffer less.",
        "",
    ]


def report(sections: list[Section], args: argparse.Namespace, info: dict[str, object], elapsed: float) -> str:
    lines = [
        "# rlpipe benchmarks: results",
        "",
        f"Written by `make bench` (`python -m bench.run_all`) on **{info['date']}**, in {elapsed / 60:.1f} min. "
        "How each benchmark works and how to read it: [README.md](README.md). Every figure is next to a "
        "baseline measured in the same run (or computed, and then the section says how); figures from "
        "different runs or machines are not comparable.",
        "",
        table(
            ["machine", ""],
            [
                ["CPUs (`nproc`)", info["nproc"]],
                ["memory", f"{info['memory_gib']} GiB"],
                ["CPU model (/proc/cpuinfo)", info["cpu_model"]],
                ["Python", info["python"]],
                ["kernel", info["kernel"]],
                ["load average (1, 5, 15 min) at start → end", f"{info['loadavg']} → {loadavg()}"],
                ["rlpipe commit", info["git"]],
            ],
        ),
        "",
        *_busy_note(info),
        "Settings: "
        + _settings(args)
        + (" (**`--quick`: reduced repetitions**)" if args.quick else "")
        + (" (**`--smoke`: correctness only; the figures mean nothing**)" if args.smoke else "")
        + ".",
        "",
        "## Headline figures",
        "",
        table(["figure", "value", "baseline, same run"], [list(h) for s in sections for h in s.headline]),
        "",
        "Correctness checks inside the benchmarks: "
        + ", ".join(f"{s.title.split(' ', 1)[0]} {'passed' if s.ok else '**FAILED**'}" for s in sections)
        + ".",
        "",
    ]
    for s in sections:
        lines += [f"## {s.title}", "", s.body, "", f"<sub>{s.seconds:.0f} s</sub>", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.quick or args.smoke:
        for key, value in (SMOKE if args.smoke else QUICK).items():
            setattr(args, key, value)
        from bench.soak import soak_kinds

        args.soak_runs = len(soak_kinds()) if args.smoke else max(args.soak_runs, len(soak_kinds()))
    if args.section:  # child mode
        section = _run_section(args.section, args)
        dump_json(args.json_out, dataclasses.asdict(section))
        return 0
    CACHE.mkdir(parents=True, exist_ok=True)
    info = machine()
    say(
        f"machine: {info['nproc']} CPUs, {info['memory_gib']} GiB, {info['cpu_model']}, Python {info['python']}, "
        f"load {info['loadavg']}"
    )
    child_argv = [a for a in argv if a not in ("--quick", "--smoke")]
    if args.quick:
        child_argv += ["--quick"]
    if args.smoke:
        child_argv += ["--smoke"]
    started = time.monotonic()
    keys = [k for k in ORDER if not args.only or k in args.only]
    sections = [_child(key, child_argv) for key in keys]
    elapsed = time.monotonic() - started
    text = report(sections, args, info, elapsed)
    args.out.write_text(text)
    if not args.smoke:  # a smoke run's figures are not results
        dump_json(
            CACHE / "results.json",
            {"machine": info, "seconds": elapsed, "sections": [dataclasses.asdict(s) for s in sections]},
        )
    say(f"wrote {args.out} ({elapsed / 60:.1f} min)")
    for s in sections:
        for figure, value, base in s.headline:
            print(f"{figure}: {value}  [{base}]")
    failed = [s.title for s in sections if not s.ok]
    if failed:
        say(f"correctness checks failed in: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
