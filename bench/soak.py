"""6. Soak: concurrent runs on one local stack, each with its own random fault.

``--soak-runs`` runs (default 20) are submitted at once to a stack with ``timing="demo"``. Each run
draws a scenario from the simulator's fault kinds (``FAULT_KINDS``) with a seeded generator (the
seed is printed and written to RESULTS.md; ``--seed`` replays it). The kinds are dealt like cards
(every kind the same number of times, ± 1, in a shuffled order) so a 20-run soak covers all of
them; a kind the soak cannot deal is in ``EXCLUDED`` with the reason (``tests/repo/test_bench_soak.py``
holds every kind to one or the other). Each fault is scoped to its run with the scenario entry's
``run`` field, matched against the workload's ``rlpipe.dev/run`` label, so concurrent runs never
see each other's faults (except ``api-5xx``, which by nature fails the next n requests to the API
server, whoever sends them).

``EXPECTED`` below is the contract: scenario → the terminal state it implies, and the attempts.
At the end every run must be in that state, no workload may be left in the cluster, and every
ledger must validate (``RunRecord.model_validate`` on the raw ``run.json``, plus a readable history
with exactly one ``accepted``). The stack's memory (summed RSS of all its processes, from /proc)
is sampled every 0.5 s; its peak is reported against the idle stack measured just before.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import BenchStack, RssSampler, Section, mib, say, secs, table

STAGES = ("convert", "train", "export")


@dataclass(frozen=True)
class Scenario:
    """One run's fault(s) and what must come of them."""

    kind: str
    label: str
    faults: list[dict[str, Any]]  # scenario entries without "run" (added per run)
    state: str  # the terminal state it implies
    attempts: dict[str, int]  # stage → attempts expected (stages not listed: 1 if reached)
    failed_stage: str | None = None
    failure_classes: dict[str, list[str | None]] | None = None  # stage → failure class per attempt
    cancel_when_running: str | None = None  # stall: cancel once this stage runs
    no_callback_for: str | None = None  # drop-events: this stage must never have been woken by an event
    request: dict[str, Any] = field(default_factory=dict)  # request fields the scenario needs


# The explicit mapping scenario → expected outcome (README and RESULTS.md print it).
EXPECTED_TEXT = [
    ("`train:1:preempt@<step>`", "succeeded; train has 2 attempts: `preempted`, then success (resumes)"),
    (
        "`<stage>:1:unschedulable:<s>` (short: 300–1200 simulated s)",
        "succeeded; 1 attempt per stage (queued, not failed)",
    ),
    (
        "`convert:oom` (every attempt)",
        "failed at convert after 2 attempts: `resources`, then `permanent` (budget 1)",
    ),
    ("`<stage>:exit:1`", "failed at that stage after 1 attempt (`permanent`)"),
    (
        "`<stage>:image-pull`",
        "failed at that stage after 1 attempt (`permanent`: ErrImagePull/ImagePullBackOff)",
    ),
    ("`<stage>:api-5xx:<2-4>`", "succeeded; 1 attempt per stage (transient, retried by the library)"),
    ("`drop-events:<stage>`", "succeeded; 1 attempt per stage; that stage never woken by an event (poll)"),
    ("`train:stall`", "cancelled by the soak (`rlpipe cancel`) once training runs; workloads deleted"),
    ("`train:1:evict@<step>`", "succeeded; Kueue evicts train attempt 1 (`preempted`), attempt 2 resumes"),
    (
        "`train:1:provision-fail` (a `flex-start` request)",
        "succeeded; train attempt 1 never admitted (`capacity`: the ProvisioningRequest rejected), "
        "attempt 2 runs",
    ),
]


