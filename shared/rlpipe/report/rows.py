"""The run report's rows: each attempt, each round, chip-hours per stage.

Split from the package's entry point (``rlpipe.report``) so each module has one job; pure: a run's
record (``core.runs.record.RunRecord``) in, rows out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import Failure, RunRecord
from rlpipe.core.timestamps import parse_rfc3339
from rlpipe.report.charts import (
    FAILURE_CLASSES,
    RoundMark,
    finite,
)

TEMPLATE = "report_template.html.j2"
STAGE_ORDER = ("convert", "train", "export", "publish")
NO_EVALUATION = "no evaluation recorded"
NO_TPU = "no TPU"
NOT_RECORDED = "not recorded"
_DONE_PHASES = {"succeeded": "succeeded", "failed": "failed", "stopped": "stopped"}
_ENDED_PHASES = frozenset({"cancelled", "superseded", "deleted"})
_TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "stopped"})
_ENDS = _TERMINAL_STATES | {"gated"}
_STATE_KEY = {
    "succeeded": "succeeded",
    "failed": "permanent",
    "cancelled": "cancelled",
    "gated": "gated",
    "stopped": "stopped",
}
_NOT_ID = re.compile(r"[^A-Za-z0-9_-]+")
_EVAL_FIELDS = ("corr", "total", "accuracy", "partial_accuracy", "format_accuracy", "mean_reward")
# A conversion's attempt directory ends in ``<run_id>-a<attempt>/`` (core.layout.ConversionCache).
_CONVERTED_BY = re.compile(r"/([A-Za-z0-9_-]+)-a([0-9]+)/?$")
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
# What the publisher program's receipt may say once the commit is on the Hub (core.layout).
_PUBLISHED_OUTCOMES = frozenset({"published", "already-published"})
_SOURCES = {
    "gcs": "a request file in the requests bucket",
    "pubsub": "a message on the requests topic",
    "upstream": "a new upstream release on the Hub (the watch list)",
    "cli": "rlpipe submit",
}


@dataclass(frozen=True)
class AttemptRow:
    stage: str
    attempt: int
    round: int
    workload: str
    phase: str
    outcome: str  # succeeded | failed | running | cancelled
    key: str  # colour: the failure class of a failed attempt, else the outcome
    failure_class: str | None
    reason: str | None
    resume_step: int | None
    launched_at: str
    finished_at: str
    duration: str
    chip_hours: float | None
    on_tpu: bool | None  # None: the record does not say where the stage ran
    start: datetime | None
    end: datetime | None

    @property
    def gid(self) -> str:
        return _NOT_ID.sub("_", f"attempt-{self.stage}-{self.attempt}")

    @property
    def name(self) -> str:
        return f"{self.stage} #{self.attempt}"

    @property
    def chips(self) -> str:
        """The chip-hours cell: a CPU pod holds no chip, which is not the same as nothing recorded."""
        if self.on_tpu is False and not self.chip_hours:
            return NO_TPU
        return NOT_RECORDED if self.chip_hours is None else f"{self.chip_hours:.2f}"


@dataclass(frozen=True)
class CacheHit:
    """The convert stage skipped: plan found a finished conversion in the cache and the run loaded
    it (``lineage.conversion_cache_hit``), so no convert attempt ran. A row of its own on the
    timeline and in its table, so the run's first bar is never an unexplained "train"."""

    at: (
        datetime | None
    )  # where the skip shows: when the next stage launched (the ledger keeps no time of the plan)
    maker: tuple[str, int] | None  # the run and convert attempt whose conversion was loaded
    uri: str | None  # the converted checkpoint loaded

    @property
    def source(self) -> str:
        if self.maker is None:
            return "an earlier conversion of the same repo, sha, flags and image"
        return f"run {self.maker[0]}'s conversion (its convert #{self.maker[1]})"


@dataclass(frozen=True)
class StageHours:
    stage: str
    on_tpu: bool | None
    hours: float
    unknown: int  # attempts on TPU (or of unknown placement) that recorded no chip-hours

    @property
    def where(self) -> str:
        return {True: "TPU slice", False: "CPU pool", None: "-"}[self.on_tpu]

    @property
    def text(self) -> str:
        return NO_TPU if self.on_tpu is False and not self.hours else f"{self.hours:.2f}"


@dataclass(frozen=True)
class RoundRow:
    """One round of the run: round 1 is the original request, each later one a retry."""

    number: int
    started_at: str
    start: datetime | None
    source: str | None  # round 1: what the request came as
    by: str | None  # a retry: the name the person gave
    caller: str | None  # a retry: the identity Google verified on the call (control/adapters/callers.py)
    reason: str
    from_stage: str
    ended: str  # how this round ended (the next round's record of it, or the run's state now)
    training: str  # where training started or resumed in this round
    attempts: str
    chip_hours: float | None

    @property
    def who(self) -> str:
        if self.number == 1:
            return self.source or "-"
        return f"retry by {self.by or 'an unnamed person'}"

    @property
    def asked(self) -> str:
        """Both names: the one a person gave can be anything, the verified caller cannot."""
        if self.number == 1:
            return self.who
        return self.who + (
            f" (verified caller {self.caller})" if self.caller else " (no verified caller recorded)"
        )


