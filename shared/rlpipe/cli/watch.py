"""``rlpipe watch``: a live view of one run, and the summary printed when it ends."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rlpipe.cli.runs import describe
from rlpipe.control.ledger import Ledger, RunRecord
from rlpipe.core import cost

_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
    "running": "cyan",
    "queued": "magenta",
}


def _fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def render_view(record: RunRecord, *, simulated: bool = False, cluster: str | None = None) -> Group:
    info = describe(record)
    title = Text.assemble(
        ("run ", "bold"),
        (record.run_id, "bold cyan"),
        "  state: ",
        (record.state, _STYLE.get(record.state, "white")),
    )
    table = Table(show_header=True, header_style="bold", expand=False)
    for column in ("stage", "state", "attempts", "elapsed", "detail"):
        table.add_column(column)
    for row in info["stages"]:
        detail = row.get("failure") or ""
        if row.get("resume_step"):
            detail = f"resumed from step {row['resume_step']}" + (f"; {detail}" if detail else "")
        if row["stage"] == "train" and record.progress:
            detail = _reward_text(record.progress) + (f"; {detail}" if detail else "")
        table.add_row(
            row["stage"],
            Text(row["phase"], style=_STYLE.get(row["phase"], "white")),
            str(row["attempts"]),
            _fmt_seconds(row["seconds"]),
            detail,
        )
    parts: list[Any] = [title, table]
    if record.failure:
        parts.append(
            Text(
                f"failure [{record.failure.tag}] in {record.failure.stage}: {record.failure.message}",
                style="red",
            )
        )
    if simulated and cluster == "real":
        parts.append(
            Text(
                "REAL Kubernetes control plane; nodes, containers and the TPU are PLAYED (local stack)",
                style="dim",
            )
        )
    elif simulated:
        parts.append(Text("cluster and TPU are SIMULATED (local stack)", style="dim"))
    return Group(*parts)


def _reward_text(progress: dict[str, Any]) -> str:
    """Step and mean_reward from train_rl's own eval lines: pre → latest intermediate → post."""
    parts = [f"step {progress.get('step')}"]
    pre, post = progress.get("pre_mean_reward"), progress.get("post_mean_reward")
    if pre is not None:
        parts.append(f"mean_reward pre {pre:.4f}")
    if progress.get("eval_mean_reward") is not None and post is None:
        parts.append(f"eval@{progress.get('eval_step')} {progress['eval_mean_reward']:.4f}")
    if post is not None:
        change = f" ({post - pre:+.4f})" if pre is not None else ""
        parts.append(f"post {post:.4f}{change}")
    return ", ".join(parts)


def _inputs_lines(lineage: Any) -> list[str]:
    """What the run trained on (each split at its pinned commit) and with (the request's own files,
    by sha256; else MaxText's built-in rewards)."""
    from rlpipe.control import data_pins
    from rlpipe.core.staging import BUILTIN_REWARDS

    lines = [f"  data        {line}" for line in data_pins.summary(lineage.data)]
    inputs = lineage.inputs or {}
    for role, entry in sorted(inputs.items()):
        names = f" {', '.join(entry['functions'])}" if entry.get("functions") else ""
        lines.append(f"  {role:<11} {entry.get('source', entry['uri'])}{names}: sha256 {entry['sha256']}")
    if lineage.data and "rewards" not in inputs:
        lines.append(f"  rewards fn  MaxText's built-in: {', '.join(BUILTIN_REWARDS)}")
    return lines