def draw(kind: str, rng: random.Random) -> Scenario:
    """A concrete scenario of one fault kind (parameters drawn from ``rng``)."""
    stage = rng.choice(STAGES)
    if kind == "preempt":
        step = rng.randint(5, 45)
        return Scenario(
            kind,
            f"train:1:preempt@{step}",
            [{"stage": "train", "attempt": 1, "fault": f"preempt@{step}"}],
            "succeeded",
            {"train": 2},
            failure_classes={"train": ["preempted", None]},
        )
    if kind == "unschedulable":
        seconds = rng.choice((300, 600, 1200))
        return Scenario(
            kind,
            f"{stage}:1:unschedulable:{seconds}",
            [{"stage": stage, "attempt": 1, "fault": f"unschedulable:{seconds}"}],
            "succeeded",
            {stage: 1},
        )
    if kind == "oom":
        return Scenario(
            kind,
            "convert:oom",
            [{"stage": "convert", "fault": "oom"}],
            "failed",
            {"convert": 2},
            failed_stage="convert",
            failure_classes={"convert": ["resources", "permanent"]},
        )
    if kind == "exit":
        return Scenario(
            kind,
            f"{stage}:exit:1",
            [{"stage": stage, "fault": "exit:1"}],
            "failed",
            {stage: 1},
            failed_stage=stage,
            failure_classes={stage: ["permanent"]},
        )
    if kind == "image-pull":
        return Scenario(
            kind,
            f"{stage}:image-pull",
            [{"stage": stage, "fault": "image-pull"}],
            "failed",
            {stage: 1},
            failed_stage=stage,
            failure_classes={stage: ["permanent"]},
        )
    if kind == "api-5xx":
        count = rng.randint(2, 4)
        return Scenario(
            kind,
            f"{stage}:api-5xx:{count}",
            [{"stage": stage, "fault": f"api-5xx:{count}"}],
            "succeeded",
            {stage: 1},
        )
    if kind == "drop-events":
        return Scenario(
            kind,
            f"drop-events:{stage}",
            [{"fault": f"drop-events:{stage}"}],
            "succeeded",
            {stage: 1},
            no_callback_for=stage,
        )
    if kind == "evict":
        step = rng.randint(5, 45)
        return Scenario(
            kind,
            f"train:1:evict@{step}",
            [{"stage": "train", "attempt": 1, "fault": f"evict@{step}"}],
            "succeeded",
            {"train": 2},
            failure_classes={"train": ["preempted", None]},
        )
    if kind == "provision-fail":
        # Only a flex-start request makes a ProvisioningRequest (on flex-queue); train is its TPU stage.
        return Scenario(
            kind,
            "train:1:provision-fail",
            [{"stage": "train", "attempt": 1, "fault": "provision-fail"}],
            "succeeded",
            {"train": 2},
            failure_classes={"train": ["capacity", None]},
            request={"tpu": {"provisioning": "flex-start"}},
        )
    if kind == "stall":
        return Scenario(
            kind,
            "train:stall",
            [{"stage": "train", "fault": "stall"}],
            "cancelled",
            {"train": 1},
            cancel_when_running="train",
        )
    raise ValueError(f"no soak scenario for fault kind {kind!r}")


# Fault kinds the soak cannot draw, each with why and where it is held instead.
EXCLUDED = {
    "hold": (
        "training paused until a test releases its run: it orders a test's events around a running "
        "head (tests/cli/test_cli_logs.py), and nothing in a soak releases it"
    ),
    "no-quota": (
        "a workload Kueue never admits is `capacity` only once the request's queued deadline has "
        "passed on the wall clock (2 h by default, 60 s at the least), so one such run would make "
        "the soak's time to all-terminal a measure of that deadline, not of the pipeline "
        "(held in tests/cluster/real_plane/test_real_conformance_capacity.py, on the double and the real Kueue)"
    ),
}


def soak_kinds() -> tuple[str, ...]:
    """The simulator's fault kinds the soak deals (every one not excluded with a reason)."""
    from rlpipe.local.simulator.scenario import FAULT_KINDS

    return tuple(k for k in FAULT_KINDS if k not in EXCLUDED)


def deal(n: int, seed: int) -> list[Scenario]:
    """n scenarios: every fault kind dealt the same number of times (± 1), shuffled by the seed."""
    kinds = soak_kinds()
    rng = random.Random(seed)
    pool = [kinds[i % len(kinds)] for i in range(n)]
    rng.shuffle(pool)
    return [draw(kind, rng) for kind in pool]


