"""``rlpipe watch``: a live view of one run, and the summary printed when it ends."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rlpipe.cli.runs import describe
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import cost
from rlpipe.core.failure_rules.reported import ROUND_BOUND, TEAM_BUDGET_EXCEEDED
from rlpipe.core.runs.record import RunRecord, parse_time

_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
    "running": "cyan",
    "queued": "magenta",
    "retrying": "magenta",
}


@dataclass(frozen=True)
class PendingRetry:
    """A stage whose last attempt failed with a class the workflow retries, while the workflow
    waits out its backoff: what the live view says instead of "failed"."""

    stage: str
    failure_class: str
    next_attempt: int
    class_used: int  # failures of this class in the stage this round, the last one included
    class_budget: int
    delay_seconds: float  # the Workflows backoff before this retry (try/retry in pipeline.yaml)
    starts_at: datetime  # the failed attempt's end plus that delay

    def describe(self, now: datetime) -> str:
        left = (self.starts_at - now).total_seconds()
        when = f"in about {left:.0f} s" if left >= 1 else "any moment now"
        return (
            f"retrying {self.stage} ({self.failure_class}, {self.class_used} of {self.class_budget} allowed): "
            f"attempt {self.next_attempt} starts {when}"
        )


def pending_retry(record: RunRecord) -> PendingRetry | None:
    """The retry the workflow is waiting to make, read from the ledger: the current stage's last
    attempt failed with a retryable class whose budget is not spent (control/budgets.py marks a
    spent one ``permanent``). The delay is Workflows' backoff, ``min(initial × multiplier^k, max)``
    for the k-th retry of the stage's try block (https://cloud.google.com/workflows/docs/reference/syntax/retrying),
    with the request's backoff as plan hands it to the workflow."""
    from rlpipe.core.failures import RETRYABLE, FailureClass

    if record.terminal or record.stage is None:
        return None
    attempts = [a for a in record.attempts if a.stage == record.stage and a.round == record.round]
    if not attempts:
        return None
    last = max(attempts, key=lambda a: a.attempt)
    retryable = {c.value for c in RETRYABLE}
    if last.phase != "failed" or last.failure_class not in retryable or not last.finished_at:
        return None
    retry = record.request.get("retry") or {}
    backoff = retry.get("backoff") or {}
    failed = [a for a in attempts if a.failure_class]
    k = max(len(failed) - 1, 0)
    try:
        delay = min(
            float(backoff["initial_delay"]) * float(backoff["multiplier"]) ** min(k, 64),
            float(backoff["max_delay"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError):
        delay = 0.0
    cls = FailureClass(last.failure_class)
    return PendingRetry(
        stage=record.stage,
        failure_class=cls.value,
        next_attempt=last.attempt + 1,
        class_used=sum(1 for a in attempts if a.failure_class == cls.value),
        class_budget=int((retry.get("budgets") or {}).get(cls.value, 0)),
        delay_seconds=delay,
        starts_at=parse_time(last.finished_at) + timedelta(seconds=delay),
    )


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
    retrying = pending_retry(record)
    table = Table(show_header=True, header_style="bold", expand=False)
    for column in ("stage", "state", "attempts", "elapsed", "detail"):
        table.add_column(column)
    for row in info["stages"]:
        detail = row.get("failure") or ""
        if row.get("resume_step"):
            detail = f"resumed from step {row['resume_step']}" + (f"; {detail}" if detail else "")
        if row["stage"] == "train" and record.progress:
            detail = _train_progress_text(record) + (f"; {detail}" if detail else "")
        phase = "retrying" if retrying is not None and row["stage"] == retrying.stage else row["phase"]
        table.add_row(
            row["stage"],
            Text(phase, style=_STYLE.get(phase, "white")),
            str(row["attempts"]),
            _fmt_seconds(row["seconds"]),
            detail,
        )
    parts: list[Any] = [title, table]
    retrying = pending_retry(record)
    if retrying is not None:
        parts.append(Text(retrying.describe(datetime.now(UTC)), style="magenta"))
    if record.failure:
        parts.append(
            Text(
                f"failure [{record.failure.tag}] in {record.failure.stage}: {record.failure.message}",
                style="red",
            )
        )
    if simulated:
        parts.append(Text(_cluster_note(cluster), style="dim"))
    return Group(*parts)


def _cluster_note(cluster: str | None) -> str:
    """What a local run's cluster is, on the live view and atop the plain lines."""
    if cluster == "real":
        return "REAL Kubernetes control plane; nodes, containers and the TPU are PLAYED (local stack)"
    return "cluster and TPU are SIMULATED (local stack)"


def _train_progress_text(record: RunRecord) -> str:
    """The live view's training detail: the current attempt's own progress. Until that attempt's
    log has a step, an earlier attempt's is not shown as if it were this one's."""
    progress = record.progress or {}
    trains = [a for a in record.attempts if a.stage == "train"]
    current = trains[-1] if trains else None
    of = progress.get("attempt")
    if current is not None and of is not None and of != current.attempt:
        resumed = f", resuming from step {current.resume_step}" if current.resume_step else ""
        return f"attempt {current.attempt}: no step of its own yet{resumed}"
    return _reward_text(progress)


def _reward_text(progress: dict[str, Any]) -> str:
    """Step and mean_reward from train_rl's own eval lines: pre → latest intermediate → post."""
    step = progress.get("step")
    parts = [f"step {step}" if step is not None else "no training step yet"]
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
    from rlpipe.control.lifecycle import data_pins
    from rlpipe.core.staging import BUILTIN_REWARDS

    lines = [f"  data        {line}" for line in data_pins.summary(lineage.data)]
    inputs = lineage.inputs or {}
    for role, entry in sorted(inputs.items()):
        names = f" {', '.join(entry['functions'])}" if entry.get("functions") else ""
        lines.append(f"  {role:<11} {entry.get('source', entry['uri'])}{names}: sha256 {entry['sha256']}")
    if lineage.data and "rewards" not in inputs:
        lines.append(f"  rewards fn  MaxText's built-in: {', '.join(BUILTIN_REWARDS)}")
    return lines


def summary(
    record: RunRecord,
    *,
    simulated: bool = False,
    cluster: str | None = None,
    hub_stops: bool = False,
    events: str = "pubsub",
) -> str:
    """What a finished run did; on the local stack (``simulated``) also which cluster ran it:
    ``double`` (the default) or ``real`` (the real control plane). ``hub_stops``: the local Hub
    double stops right after (the demo), so no link to it is given."""
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
    end = (record.results or {}).get("training_end")  # control/stage/service.py: a clean end below max_steps
    if isinstance(end, dict) and end.get("explanation"):
        lines.append(f"  training    {end['explanation']}")
    if lineage.export_uri:
        lines.append(f"  export      {lineage.export_uri}")
    if lineage.exported_step is not None and lineage.exported_step != lineage.final_step:
        lines.append(f"  exported    step {lineage.exported_step}: {lineage.export_reason}")
    if record.progress:
        lines.append(f"  rewards     {_reward_text(record.progress)}")
    lines += _evaluation_lines((record.results or {}).get("intermediate") or [])
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
        if hub_stops:
            lines.append(
                f"  published   {publish['repo']} (branch {publish['branch']}) on the local Hub double, "
                "which stops with this demo (what it held is listed below)"
            )
        else:
            hub = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
            lines.append(f"  published   {hub}/{publish['repo']} (branch {publish['branch']})")
    if record.failure:
        lines.append(f"  failure     [{record.failure.tag}] {record.failure.message}")
    after = next_step(record)
    if after:
        lines.append(f"  next        {after}")
    if simulated:
        lines += where_it_ran(cluster, events)
    return "\n".join(lines)


EVALUATIONS_SHOWN = 5  # per attempt; `rlpipe report` draws every one


def _evaluation_lines(evaluations: list[dict[str, Any]]) -> list[str]:
    """The intermediate evaluations, one line per attempt and each step once (a status read may
    record a step again, and a retried attempt evaluates its own steps): merged across attempts
    they read as one curve with repeated steps (``80: 0.6685, 80: 0.6685``)."""
    by_attempt: dict[int | None, dict[int, float]] = {}
    for e in evaluations:
        if e.get("mean_reward") is not None and e.get("step") is not None:
            by_attempt.setdefault(e.get("attempt"), {})[int(e["step"])] = float(e["mean_reward"])
    lines = []
    for attempt, points in by_attempt.items():
        steps = sorted(points)
        shown = steps[-EVALUATIONS_SHOWN:]
        label = f"attempt {attempt}" if attempt is not None else "every attempt"
        text = ", ".join(f"step {step} {points[step]:.4f}" for step in shown)
        earlier = len(steps) - len(shown)
        more = f" ({earlier} earlier: `rlpipe report` draws them all)" if earlier else ""
        lines.append(f"  evaluations {label}, mean_reward: {text}{more}")
    return lines


def where_it_ran(cluster: str | None, events: str = "pubsub") -> list[str]:
    """A local demo's closing lines: which cluster ran it and what was real or played there. Every
    demo's summary ends with them (a run's, a sweep's, the teams'), so none reads as a real TPU's.
    ``events``: how the stack delivered GCS's events (``StackState.events``): ``watcher`` when a
    bucket watcher played them, which the note must not call real."""
    from rlpipe.local.stack import describe_cluster

    what = (
        "the Kubernetes control plane, JobSet and Kueue were REAL; the nodes, the containers and the "
        "TPU slice were PLAYED"
        if cluster == "real"
        else "the cluster and the TPU slice were SIMULATED"
    )
    real = (
        "GCS, functions and the workflow engine ran for real on this machine; GCS's events were PLAYED "
        "by a bucket watcher listing the buckets (EVENTS=watcher), not sent as GCS's notifications"
        if events == "watcher"
        else "GCS, events, functions and the workflow engine ran for real on this machine"
    )
    return [f"  cluster     {describe_cluster(cluster or 'double')}", f"  note        {what}; {real}"]


def retry_would_help(record: RunRecord) -> bool:
    """Whether ``rlpipe retry`` can change how a failed or cancelled run ends: a cancelled run, a
    retry budget that ran out (a new round starts with every budget whole), or a stage deadline.
    A permanent failure (a repository that does not exist, an image that cannot be pulled, a program
    that exits with an error, a request MaxText refuses) fails again the same way: retry continues
    the same request, so the fix is a changed request, not another round."""
    if record.state == "cancelled":
        return True
    failure = record.failure
    if failure is None:  # no cause recorded: another round is how to learn more
        return True
    if failure.tag != "permanent":
        return True  # a retryable class ended the round (e.g. the execution was lost)
    # The rule that ended it (core.failure_rules): a spent budget or retry cap, a stage deadline.
    if failure.rule in ROUND_BOUND:
        return True
    # A ledger older than the rules names none; its last attempt still says when a budget ran out.
    last = record.attempt_record(failure.stage or "", failure.attempt or 0) if failure.stage else None
    return last is not None and bool(last.budget_exhausted)


def trained_steps(record: RunRecord) -> int | None:
    """The last training step the head reported, if training ever started (the retry resumes from
    the newest committed checkpoint at or below it)."""
    step = (record.progress or {}).get("step")
    trains = [a for a in record.attempts if a.stage == "train"]
    if not (isinstance(step, int) and step > 0):
        # A resumed attempt that printed no step of its own yet (its progress starts afresh:
        # core.runs.results.newer_progress) had still reached the step it resumed from.
        step = max((a.resume_step or 0 for a in trains), default=0)
    return step if trains and step > 0 else None


def next_command(record: RunRecord, run: str | None = None) -> str | None:
    """The command that takes a run that ended without shipping further (``run``: the id to show
    in it, the record's own by default); None when there is nothing a command can do."""
    from rlpipe.control.lifecycle import retry_rounds

    run = run or record.run_id
    if record.state == "gated" and record.sweep is not None:  # promote a child, never the parent
        return f'rlpipe status {run}  (then rlpipe promote CHILD --reason "…" for the child to ship)'
    if record.state == "gated":
        return f'rlpipe promote {run} --reason "…"'
    if (
        record.state in ("failed", "cancelled")
        and retry_rounds.refusal(record) is None
        and retry_would_help(record)
    ):
        return f'rlpipe retry {run} --reason "…"'
    return None


def next_step(record: RunRecord) -> str | None:
    """What a person can do about a run that ended without shipping, following how it ended: a
    summary that stops at `gated` or `failed` leaves the reader to find the command in the docs,
    and a hint that a retry would fail the same way sends them round in a circle."""
    command = next_command(record)
    if (
        record.state == "failed"
        and record.failure is not None
        and record.failure.rule == TEAM_BUDGET_EXCEEDED
    ):
        # refused at plan by its team's monthly budget (core.team_limits): the same request fits
        # once the budget has room, so a retry later is a way on as well as a changed request
        return (
            "its team's monthly TPU budget could not hold it (nothing of it held a TPU): ask for fewer "
            "chips or shorter deadlines and submit again, or once the budget allows (next month, or "
            f'raised by the deployment) rlpipe retry {record.run_id} --reason "…"'
        )
    if record.state == "gated" and command is not None:
        return (
            f"the quality gate held the model back; to ship it anyway: {command} "
            "(it goes on to export and publish, without training again)"
        )
    if record.state == "failed" and command is None and record.failure is not None:
        return (
            "this failure is permanent: a retry would fail the same way. Fix its cause (the request, "
            "the model's access, the image) and submit the changed request with a new request_id "
            "(`rlpipe submit FILE --name NEW_ID`)"
        )
    if command is None:
        return None
    step = trained_steps(record)
    trains = [a for a in record.attempts if a.stage == "train"]
    committed = trains[-1].committed_step if trains else None
    if committed == 0:  # read once a cancel's pods were gone: nothing was committed
        resume = "no checkpoint was committed, so training starts from the beginning" + (
            f" (the head had reached step {step})" if step is not None else ""
        )
    elif committed is not None:  # read once a cancel's pods were gone: what the retry will use
        resume = f"training resumes from its newest committed checkpoint, step {committed}" + (
            f" (the head had reached step {step})" if step is not None and step != committed else ""
        )
    elif step is not None:
        resume = f"training resumes from its newest committed checkpoint (it had reached step {step})"
    else:
        resume = "no training had started, so it starts from the beginning"
    return f"to go on from where it stopped: {command} ({resume})"


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


class PipedConsole(Console):
    """rich's Console, except that a closed stdout is answered as every other command answers it.

    rich's own ``on_broken_pipe`` (meant to be overridden) exits 1, so ``rlpipe watch RUN | head -1``
    exited 1 where docs/cli.md says 141; raising ``BrokenPipeError`` instead lets ``cli.main`` end
    quietly with 141, as ``status | head`` does."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


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
) -> RunRecord | None:
    """Follow a run until it is terminal (or the timeout); returns the last record seen.

    On a terminal, a live view redrawn in place. Piped or in a CI log, where a redrawn view shows
    only its last frame, one plain line per change of state, stage, attempt or phase
    (:func:`progress_line`), so the log tells the run's story."""
    console = console or PipedConsole()
    if not console.is_terminal:
        if simulated:
            console.print(_cluster_note(cluster), markup=False, highlight=False)
        return _watch_plain(
            ledger, run_id, timeout=timeout, interval=interval, console=console, on_tick=on_tick
        )
    deadline = time.monotonic() + timeout
    record = ledger.get(run_id)
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while time.monotonic() < deadline:
            record = ledger.get(run_id)
            if on_tick:
                on_tick(record)
            if record is None:
                live.update(Text(f"waiting for run {run_id} to be accepted…", style="dim"))
            else:
                live.update(render_view(record, simulated=simulated, cluster=cluster))
                if record.terminal:
                    break
            time.sleep(interval)
    return record


def _watch_plain(
    ledger: Ledger,
    run_id: str,
    *,
    timeout: float,
    interval: float,
    console: Console,
    on_tick: Callable[[RunRecord | None], None] | None,
) -> RunRecord | None:
    deadline = time.monotonic() + timeout
    record: RunRecord | None = None
    last: tuple[Any, ...] | None = None
    while True:
        record = ledger.get(run_id)
        if on_tick:
            on_tick(record)
        if record is not None:
            key, line = progress_line(record)
            if key != last:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
                last = key
            if record.terminal:
                break
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    return record


def progress_line(record: RunRecord, now: datetime | None = None) -> tuple[tuple[Any, ...], str]:
    """One plain line saying where the run is, and the key that changes only when its state,
    stage, attempt or phase does (a pending retry counts as a phase: ``retrying``)."""
    now = now or datetime.now(UTC)
    info = describe(record)
    retrying = pending_retry(record)
    phase = "retrying" if retrying is not None else _phase(info, record)
    parts = [f"{now:%H:%M:%S} run {record.run_id}: {record.state}"]
    if record.stage:
        parts.append(f"{record.stage} attempt {record.attempt} {phase}")
        row: dict[str, Any] = next((r for r in info["stages"] if r["stage"] == record.stage), {})
        if row.get("resume_step"):
            parts.append(f"resumed from step {row['resume_step']}")
    if retrying is not None:
        parts.append(retrying.describe(now))
    elif record.stage == "train" and record.progress:
        parts.append(_reward_text(record.progress))
    if record.failure and record.terminal:
        parts.append(f"[{record.failure.tag}] {record.failure.message}")
    key = (record.state, record.stage, record.attempt, phase)
    return key, "; ".join(parts)


def _phase(info: dict[str, Any], record: RunRecord) -> str:
    """The phase of the run's current stage (``accepted`` before any stage started)."""
    return next((r["phase"] for r in info["stages"] if r["stage"] == record.stage), "accepted")


def change_line(record: RunRecord) -> dict[str, Any]:
    """One line of ``rlpipe watch --json`` (docs/cli.md, "watch --json"): where the run is now."""
    from rlpipe.core.runs.record import now

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