def summary(record: RunRecord, *, simulated: bool = False, cluster: str | None = None) -> str:
    """What a finished run did; on the local stack (``simulated``) also which cluster ran it:
    ``double`` (the default) or ``real`` (the real control plane)."""
    info = describe(record)
    lines = [f"run {record.run_id}: {record.state}"]
    for row in info["stages"]:
        extra = f" (resumed from step {row['resume_step']})" if row.get("resume_step") else ""
        lines.append(
            f"  {row['stage']:<8} {row['phase']:<10} attempts={row['attempts']}  "
            f"duration={_fmt_seconds(row['seconds'])}{extra}"
        )
        if row.get("failure"):
            lines.append(f"           {row['failure']}")
    lineage = record.lineage
    if lineage.hf_sha:
        lines.append(f"  source      {lineage.hf_repo}@{lineage.hf_sha}")
    if lineage.converted_uri:
        lines.append(
            f"  converted   {lineage.converted_uri}"
            + (" (cache hit)" if lineage.conversion_cache_hit else "")
        )
    lines += _inputs_lines(lineage)
    if lineage.checkpoint_uri:
        step = f" (final step {lineage.final_step})" if lineage.final_step else ""
        lines.append(f"  checkpoints {lineage.checkpoint_uri}rl/checkpoints/actor/{step}")
    end = (record.results or {}).get("training_end")  # control/stage.py: a clean end below max_steps
    if isinstance(end, dict) and end.get("explanation"):
        lines.append(f"  training    {end['explanation']}")
    if lineage.export_uri:
        lines.append(f"  export      {lineage.export_uri}")
    if record.progress:
        lines.append(f"  rewards     {_reward_text(record.progress)}")
    evals = (record.results or {}).get("intermediate") or []
    if evals:
        points = ", ".join(
            f"{e['step']}: {e['mean_reward']:.4f}" for e in evals[-5:] if e.get("mean_reward") is not None
        )
        lines.append(f"  evals       mean_reward by step: {points}" + (" (last 5)" if len(evals) > 5 else ""))
    if info["chip_hours"]:
        per = ", ".join(f"{r['stage']} {r['chip_hours']:.2f}" for r in info["stages"] if r.get("chip_hours"))
        lines.append(f"  chip-hours  {info['chip_hours']:.2f} TPU chip-hours held ({per})")
        lines += _cost_lines(record, info.get("cost_estimate") or {})
    if record.gate is not None and record.gate.reasons != ["no gate requested"]:
        verdict = {True: "passed", False: "FAILED", None: "not evaluated"}[record.gate.passed]
        lines.append(f"  gate        {verdict}: {'; '.join(record.gate.reasons)}")
        if record.gate.override:
            o = record.gate.override
            lines.append(f"              overridden by {o.by} at {o.at}: {o.reason}")
    publish = record.request.get("publish")
    if publish and any(a.stage == "publish" and a.phase == "succeeded" for a in record.attempts):
        hub = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
        lines.append(f"  published   {hub}/{publish['repo']} (branch {publish['branch']})")
    if record.failure:
        lines.append(f"  failure     [{record.failure.tag}] {record.failure.message}")
    step = next_step(record)
    if step:
        lines.append(f"  next        {step}")
    if simulated:
        from rlpipe.local.stack import describe_cluster

        lines.append(f"  cluster     {describe_cluster(cluster or 'double')}")
        what = (
            "the Kubernetes control plane, JobSet and Kueue were REAL; the nodes, the containers and the "
            "TPU slice were PLAYED"
            if cluster == "real"
            else "the cluster and the TPU slice were SIMULATED"
        )
        lines.append(
            f"  note        {what}; GCS, events, functions and the workflow engine ran for real on this machine"
        )
    return "\n".join(lines)


def next_command(record: RunRecord, run: str | None = None) -> str | None:
    """The command that takes a run that ended without shipping further (``run``: the id to show
    in it, the record's own by default); None when there is nothing to do."""
    from rlpipe.control import retry

    run = run or record.run_id
    if record.state == "gated" and record.sweep is not None:  # promote a child, never the parent
        return f'rlpipe status {run}  (then rlpipe promote CHILD --reason "…" for the child to ship)'
    if record.state == "gated":
        return f'rlpipe promote {run} --reason "…"'
    if record.state in ("failed", "cancelled") and retry.refusal(record) is None:
        return f'rlpipe retry {run} --reason "…"'
    return None