def check(scenario: Scenario, record: Any, woken: set[tuple[str, str]]) -> tuple[bool, str]:
    """Is the run where its scenario says it must be? (ok, what was observed)."""
    if record is None:
        return False, "no ledger"
    by_stage: dict[str, list[Any]] = {}
    for attempt in sorted(record.attempts, key=lambda a: (STAGES.index(a.stage), a.attempt)):
        by_stage.setdefault(attempt.stage, []).append(attempt)
    observed = f"{record.state}; " + ", ".join(
        f"{stage}×{len(attempts)}"
        + (
            f" [{'/'.join(str(a.failure_class) for a in attempts)}]"
            if any(a.failure_class for a in attempts)
            else ""
        )
        for stage, attempts in by_stage.items()
    )
    problems = []
    if record.state != scenario.state:
        problems.append(f"state {record.state} != {scenario.state}")
    for stage, attempts in by_stage.items():
        want = scenario.attempts.get(stage, 1)
        if len(attempts) != want:
            problems.append(f"{stage} attempts {len(attempts)} != {want}")
    for stage, classes in (scenario.failure_classes or {}).items():
        got = [a.failure_class for a in by_stage.get(stage, [])]
        if got != classes:
            problems.append(f"{stage} failure classes {got} != {classes}")
    if scenario.failed_stage and (record.failure is None or record.failure.stage != scenario.failed_stage):
        problems.append(f"failure stage {record.failure and record.failure.stage} != {scenario.failed_stage}")
    if scenario.state == "succeeded" and [s for s in STAGES if s not in by_stage]:
        problems.append("not every stage ran")
    if scenario.no_callback_for and (record.run_id, scenario.no_callback_for) in woken:
        problems.append(f"{scenario.no_callback_for} was woken by an event that should have been dropped")
    return not problems, observed + (f" — {'; '.join(problems)}" if problems else "")


def _validate_ledger(s: BenchStack, run_id: str) -> tuple[bool, str]:
    """The raw run.json through the model, and the history readable with one ``accepted``."""
    from rlpipe.core.runs.record import RunRecord

    try:
        raw = s.client.bucket(s.settings.state_bucket).blob(f"runs/{run_id}/run.json").download_as_bytes()
        RunRecord.model_validate(json.loads(raw))
        events = [e["event"] for e in s.ledger.history(run_id)]
    except Exception as exc:  # report, do not crash the soak
        return False, f"{type(exc).__name__}: {exc}"
    if events.count("accepted") != 1 or events[0] != "accepted":
        return False, f"history {events[:3]}…"
    return True, f"{len(events)} history events"