# ---- reading the record ---------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _time(value: Any) -> datetime | None:
    """A ledger timestamp (``...Z``, microseconds) or any RFC 3339 one; None when unreadable."""
    return parse_rfc3339(value)


def _show_time(value: Any, *, zone: bool = True) -> str:
    """A ledger time as the page shows it; ``zone=False`` in table columns whose header says UTC
    (one line each, so the table stays within the page)."""
    parsed = _time(value)
    if parsed is not None:
        return parsed.strftime("%Y-%m-%d %H:%M:%S" + (" UTC" if zone else ""))
    return str(value) if value else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _outcome(phase: str, finished: bool, failure_class: str | None, run_ended: bool) -> str:
    if phase in _DONE_PHASES:
        return _DONE_PHASES[phase]
    if phase in _ENDED_PHASES:
        return "cancelled"
    if finished:
        return "failed" if failure_class else "cancelled"
    # Launched, queued or running: still going, unless the run has ended around it.
    return "cancelled" if run_ended else "running"


def on_tpu(stage: str, placement: str | None) -> bool | None:
    """Whether a stage's pods hold TPU chips: training always; conversion and export only in
    ``tpu-slice`` placement (``cpu`` runs them on the CPU pool); publish never (a CPU Job). None
    when the record does not say, so an unknown placement is never reported as "no TPU"."""
    if stage == "train":
        return True
    if stage == "publish":
        return False
    if stage in ("convert", "export") and placement in ("cpu", "tpu-slice"):
        return placement == "tpu-slice"
    return None


def attempt_rows(record: RunRecord, now: datetime) -> list[AttemptRow]:
    """Every attempt, in stage order then attempt number, with its outcome, round and time span."""
    run_ended = record.state in _TERMINAL_STATES
    run_end = _time(record.updated_at) or now
    placement = recorded.request(record.request).placement
    rows = []
    for a in record.attempts:
        stage, phase = a.stage, a.phase or "launched"
        failure_class = a.failure_class or None
        start, end = _time(a.launched_at), _time(a.finished_at)
        outcome = _outcome(phase, end is not None, failure_class, run_ended)
        if end is None and start is not None:
            end = now if outcome == "running" else max(run_end, start)
        if outcome == "failed":
            key = failure_class if failure_class in FAILURE_CLASSES else "failed"
        else:
            key = outcome
        rows.append(
            AttemptRow(
                stage=stage,
                attempt=a.attempt,
                round=a.round,  # ledgers from before rounds: all round 1 (the model's default)
                workload=a.workload,
                phase=phase,
                outcome=outcome,
                key=key,
                failure_class=failure_class,
                reason=a.reason or None,
                resume_step=a.resume_step,
                launched_at=_show_time(a.launched_at, zone=False),
                finished_at=_show_time(a.finished_at, zone=False)
                if a.finished_at
                else ("now (running)" if outcome == "running" else "-"),
                duration=_duration((end - start).total_seconds() if start and end else None),
                chip_hours=finite(a.chip_hours),
                on_tpu=on_tpu(stage, placement),
                start=start,
                end=end,
            )
        )
    order = {stage: i for i, stage in enumerate(STAGE_ORDER)}
    rows.sort(key=lambda r: (order.get(r.stage, len(order)), r.stage, r.attempt))
    return rows


def converted_by(uri: Any) -> tuple[str, int] | None:
    """The run and attempt whose conversion a converted URI names (its attempt directory)."""
    found = _CONVERTED_BY.search(uri) if isinstance(uri, str) else None
    return (found.group(1), int(found.group(2))) if found else None


def cache_hit(record: RunRecord, rows: Sequence[AttemptRow]) -> CacheHit | None:
    """The convert stage the run skipped for a cached conversion; None when it converted (a
    later round that reuses its own conversion is told by ``facts.conversion``) or found none.

    Placed at the launch of the first attempt after every convert attempt (the skip happened
    just before it), else at none: the row is still listed, without a mark on the timeline."""
    lin = record.lineage
    convert = [r for r in rows if r.stage == "convert"]
    if lin.conversion_cache_hit is not True or any(r.outcome == "succeeded" for r in convert):
        return None
    tried = max((r.start for r in convert if r.start is not None), default=None)
    after = [
        r.start
        for r in rows
        if r.stage != "convert" and r.start is not None and (tried is None or r.start >= tried)
    ]
    return CacheHit(
        at=min(after) if after else None,
        maker=converted_by(lin.converted_uri),
        uri=lin.converted_uri or None,
    )


