"""``make demo SCENARIO=sweep``: one sweep file becomes four child runs, followed to the end.

Why a follower of its own: a sweep is many runs at once, so the demo prints one line whenever a
child changes (queued, converting, training, at selection, ended) instead of one run's stages,
and ends with the comparison table the sweep's report page draws, plus what was shared.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import sweep as core_sweep
from rlpipe.core.runs.record import RunRecord


def follow(ledger: Ledger, parent_id: str, *, timeout: float, poll: float = 1.0) -> RunRecord | None:
    """Print each child's changes until the sweep ends (or ``timeout``); the parent at the end."""
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    parent = None
    while time.monotonic() < deadline:
        parent = ledger.get(parent_id)
        if parent is not None and parent.sweep is not None:
            for index, run_id in enumerate(parent.sweep.children):
                child = ledger.get(run_id)
                line = _child_line(child) if child is not None else "not claimed yet"
                if seen.get(run_id) != line:
                    seen[run_id] = line
                    point = core_sweep.describe(parent.sweep.points[index])
                    print(f"  child {index} [{point}] {run_id}: {line}", flush=True)
            if parent.terminal:
                return parent
        time.sleep(poll)
    return parent


def _child_line(child: RunRecord) -> str:
    member = child.lineage.sweep
    if not child.terminal and child.admission is not None:
        return child.admission.reason
    if child.state == "stopped" and child.failure is not None:  # its sweep's rule: say which and where
        return f"stopped: {child.failure.message}"
    if child.terminal:
        chosen = (
            ""
            if member is None or member.selected is None
            else (" (selected)" if member.selected else " (not selected)")
        )
        return f"{child.state}{chosen}"
    return f"{child.state}" + (f" ({child.stage})" if child.stage else "")


def _stopping(parent: RunRecord, records: list[RunRecord]) -> list[str]:
    """Which children the sweep's rule stopped, where, and the chip-hours against none's estimate."""
    from datetime import UTC, datetime

    from rlpipe.report.stopping import savings, stop_marks

    assert parent.sweep is not None
    if not parent.sweep.stopped:
        return []
    lines = [""]
    for stop in sorted(parent.sweep.stopped, key=lambda s: s.index):
        lines.append(f"  stopped     child {stop.index}: {stop.reason}")
    saved = savings(records, stop_marks(records, parent), datetime.now(UTC), parent)
    if saved is not None and saved.without:
        lines.append(
            f"  chip-hours  {saved.used:.2f} used; about {saved.without:.2f} without stopping "
            f"({saved.used / saved.without:.0%} of it)"
        )
        lines.append(f"              how: {saved.how}")
        if saved.plan_best is not None:
            below = f"; below it: {saved.below_plan_why}" if saved.below_plan_why else ""
            lines.append(
                f"              the plan's best case: {saved.plan_best:.0%} of the training steps{below}"
            )
    return lines


def summary(
    ledger: Ledger,
    parent: RunRecord,
    root: Path,
    prices_json: str = "",
    cluster: str | None = "double",
    events: str = "pubsub",
) -> str:
    """The sweep's end: its state, why the winner won, the comparison table, what was shared, and
    the sweep's page, drawn as ``rlpipe report PARENT`` draws it (``cluster``: where it ran)."""
    from rlpipe.cli import charts
    from rlpipe.report.compare import render_compare, run_rows

    assert parent.sweep is not None
    children = [ledger.get(c) for c in parent.sweep.children]
    records = [c for c in children if c is not None]
    selection = parent.sweep.selection
    lines = [
        f"sweep {parent.run_id}: {parent.state}, {len(records)} children, max_parallel {parent.sweep.max_parallel}"
    ]
    if selection is not None:
        lines.append(f"  selected    {selection.run_id or 'none'}: {selection.reason}")
    elif parent.failure is not None:
        lines.append(f"  ended       {parent.failure.message}")
    rows = run_rows(records, prices_json=prices_json)
    points = [core_sweep.describe(p) for p in parent.sweep.points]
    wide = max(len("overrides"), *(len(p) for p in points)) + 2
    lines += [
        "",
        f"    {'child':<6}{'run':<14}{'overrides':<{wide}}{'state':<11}{'post reward':>12}{'chip-h':>8}  cost",
    ]
    for index, row in enumerate(rows):
        post = next((m["post"] for m in row["metrics"] if m["field"] == "mean_reward"), "-")
        mark = "* " if selection is not None and row["run_id"] == selection.run_id else "  "
        lines.append(
            f"  {mark}{index:<6}{row['run_id']:<14}{points[index]:<{wide}}{row['state']:<11}{post:>12}"
            f"{row['chip_hours']:>8}  {row['cost']}"
        )
    lines += _stopping(parent, records)
    converts = sum(1 for c in children if c is not None for a in c.attempts if a.stage == "convert")
    publishes = [
        c.run_id for c in children if c is not None and any(a.stage == "publish" for a in c.attempts)
    ]
    shas = {c.lineage.hf_sha for c in children if c is not None}
    lines += [
        "",
        f"  shared      model commit {', '.join(sorted(s or '-' for s in shas))}; "
        f"{converts} conversion{'s' if converts != 1 else ''} for {len(records)} children",
        f"  published   {', '.join(publishes) or 'nothing'}",
    ]
    page = root / f"{parent.run_id}-sweep.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(
        render_compare(records, prices_json=prices_json, cluster=cluster, sweep=parent, painter=charts),
        encoding="utf-8",
    )
    lines.append(f"  report      {page} (rlpipe report {parent.run_id} draws the same page)")
    from rlpipe.cli.watch import where_it_ran

    lines += where_it_ran(cluster, events)
    return "\n".join(lines)