def _callbacks_sent(s: BenchStack) -> set[tuple[str, str]]:
    woken = set()
    for line in (s.root / "logs" / "artifact_event.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("message") == "callback sent":
                woken.add((entry.get("run_id"), entry.get("stage")))
    return woken


def _canceller(
    s: BenchStack, targets: dict[str, str], stop: threading.Event, log: list[str]
) -> Callable[[], None]:
    """Cancel each stalled run once its stage runs (what a person would do with `rlpipe cancel`)."""
    from rlpipe.cli import runs

    def loop() -> None:
        pending = dict(targets)
        while pending and not stop.is_set():
            for run_id, stage in list(pending.items()):
                record = s.ledger.get(run_id)
                attempt = record.current_attempt(stage) if record else None
                if attempt is not None and attempt.phase == "running":
                    runs.cancel(s.settings, s.ledger, run_id)
                    log.append(run_id)
                    pending.pop(run_id)
                elif record is not None and record.terminal:
                    pending.pop(run_id)
            stop.wait(0.3)

    return loop


def run(args: argparse.Namespace) -> Section:
    started = time.monotonic()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    say(f"soak: seed {seed} (replay with --seed {seed})")
    scenarios = deal(args.soak_runs, seed)
    with BenchStack("soak", timing=args.soak_timing, poll_seconds=args.poll_seconds) as s:
        sampler = RssSampler(lambda: s.pids, interval=0.5)
        time.sleep(1.0)  # the idle baseline: every process up, nothing submitted yet
        sampler.sample()
        idle_total, idle = sampler.peak_total, dict(sampler.at_peak)
        sampler.peak_total = 0
        request_ids = [f"soak{seed}-{i:02d}" for i in range(len(scenarios))]
        run_ids = [s.run_id_of(r) for r in request_ids]
        faults = [
            {**entry, "run": run_id}
            for scenario, run_id in zip(scenarios, run_ids, strict=True)
            for entry in scenario.faults
        ]
        s.stack.set_faults(faults)
        sampler.start()
        submit_started = time.monotonic()
        for request_id, scenario in zip(request_ids, scenarios, strict=True):
            s.submit(s.request(request_id, **scenario.request))
        say(
            f"soak: {len(run_ids)} runs submitted at {args.soak_timing} timing; waiting (≤ {args.soak_timeout:g} s)"
        )
        stop = threading.Event()
        cancelled: list[str] = []
        stalls = {
            r: sc.cancel_when_running
            for r, sc in zip(run_ids, scenarios, strict=True)
            if sc.cancel_when_running
        }
        canceller = threading.Thread(target=_canceller(s, stalls, stop, cancelled), daemon=True)
        canceller.start()
        records = s.wait(run_ids, timeout=args.soak_timeout, interval=0.5)
        all_terminal = time.monotonic() - submit_started
        stop.set()
        canceller.join(timeout=10)
        deadline = time.monotonic() + 30
        left = s.workloads()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = s.workloads()
        sampler.stop()
        s.stack.set_faults([])
        woken = _callbacks_sent(s)
        rows, results = [], []
        for i, (scenario, run_id) in enumerate(zip(scenarios, run_ids, strict=True)):
            ok, observed = check(scenario, records.get(run_id), woken)
            valid, ledger_note = _validate_ledger(s, run_id)
            results.append(
                {
                    "run_id": run_id,
                    "scenario": scenario.label,
                    "expected": scenario.state,
                    "observed": observed,
                    "ok": ok,
                    "ledger_valid": valid,
                    "ledger": ledger_note,
                }
            )
            rows.append(
                [
                    i + 1,
                    f"`{run_id}`",
                    f"`{scenario.label}`",
                    scenario.state,
                    observed,
                    "✓" if ok else "**✗**",
                    "✓" if valid else f"**✗** {ledger_note}",
                ]
            )
        ok_runs = sum(1 for r in results if r["ok"])
        valid = sum(1 for r in results if r["ledger_valid"])
        pids = s.pids
    print(table(["#", "run", "scenario", "expected", "observed", "ok", "ledger"], rows), flush=True)
    components = sorted(sampler.peak_by_component.items(), key=lambda kv: -kv[1])
    body = (
        f"**Seed {seed}** (`python -m bench.run_all --only soak --seed {seed}` replays the same scenarios). "
        f'{len(run_ids)} runs submitted at once, `timing="{args.soak_timing}"`, `poll_seconds={args.poll_seconds}`, '
        f"retry backoff 1–2 s; all terminal after {secs(all_terminal)}.\n\n"
        "Expected outcome of each scenario:\n\n"
        + table(["scenario", "expected"], EXPECTED_TEXT)
        + "\n\n"
        + table(
            [
                "#",
                "run",
                "scenario",
                "expected",
                "observed (state; stage×attempts [failure classes])",
                "ok",
                "ledger validates",
            ],
            rows,
        )
        + f"\n\nRuns in their expected terminal state: **{ok_runs}/{len(results)}**; ledgers valid: "
        f"**{valid}/{len(results)}**; workloads left in the cluster: **{len(left)}**"
        + (f" ({', '.join(left)})" if left else "")
        + f"; stalled runs cancelled: {len(cancelled)}.\n\n"
        f"Memory of the stack (sum of RSS over its {len(pids)} process groups, {sampler.samples} samples): "
        f"**peak {mib(sampler.peak_total)}** at {sampler.peak_at:.0f} s, vs **{mib(idle_total)} idle** just "
        f"before the soak (×{sampler.peak_total / max(idle_total, 1):.2f}). Per component, peak (idle): "
        + ", ".join(f"{name} {mib(v)} ({mib(idle.get(name, 0))})" for name, v in components)
        + "."
    )
    headline = [
        (
            f"soak: {len(run_ids)} concurrent runs, random faults (seed {seed})",
            f"{ok_runs}/{len(results)} as expected, {valid}/{len(results)} ledgers valid, {len(left)} workloads left",
            f"all terminal in {secs(all_terminal)}",
        ),
        (
            "soak: peak memory of the whole stack",
            mib(sampler.peak_total),
            f"idle stack {mib(idle_total)} (×{sampler.peak_total / max(idle_total, 1):.2f})",
        ),
    ]
    data = {
        "seed": seed,
        "timing": args.soak_timing,
        "results": results,
        "left": left,
        "cancelled": cancelled,
        "all_terminal_s": all_terminal,
        "peak_rss": sampler.peak_total,
        "idle_rss": idle_total,
        "peak_by_component": sampler.peak_by_component,
        "idle_by_component": idle,
    }
    ok = ok_runs == len(results) and valid == len(results) and not left
    return Section(
        "soak",
        "6. Soak: concurrent runs with random faults",
        body,
        headline,
        data=data,
        seconds=time.monotonic() - started,
        ok=ok,
    )


if __name__ == "__main__":
    section = run(
        argparse.Namespace(seed=None, soak_runs=8, soak_timing="demo", poll_seconds=2, soak_timeout=240)
    )
    print(section.body)