def round_count(record: RunRecord, rows: Sequence[AttemptRow]) -> int:
    """How many rounds the run has had: the record's own count, never fewer than its evidence."""
    return max([record.round, *(r.round for r in rows), *(r.round for r in record.rounds)])


def _failure_text(failure: Failure | recorded.FailureRecorded) -> str:
    where = ""
    if failure.stage:
        where = f" in {failure.stage}"
        if failure.attempt:
            where += f" attempt {failure.attempt}"
    tag = f"[{failure.tag}] " if failure.tag else ""
    # a person ended it (rlpipe cancel): the identity Google verified on that call
    who = f" (verified caller {failure.caller})" if failure.caller else ""
    return f"{tag}{failure.message or 'no message'}{where}{who}"


def _ended(state: str, failure: Failure | recorded.FailureRecorded | None) -> str:
    return f"{state}: {_failure_text(failure)}" if failure else state


def _training(number: int, rows: Sequence[AttemptRow]) -> str:
    """Where training started or resumed in a round; or why it did not run."""
    train = sorted((r for r in rows if r.stage == "train" and r.round == number), key=lambda r: r.attempt)
    if train:
        first = train[0]
        if first.resume_step:
            return f"train #{first.attempt} resumed from step {first.resume_step}"
        return f"train #{first.attempt} started from step 0"
    done = [r for r in rows if r.stage == "train" and r.round < number and r.outcome == "succeeded"]
    if done:
        return f"not run again: training finished in round {done[-1].round} (train #{done[-1].attempt})"
    return "no training in this round"


def rounds(record: RunRecord, rows: Sequence[AttemptRow]) -> list[RoundRow]:
    """Round 1 (the request) and every retry: when, who asked (the name given and the verified
    caller), why, from which stage, how it ended, where training resumed and what it cost."""
    total = round_count(record, rows)
    retries = {r.round: r for r in record.rounds}
    out = []
    for number in range(1, total + 1):
        retry = retries.get(number)
        if retry is None:  # round 1, or a round whose retry was not recorded
            started = record.created_at if number == 1 else None
            reason = "the original request" if number == 1 else "no reason recorded"
            from_stage = "-" if number == 1 else "where it stopped (done stages skipped)"
        else:
            started = retry.at
            reason = retry.reason or "no reason recorded"
            from_stage = retry.from_stage or "where it stopped (done stages skipped)"
        later = retries.get(number + 1)
        if later is not None:
            ended = _ended(later.previous_state or "?", recorded.failure(later.previous_failure))
        elif number == total:
            state = record.state
            ended = _ended(state, record.failure) if state in _ENDS else f"still going ({state})"
        else:
            ended = "-"
        mine = [r for r in rows if r.round == number]
        hours = [r.chip_hours for r in mine if r.chip_hours is not None]
        out.append(
            RoundRow(
                number=number,
                started_at=_show_time(started, zone=False),
                start=_time(started),
                source=_SOURCES[record.source.kind] if number == 1 else None,
                by=(retry.by or None) if retry else None,
                caller=(retry.caller or None) if retry else None,
                reason=reason,
                from_stage=from_stage,
                ended=ended,
                training=_training(number, rows),
                attempts=", ".join(r.name for r in sorted(mine, key=_launch_order)) or "none",
                chip_hours=sum(hours) if hours else None,
            )
        )
    return out


def _launch_order(row: AttemptRow) -> tuple[bool, float]:
    return (row.start is None, row.start.timestamp() if row.start else 0.0)


def round_marks(round_rows: Sequence[RoundRow], rows: Sequence[AttemptRow]) -> list[RoundMark]:
    """Where each retry starts on the timeline, and the idle time before it (the run had ended)."""
    marks = []
    for rr in round_rows:
        if rr.number == 1 or rr.start is None:
            continue
        before = [r.end for r in rows if r.round < rr.number and r.end is not None and r.end <= rr.start]
        marks.append(
            RoundMark(
                gid=f"round-{rr.number}",
                at=rr.start,
                label=f"round {rr.number}: {rr.who}",
                idle_from=max(before) if before else None,
            )
        )
    return marks


def chip_hours(rows: Sequence[AttemptRow]) -> dict[str, Any]:
    """Chip-hours per stage and in total, and how many attempts that could have held chips
    recorded none (a stage on the CPU pool holds none, so its attempts are not "unrecorded")."""
    stages: dict[str, StageHours] = {}
    for row in rows:
        known = stages.get(row.stage, StageHours(row.stage, row.on_tpu, 0.0, 0))
        missing = row.chip_hours is None and row.on_tpu is not False
        stages[row.stage] = StageHours(
            row.stage, row.on_tpu, known.hours + (row.chip_hours or 0.0), known.unknown + missing
        )
    return {
        "stages": list(stages.values()),
        "total": sum(s.hours for s in stages.values()),
        "unknown": sum(s.unknown for s in stages.values()),
        "cpu": [s.stage for s in stages.values() if s.on_tpu is False],
    }