def next_step(record: RunRecord) -> str | None:
    """What a person can do about a run that ended without shipping: a summary that stops at
    `gated` or `failed` leaves the reader to find the command in the docs."""
    command = next_command(record)
    if command is None:
        return None
    if record.state == "gated":
        return (
            f"the quality gate held the model back; to ship it anyway: {command} "
            "(it goes on to export and publish, without training again)"
        )
    return f"to go on from where it stopped: {command} (training resumes from its last checkpoint)"


def _cost_lines(record: RunRecord, estimate: dict[str, Any]) -> list[str]:
    """What the chip-hours cost, or, once and plainly, that no price is published and where to set
    one: "unset at reservation list price: unset (not found: …)" said the same thing three times."""
    if not estimate:
        return []
    if estimate["amount"] is None:
        return [f"  cost        {cost.unset_hint(str(record.request['tpu']['type']), [estimate['mode']])}"]
    return [
        f"  cost        ${estimate['amount']:,.2f} at the {estimate['mode']} list price, {estimate['price']}"
    ]


def watch(
    ledger: Ledger,
    run_id: str,
    *,
    timeout: float = 3600,
    interval: float = 0.5,
    simulated: bool = False,
    cluster: str | None = None,
    console: Console | None = None,
    on_tick: Callable[[RunRecord | None], None] | None = None,
    rejected: Callable[[], bool] | None = None,
) -> RunRecord | None:
    """Follow a run until it is terminal (or the timeout); returns the last record seen.
    ``rejected``: whether intake refused the delivery, so that a run that will never exist is
    not waited for until the timeout."""
    console = console or Console()
    deadline = time.monotonic() + timeout
    record = ledger.get(run_id)
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while time.monotonic() < deadline:
            record = ledger.get(run_id)
            if on_tick:
                on_tick(record)
            if record is None:
                if rejected is not None and rejected():
                    break
                live.update(Text(f"waiting for run {run_id} to be accepted…", style="dim"))
            else:
                live.update(render_view(record, simulated=simulated, cluster=cluster))
                if record.terminal:
                    break
            time.sleep(interval)
    if not console.is_terminal:
        # Rich ends a live display with a line break only on a terminal: piped or in a log, the
        # view's last line ("... SIMULATED (local stack)") ran into whatever was printed next.
        console.line()
    return record


def _phase(info: dict[str, Any], record: RunRecord) -> str:
    """The phase of the run's current stage (``accepted`` before any stage started)."""
    return next((r["phase"] for r in info["stages"] if r["stage"] == record.stage), "accepted")


def change_line(record: RunRecord) -> dict[str, Any]:
    """One line of ``rlpipe watch --json`` (docs/cli.md, "watch --json"): where the run is now."""
    from rlpipe.control.ledger import now

    info = describe(record)
    return {
        "type": "change",
        "run_id": record.run_id,
        "state": record.state,
        "stage": record.stage,
        "attempt": record.attempt,
        "phase": _phase(info, record),
        "terminal": info["terminal"],
        "at": now(),
    }


def watch_json(
    ledger: Ledger,
    run_id: str,
    *,
    emit: Callable[[dict[str, Any]], None],
    timeout: float = 3600,
    interval: float = 0.5,
) -> RunRecord | None:
    """``watch`` for scripts: ``emit`` one ``change`` line each time the run's state, stage,
    attempt or phase changed (the first one seen included), then, if the run was found, one
    ``final`` line carrying its record as ``rlpipe status --json`` prints it. Returns the last
    record seen (None: the run never appeared before the timeout)."""
    deadline = time.monotonic() + timeout
    record: RunRecord | None = None
    last: tuple[Any, ...] | None = None
    while True:
        record = ledger.get(run_id)
        if record is not None:
            line = change_line(record)
            key = (line["state"], line["stage"], line["attempt"], line["phase"])
            if key != last:
                emit(line)
                last = key
            if record.terminal:
                break
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    if record is not None:
        emit({"type": "final", "run": describe(record)})
    return record
