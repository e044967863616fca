"""``rlpipe report RUN [-o FILE]``: one self-contained HTML page per run, telling its whole story.

The page holds the run's key facts (state, rounds, where it was published and at which commit),
the rounds (each retry with its reason, who asked, how the round before it ended and where
training resumed), the stage timeline (every attempt, coloured by outcome and failure class, with
each retry marked where it started, so a retry is never an unexplained gap), the reward curve
(intermediate evaluations as one series per attempt, pre at step 0 and post at the final step), the
lineage (with where the converted checkpoint came from, round by round), chip-hours per stage and
attempt (a stage on the CPU pool says "no TPU") and the gate's result. It loads nothing from the
network: the charts are matplotlib SVG inlined in the page (``rlpipe.cli.charts``), the styles sit
in the page, and there is no script.

``render_report`` is pure (a ledger record as a dict in, HTML out; ``now`` and the publish receipt
are parameters), so it takes records of every ledger version: rounds, per-attempt rounds, chip-hours
and evaluation attempts are read defensively. Run data is user-controlled (labels, reasons,
messages), so the Jinja2 template autoescapes everything; only the SVG that matplotlib wrote is
marked safe.

Heavy imports (Jinja2, matplotlib, the ledger, the storage client) happen when a report is
rendered, never when the CLI parser is built; this module is imported only by the CLI.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlpipe.cli.charts import (
    COLOURS,
    FAILURE_CLASSES,
    Bar,
    Curve,
    Point,
    Resume,
    RoundMark,
    Series,
    finite,
    fmt_accuracy,
    fmt_reward,
)

TEMPLATE = "report_template.html.j2"
STAGE_ORDER = ("convert", "train", "export", "publish")
NO_EVALUATION = "no evaluation recorded"
NO_TPU = "no TPU"
NOT_RECORDED = "not recorded"
_DONE_PHASES = {"succeeded": "succeeded", "failed": "failed"}
_ENDED_PHASES = frozenset({"cancelled", "superseded", "deleted"})
_TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
_ENDS = _TERMINAL_STATES | {"gated"}
_STATE_KEY = {"succeeded": "succeeded", "failed": "permanent", "cancelled": "cancelled", "gated": "gated"}
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
    caller: str | None  # a retry: the identity Google verified on the call (control/callers.py)
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


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _time(value: Any) -> datetime | None:
    from rlpipe.control.ledger import parse_time

    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _show_time(value: Any) -> str:
    parsed = _time(value)
    if parsed is not None:
        return parsed.strftime("%Y-%m-%d %H:%M:%S UTC")
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


def on_tpu(stage: str, request: dict[str, Any]) -> bool | None:
    """Whether a stage's pods hold TPU chips: training always; conversion and export only in
    ``tpu-slice`` placement (``cpu`` runs them on the CPU pool); publish never (a CPU Job). None
    when the record does not say, so an unknown placement is never reported as "no TPU"."""
    if stage == "train":
        return True
    if stage == "publish":
        return False
    placement = request.get("placement")
    if stage in ("convert", "export") and placement in ("cpu", "tpu-slice"):
        return placement == "tpu-slice"
    return None


def attempt_rows(record: dict[str, Any], now: datetime) -> list[AttemptRow]:
    """Every attempt, in stage order then attempt number, with its outcome, round and time span."""
    run_ended = record.get("state") in _TERMINAL_STATES
    run_end = _time(record.get("updated_at")) or now
    request = _dict(record.get("request"))
    rows = []
    for raw in record.get("attempts") or []:
        a = _dict(raw)
        stage, phase = str(a.get("stage") or "?"), str(a.get("phase") or "launched")
        failure_class = a.get("failure_class") or None
        start, end = _time(a.get("launched_at")), _time(a.get("finished_at"))
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
                attempt=_int(a.get("attempt")) or 0,
                round=_int(a.get("round")) or 1,  # ledgers from before rounds: all round 1
                workload=str(a.get("workload") or ""),
                phase=phase,
                outcome=outcome,
                key=key,
                failure_class=str(failure_class) if failure_class else None,
                reason=str(a["reason"]) if a.get("reason") else None,
                resume_step=_int(a.get("resume_step")),
                launched_at=_show_time(a.get("launched_at")),
                finished_at=_show_time(a.get("finished_at"))
                if a.get("finished_at")
                else ("now (running)" if outcome == "running" else "-"),
                duration=_duration((end - start).total_seconds() if start and end else None),
                chip_hours=finite(a.get("chip_hours")),
                on_tpu=on_tpu(stage, request),
                start=start,
                end=end,
            )
        )
    order = {stage: i for i, stage in enumerate(STAGE_ORDER)}
    rows.sort(key=lambda r: (order.get(r.stage, len(order)), r.stage, r.attempt))
    return rows


def round_count(record: dict[str, Any], rows: Sequence[AttemptRow]) -> int:
    """How many rounds the run has had: the record's own count, never fewer than its evidence."""
    numbers = [_int(record.get("round")) or 1, *(r.round for r in rows)]
    numbers += [_int(_dict(r).get("round")) or 1 for r in record.get("rounds") or []]
    return max(numbers)


def _failure_text(failure: dict[str, Any]) -> str:
    where = ""
    if failure.get("stage"):
        where = f" in {failure['stage']}"
        if _int(failure.get("attempt")):
            where += f" attempt {failure['attempt']}"
    tag = f"[{failure['tag']}] " if failure.get("tag") else ""
    return f"{tag}{failure.get('message') or 'no message'}{where}"


def _ended(state: str, failure: dict[str, Any]) -> str:
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


def rounds(record: dict[str, Any], rows: Sequence[AttemptRow]) -> list[RoundRow]:
    """Round 1 (the request) and every retry: when, who asked (the name given and the verified
    caller), why, from which stage, how it ended, where training resumed and what it cost."""
    total = round_count(record, rows)
    recorded = {
        n: r
        for r in (_dict(raw) for raw in record.get("rounds") or [])
        if (n := _int(r.get("round"))) is not None
    }
    source = _dict(record.get("source"))
    out = []
    for number in range(1, total + 1):
        raw = recorded.get(number, {})
        if number == 1:
            started, reason, from_stage = record.get("created_at"), "the original request", "-"
        else:
            started = raw.get("at")
            reason = str(raw.get("reason") or "no reason recorded")
            from_stage = str(raw.get("from_stage") or "where it stopped (done stages skipped)")
        later = recorded.get(number + 1)
        if later is not None:
            ended = _ended(str(later.get("previous_state") or "?"), _dict(later.get("previous_failure")))
        elif number == total:
            state = str(record.get("state") or "?")
            ended = (
                _ended(state, _dict(record.get("failure"))) if state in _ENDS else f"still going ({state})"
            )
        else:
            ended = "-"
        mine = [r for r in rows if r.round == number]
        hours = [r.chip_hours for r in mine if r.chip_hours is not None]
        out.append(
            RoundRow(
                number=number,
                started_at=_show_time(started),
                start=_time(started),
                source=_SOURCES.get(str(source.get("kind")), _str(source.get("kind")))
                if number == 1
                else None,
                by=_str(raw.get("by")),
                caller=_str(raw.get("caller")),
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


def _label(attempt: int | None, train_rounds: dict[int, int], many_rounds: bool) -> str:
    if attempt is None:
        return "attempt not recorded"
    where = train_rounds.get(attempt)
    return f"attempt {attempt}" + (f" (round {where})" if many_rounds and where else "")


def _point(raw: Any, step: int | None) -> Point | None:
    data = _dict(raw)
    if step is None or not data:
        return None
    reward, accuracy = finite(data.get("mean_reward")), finite(data.get("accuracy"))
    if reward is None and accuracy is None:
        return None
    return Point(step, reward, accuracy, _int(data.get("attempt")))


def reward_curve(record: dict[str, Any], now: datetime | None = None) -> Curve | None:
    """Intermediate evaluations (one series per attempt), pre at step 0 and post at the final
    step; None when there are none.

    A resumed attempt evaluates again at steps an earlier attempt reached: both points are kept,
    each in its attempt's series (entries from ledgers that did not record the attempt form their
    own series). The final step is ``results.final_step``, never left of the last intermediate
    evaluation (post runs after training); without either, the lineage's final step."""
    results = _dict(record.get("results"))
    intermediate = sorted(
        (p for p in (_point(e, _int(_dict(e).get("step"))) for e in results.get("intermediate") or []) if p),
        key=lambda p: (p.step, -1 if p.attempt is None else p.attempt),
    )
    steps = [
        s for s in (_int(results.get("final_step")), intermediate[-1].step if intermediate else None) if s
    ]
    final = max(steps) if steps else _int(_dict(record.get("lineage")).get("final_step"))
    pre = _point(results.get("pre"), 0)
    post = _point(results.get("post"), final if final is not None else 0)
    if not intermediate and pre is None and post is None:
        return None
    rows = attempt_rows(record, now or datetime.now(UTC))
    train = {r.attempt: r.round for r in rows if r.stage == "train"}
    many = round_count(record, rows) > 1
    attempts = sorted({p.attempt for p in intermediate}, key=lambda a: -1 if a is None else a)
    series = [
        Series(
            gid="unlabelled" if a is None else f"a{a}",
            label=_label(a, train, many),
            points=[p for p in intermediate if p.attempt == a],
        )
        for a in attempts
    ]
    resumes = [
        Resume(step=r.resume_step, attempt=r.attempt, label=f"{_label(r.attempt, train, many)} resumed")
        for r in rows
        if r.stage == "train" and r.resume_step
    ]
    return Curve(intermediate=intermediate, pre=pre, post=post, series=series, resumes=resumes)


def evaluations(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The pre and post evaluations as table rows (every field train_rl prints)."""
    results = _dict(record.get("results"))
    rows = []
    for name in ("pre", "post"):
        data = _dict(results.get(name))
        if not data:
            continue
        row: dict[str, Any] = {"name": name}
        for field in _EVAL_FIELDS:
            value = finite(data.get(field))
            if value is None:
                row[field] = "-"
            elif field == "mean_reward":
                row[field] = fmt_reward(value)
            elif field.endswith("accuracy"):
                row[field] = fmt_accuracy(value)
            else:
                row[field] = f"{value:g}"
        rows.append(row)
    pre, post = (finite(_dict(results.get(n)).get("mean_reward")) for n in ("pre", "post"))
    if pre is not None and post is not None:
        rows.append(
            {"name": "change", **dict.fromkeys(_EVAL_FIELDS, ""), "mean_reward": f"{post - pre:+.4f}"}
        )
    return rows


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


def converted_by(uri: Any) -> tuple[str, int] | None:
    """The run and attempt whose conversion a converted URI names (its attempt directory)."""
    found = _CONVERTED_BY.search(uri) if isinstance(uri, str) else None
    return (found.group(1), int(found.group(2))) if found else None


def conversion(record: dict[str, Any], rows: Sequence[AttemptRow]) -> str:
    """Where the converted checkpoint came from, across rounds.

    ``lineage.conversion_cache_hit`` is what the latest round's plan found, so on its own it misleads:
    a run that converted in round 1 finds its own conversion in the cache in round 2, and a report
    read between the two says "no" for a round that converted nothing. This says which attempt of
    which run converted it, and what each later round did."""
    lin = _dict(record.get("lineage"))
    run_id = str(record.get("run_id") or "")
    hit = lin.get("conversion_cache_hit")
    many = round_count(record, rows) > 1
    maker = converted_by(lin.get("converted_uri"))
    convert = [r for r in rows if r.stage == "convert"]
    done = [r for r in convert if r.outcome == "succeeded"]
    if done:
        mine = next((r for r in done if maker == (run_id, r.attempt)), done[-1])
        text = f"converted by this run: convert #{mine.attempt}" + (f" in round {mine.round}" if many else "")
        if maker is not None and maker[0] != run_id:
            text += (
                f"; run {maker[0]}'s conversion (attempt {maker[1]}) reached the cache first, "
                "and it is the one training loads"
            )
        later = list(range(mine.round + 1, round_count(record, rows) + 1))
        if later:
            names = ", ".join(str(n) for n in later)
            text += f"; {'round' if len(later) == 1 else 'rounds'} {names} reused it (no conversion)"
        return text
    if hit is True:
        if maker is not None and maker[0] != run_id:
            return f"cache hit: loaded run {maker[0]}'s conversion (its convert #{maker[1]}); this run converted nothing"
        return "cache hit: loaded an earlier conversion of the same repo, sha, flags and image; this run converted nothing"
    if convert:
        if any(r.outcome == "running" for r in convert):
            return f"converting: {_plural(len(convert), 'attempt')} so far"
        return f"not converted: {_plural(len(convert), 'convert attempt')}, none succeeded"
    if hit is False:
        return "cache miss: not converted yet"
    return "-"


def lineage(record: dict[str, Any], rows: Sequence[AttemptRow]) -> list[tuple[str, str]]:
    lin, request = _dict(record.get("lineage")), _dict(record.get("request"))
    items = [
        ("Hugging Face repo", lin.get("hf_repo") or request.get("hf_repo")),
        ("revision", lin.get("hf_revision") or request.get("hf_revision")),
        ("pinned sha", lin.get("hf_sha")),
        ("image", lin.get("image") or request.get("image")),
        ("conversion key", lin.get("conversion_key")),
        ("conversion", conversion(record, rows)),
        ("converted checkpoint", lin.get("converted_uri")),
        ("checkpoint uri", lin.get("checkpoint_uri")),
        ("export uri", lin.get("export_uri")),
        ("published to", lin.get("published_to")),
        ("final step", lin.get("final_step")),
    ]
    return [(label, "-" if value is None or value == "" else str(value)) for label, value in items]


def _where(record: dict[str, Any]) -> tuple[str, str] | None:
    """The Hub repository and branch the run publishes to (the lineage's, else the request's)."""
    published_to = _str(_dict(record.get("lineage")).get("published_to"))
    if published_to and "@" in published_to:
        repo, _, branch = published_to.rpartition("@")
        return repo, branch
    spec = _dict(_dict(record.get("request")).get("publish"))
    if spec.get("repo"):
        return str(spec["repo"]), str(spec.get("branch") or "main")
    return None


def _receipt_commit(receipt: Any, record: dict[str, Any], where: tuple[str, str]) -> tuple[str, str] | None:
    """The commit and outcome of a receipt that is this run's, for this repo and branch. The publish
    Job writes the receipt, so only a hex commit and a known outcome are taken from it."""
    data = _dict(receipt)
    commit = data.get("commit")
    if (data.get("repo"), data.get("branch"), data.get("run_id")) != (*where, record.get("run_id")):
        return None
    if data.get("outcome") not in _PUBLISHED_OUTCOMES or not isinstance(commit, str):
        return None
    return (commit, str(data["outcome"])) if _COMMIT.fullmatch(commit) else None


def published(
    record: dict[str, Any], rows: Sequence[AttemptRow], receipt: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Where the model was published and at which commit, or None for a run that does not publish.

    The commit is the ledger's (``lineage.published_commit``) when it has one, else, once a publish
    attempt succeeded, the publish receipt's (``runs/<id>/publish/receipt.json`` in the artifacts
    bucket, which the done rule checked), when the caller read it."""
    where = _where(record)
    if where is None:
        return None
    attempts = [r for r in rows if r.stage == "publish"]
    if any(r.outcome == "succeeded" for r in attempts):
        status = "published"
    elif any(r.outcome == "running" for r in attempts):
        status = "publishing"
    elif attempts:
        status = "not published: every publish attempt failed or was cancelled"
    else:
        status = "not published yet"
    commit, source, outcome = _str(_dict(record.get("lineage")).get("published_commit")), "the ledger", None
    if commit is not None and not _COMMIT.fullmatch(commit):
        commit = None
    # A receipt before the publish attempt's success was read is not yet the stage's word.
    if commit is None and status == "published" and (found := _receipt_commit(receipt, record, where)):
        commit, outcome = found
        source = "the publish receipt"
    return {
        "repo": where[0],
        "branch": where[1],
        "status": status,
        "done": status == "published",
        "commit": commit,
        "source": source if commit else None,
        "outcome": outcome,
    }


def gate(record: dict[str, Any]) -> dict[str, Any] | None:
    """The gate's result, reasons and override, or None when no gate was evaluated."""
    raw = record.get("gate")
    if not isinstance(raw, dict):
        return None
    passed = raw.get("passed")
    override = _dict(raw.get("override"))
    return {
        "status": "passed" if passed is True else "failed" if passed is False else "pending",
        "reasons": [str(r) for r in raw.get("reasons") or []],
        "evaluated_at": _show_time(raw.get("evaluated_at")),
        "override": {
            "by": str(override.get("by") or "-"),
            "at": _show_time(override.get("at")),
            "reason": str(override.get("reason") or "-"),
        }
        if override
        else None,
    }


# ---- rendering ------------------------------------------------------------------------------------


@functools.cache
def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,  # every value from the run is escaped; only the charts are marked safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_report(
    record: dict[str, Any], *, now: datetime | None = None, receipt: dict[str, Any] | None = None
) -> str:
    """The report page for one ledger record (``RunRecord.model_dump()``), as HTML text.

    ``receipt`` is the run's publish receipt, when the caller read it: the commit comes from it
    only when the ledger does not record one."""
    from markupsafe import Markup

    from rlpipe.cli import charts

    now = now or datetime.now(UTC)
    rows = attempt_rows(record, now)
    round_rows = rounds(record, rows)
    many = len(round_rows) > 1
    bars = [
        Bar(
            f"{r.name} · round {r.round}" if many else r.name,
            r.gid,
            r.start,
            r.end,
            r.key,
            r.outcome == "running",
        )
        for r in rows
        if r.start is not None and r.end is not None
    ]
    marks = round_marks(round_rows, rows)
    curve = reward_curve(record, now)
    request, failure = _dict(record.get("request")), _dict(record.get("failure"))
    labels = _dict(request.get("labels"))
    state = str(record.get("state") or "?")
    post = finite(_dict(_dict(record.get("results")).get("post")).get("mean_reward"))
    pre = finite(_dict(_dict(record.get("results")).get("pre")).get("mean_reward"))
    return str(
        _environment()
        .get_template(TEMPLATE)
        .render(
            run_id=str(record.get("run_id") or "?"),
            state=state,
            state_key=_STATE_KEY.get(state, "running"),
            stage=record.get("stage"),
            attempt=record.get("attempt"),
            model=request.get("model"),
            created_at=_show_time(record.get("created_at")),
            updated_at=_show_time(record.get("updated_at")),
            generated_at=now.strftime("%Y-%m-%d %H:%M:%S UTC"),
            failure={k: failure.get(k) for k in ("tag", "message", "stage", "attempt")} if failure else None,
            labels=sorted((str(k), str(v)) for k, v in labels.items()),
            colours=COLOURS,
            attempts=rows,
            rounds=round_rows,
            retries=len(round_rows) - 1,
            timeline_svg=Markup(charts.timeline_svg(bars, now, marks)) if bars else None,
            reward_svg=Markup(charts.reward_svg(curve)) if curve else None,
            curve=curve,
            result={
                "post": fmt_reward(post),
                "change": f"{post - pre:+.4f}" if pre is not None else None,
            }
            if post is not None
            else None,
            evaluations=evaluations(record),
            no_evaluation=NO_EVALUATION,
            fmt_reward=fmt_reward,
            fmt_accuracy=fmt_accuracy,
            chip_hours=chip_hours(rows),
            lineage=lineage(record, rows),
            published=published(record, rows, receipt),
            gate=gate(record),
            gate_spec={k: v for k, v in _dict(request.get("gate")).items() if v is not None},
        )
    )


def write_report(
    record: dict[str, Any], path: Path, *, now: datetime | None = None, receipt: dict[str, Any] | None = None
) -> Path:
    """Render the report and write it to ``path`` (UTF-8); returns the path."""
    path = Path(path)
    html = render_report(record, now=now, receipt=receipt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path


# ---- the subcommand -------------------------------------------------------------------------------


def read_receipt(settings: Any, record: dict[str, Any]) -> dict[str, Any] | None:
    """The run's publish receipt from the artifacts bucket (operators may read it), only when the
    report needs it: a publish attempt succeeded and the ledger records no commit. Best effort: a
    receipt that cannot be read leaves the commit unknown, and the page says so."""
    lineage_commit = _dict(record.get("lineage")).get("published_commit")
    done = any(
        _dict(a).get("stage") == "publish" and _dict(a).get("phase") == "succeeded"
        for a in record.get("attempts") or []
    )
    if lineage_commit or not done:
        return None
    try:
        from rlpipe.control.blobstore import BlobStore, make_client
        from rlpipe.core.layout import RunLayout

        store = BlobStore(make_client(settings.project), settings.artifacts_bucket)
        data = store.read(RunLayout(settings.artifacts_bucket, str(record["run_id"])).publish_receipt).json()
    except Exception as exc:  # the report is still worth writing without the commit
        print(
            f"note: could not read the publish receipt ({type(exc).__name__}); commit not shown",
            file=sys.stderr,
        )
        return None
    return data if isinstance(data, dict) else None


def cmd_report(
    args: argparse.Namespace,
    settings: Callable[[], Any],
    ledger: Callable[[Any], Any],
    receipt: Callable[[Any, dict[str, Any]], dict[str, Any] | None] = read_receipt,
) -> int:
    chosen = settings()
    record = ledger(chosen).get(args.run)
    if record is None:
        print(f"no run {args.run}", file=sys.stderr)
        return 1
    data = record.model_dump(mode="json")
    try:
        path = write_report(
            data, Path(args.output or f"{args.run}-report.html"), receipt=receipt(chosen, data)
        )
    except ModuleNotFoundError as exc:  # the CLI extra is not installed
        print(f"rlpipe report needs {exc.name}: pip install 'rlpipe[cli]'", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def register(
    subparsers: Any,
    *,
    settings: Callable[[], Any],
    ledger: Callable[[Any], Any],
    receipt: Callable[[Any, dict[str, Any]], dict[str, Any] | None] = read_receipt,
) -> None:
    """Add ``report`` to the ``rlpipe`` parser; ``settings`` picks the deployment, ``ledger(settings)``
    opens its ledger (``cli.main._settings`` and ``cli.main._ledger``), ``receipt(settings, record)``
    reads the publish receipt when the ledger lacks the commit."""
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML page for a run: rounds, timeline, rewards, lineage, gate, publish",
    )
    p.add_argument("run")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (default RUN-report.html)")
    p.set_defaults(func=lambda args: cmd_report(args, settings, ledger, receipt))
