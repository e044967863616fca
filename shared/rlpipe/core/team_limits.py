"""A team's own limits (``core.teams.Limits``), decided from one document per team: the team's usage.

Why a document of our own and not Kueue: Kueue sees workloads, not runs. It cannot tell that a run
waiting between two stages still needs its slice, that six children belong to one team's sweeps,
or what the team's runs held last week. The control plane can, from its ledgers; this module is
the rule, ``control.lifecycle.team_usage`` the store.

Why one document and not a count of the ledgers at every plan: a count lists every run in the
state bucket (all teams, all time) and reads each ledger, which costs seconds per plan at a few
thousand runs and is not race-safe anyway (two plans count the same N and both go on). The
document, ``teams/<team>/usage.json`` in the state bucket, is an index the stage function keeps
under compare-and-swap: every admission is one write on its generation, so two plans at the limit
cannot both win. It holds

* ``holders``: the team's runs admitted at plan that have not been seen to end, each with the
  chip-hours it may hold at most (its *reservation*) and whether it is a sweep's child;
* ``waiting``: the runs queued for a slot, in arrival order (first come, first admitted);
* ``used``: chip-hours of the team's ended holdings, per run, for the current calendar month (UTC),
  and ``earlier``: the totals of the months before.

A run's **reservation** is what it can hold at most: its chips times the deadlines of the stages
that run on its TPU slice (train always; convert and export in ``tpu-slice`` placement). The
deadlines bound each stage's round (``core.failure_rules.attempt``), and chip-hours count only
while pods run (``core.chip_hours``), so a run never holds more. Nothing else in a request says how
long it trains (``core.plan`` estimates hours only from a person's ``--step-seconds``). When the
run ends, its actual chip-hours replace the reservation.

The charge of the month: the ended holdings' chip-hours plus, for each run still holding, the larger
of its reservation and what it has held so far. A run is **refused** when even the certain part
(ended holdings plus what running runs have already held) leaves less than its reservation; it
**waits** when only the other runs' reservations stand in the way (they may end under them).
Pure: documents and facts in, decisions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlpipe.core import tpu
from rlpipe.core.runs.record import LEDGER_TIME, RunRecord, parse_time
from rlpipe.core.teams import Limits

# Earlier months kept in the document (visibility only; the limit reads the current month).
EARLIER_MONTHS_KEPT = 12


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Holder(_Model):
    """A run admitted at plan that has not been seen to end."""

    run_id: str
    sweep_child: bool = False
    since: str  # when it was admitted (ledger time): its holding's attempts are those launched since
    reserved: float  # the chip-hours it may hold at most (``reservation``)


class Waiter(_Model):
    """A run queued at plan for a slot; it keeps its place while its workflow keeps asking."""

    run_id: str
    sweep_child: bool = False
    since: str
    seen: str  # its last plan call: a waiter not seen for a while has gone (its workflow stopped)
    # What it waits for: a slot (it keeps its place in the queue), or the budget (it holds no place:
    # a run the budget cannot take yet must not keep the next run from a free slot).
    waits_for: Literal["slot", "budget"] = "slot"


class TeamUsage(_Model):
    """``teams/<team>/usage.json``: see the module's docstring."""

    team: str
    month: str  # YYYY-MM (UTC) of ``used``
    used: dict[str, float] = Field(default_factory=dict)  # run id → chip-hours its ended holdings held
    earlier: dict[str, float] = Field(default_factory=dict)  # YYYY-MM → chip-hours, before ``month``
    holders: list[Holder] = Field(default_factory=list)
    waiting: list[Waiter] = Field(default_factory=list)
    # Built from the ledgers when it did not exist yet (``seed``): when, and how many ledgers were read.
    seeded_at: str | None = None
    seeded_from: int | None = None
    seq: int = 0

    def used_this_month(self) -> float:
        return sum(self.used.values())

    def holder(self, run_id: str) -> Holder | None:
        return next((h for h in self.holders if h.run_id == run_id), None)


def month_of(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m")


def next_month(month: str) -> str:
    """``2026-12`` → ``2027-01``: when a month's budget starts afresh."""
    year, mon = (int(p) for p in month.split("-"))
    return f"{year + mon // 12}-{mon % 12 + 1:02d}"


# ---- a request's reservation ---------------------------------------------------------------------


@dataclass(frozen=True)
class Reservation:
    """The chip-hours a run may hold at most, and how they were worked out."""

    chip_hours: float
    explained: str


class _Timeouts(BaseModel):
    model_config = ConfigDict(extra="ignore")
    convert: float
    train: float
    export: float


class _Tpu(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    slices: int


class _Asked(BaseModel):
    """What the reservation reads of a request (a run's ``record.request`` or a ``Request`` dump)."""

    model_config = ConfigDict(extra="ignore")
    tpu: _Tpu
    placement: str
    timeouts: _Timeouts


def reservation(request: Mapping[str, object]) -> Reservation:
    """Chips × the deadlines of the stages on the run's TPU: the most its pods can hold in a round.
    ``request``: a validated request's JSON form (``RunRecord.request``)."""
    asked = _Asked.model_validate(request)
    slice_chips = tpu.SHAPES[asked.tpu.type].chips
    train_chips = slice_chips * asked.tpu.slices
    parts = [(train_chips, asked.timeouts.train, "train")]
    if asked.placement == "tpu-slice":  # convert and export run on one slice (core.manifests.jobs)
        parts += [
            (slice_chips, asked.timeouts.convert, "convert"),
            (slice_chips, asked.timeouts.export, "export"),
        ]
    total = sum(chips * seconds for chips, seconds, _ in parts) / 3600
    explained = " + ".join(
        f"{chips} chips × {seconds / 3600:g} h of {stage}" for chips, seconds, stage in parts
    )
    return Reservation(round(total, 3), f"{explained} (its deadlines: timeouts.*)")


# ---- what a run's holding held -------------------------------------------------------------------


def holding_months(record: RunRecord, since: str | None, now: datetime) -> dict[str, float]:
    """Chip-hours the attempts of ``record`` launched at or after ``since`` held, by the month
    (UTC) each ended in (one not ended yet: now). ``since`` None: every attempt."""
    start = parse_time(since) if since else None
    months: dict[str, float] = {}
    for a in record.attempts:
        if not a.chip_hours or (start is not None and parse_time(a.launched_at) < start):
            continue
        ended = (
            parse_time(a.finished_at)
            if a.finished_at
            else (parse_time(record.updated_at) if record.terminal else now)
        )
        key = month_of(ended)
        months[key] = months.get(key, 0.0) + a.chip_hours
    return months


def held_so_far(record: RunRecord, since: str) -> float:
    start = parse_time(since)
    return sum(a.chip_hours or 0.0 for a in record.attempts if parse_time(a.launched_at) >= start)


# ---- the decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """One plan's request for a place: the run, whether it is a sweep's child, its reservation."""

    run_id: str
    sweep_child: bool
    reservation: Reservation


@dataclass(frozen=True)
class Observed:
    """What reading the holders' ledgers found (before the compare-and-swap): the holdings that
    ended (run gone or terminal: run id → chip-hours by month), and what the others held so far."""

    ended: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    held: Mapping[str, float] = field(default_factory=dict)


Outcome = Literal["admitted", "holding", "wait", "refused"]


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    reason: str | None = None  # why it waits or is refused (the words the run's record and the workflow show)
    # the numbers behind a budget decision (also what ``rlpipe plan`` shows)
    budget: Budget | None = None
    waits_for: Literal["slot", "budget"] | None = None


@dataclass(frozen=True)
class Budget:
    month: str
    limit: float
    used: float  # ended holdings this month
    running_held: float  # what the runs still holding have held so far
    running_reserved: float  # what they may still hold: Σ max(reserved, held)
    asked: float

    @property
    def left_certain(self) -> float:
        """What is left if every running run ended now."""
        return self.limit - self.used - self.running_held

    @property
    def left(self) -> float:
        """What is left once every running run's reservation is counted."""
        return self.limit - self.used - self.running_reserved


def roll_month(usage: TeamUsage, now: datetime) -> bool:
    """Start the calendar month ``now`` is in; → whether anything changed."""
    month = month_of(now)
    if usage.month == month:
        return False
    if usage.used:
        usage.earlier[usage.month] = round(usage.earlier.get(usage.month, 0.0) + usage.used_this_month(), 6)
    usage.earlier = dict(sorted(usage.earlier.items())[-EARLIER_MONTHS_KEPT:])
    usage.used, usage.month = {}, month
    return True


def settle(usage: TeamUsage, run_id: str, months: Mapping[str, float]) -> bool:
    """A holding ended: drop its holder and charge what it held to the months it held it in.
    Only a holder is settled, so a repeated release charges nothing twice. → whether it was one."""
    if usage.holder(run_id) is None:
        return False
    usage.holders = [h for h in usage.holders if h.run_id != run_id]
    for month, hours in months.items():
        if month >= usage.month:
            usage.used[run_id] = round(usage.used.get(run_id, 0.0) + hours, 6)
        else:
            usage.earlier[month] = round(usage.earlier.get(month, 0.0) + hours, 6)
    return True


def budget_of(usage: TeamUsage, limit: float, observed: Observed, asked: float) -> Budget:
    held = {h.run_id: observed.held.get(h.run_id, 0.0) for h in usage.holders}
    return Budget(
        month=usage.month,
        limit=limit,
        used=usage.used_this_month(),
        running_held=sum(held.values()),
        running_reserved=sum(max(h.reserved, held[h.run_id]) for h in usage.holders),
        asked=asked,
    )


def decide(
    usage: TeamUsage,
    ask: Ask,
    limits: Limits,
    *,
    now: datetime,
    stamp: str,
    observed: Observed = Observed(),
    stale_after: timedelta,
) -> tuple[str | None, Decision]:
    """One plan's admission, applied to ``usage`` in place (a compare-and-swap's change); → (the
    event to write, or None when nothing changed; the decision). ``stamp``: ``now`` as the ledger
    writes times."""
    changed = roll_month(usage, now)
    for run_id, months in observed.ended.items():
        changed |= settle(usage, run_id, months)
    if usage.holder(ask.run_id) is not None:  # a repeated plan (an HTTP retry, the next round's)
        return ("pruned" if changed else None), Decision("holding")
    before = len(usage.waiting)
    usage.waiting = [
        w for w in usage.waiting if w.run_id == ask.run_id or parse_time(w.seen) >= now - stale_after
    ]
    changed |= len(usage.waiting) != before
    team = usage.team
    slot_wait = _slot_wait(usage, ask, limits)
    if slot_wait is not None:
        _queue(usage, ask, stamp, "slot")
        return "queued", Decision("wait", slot_wait, waits_for="slot")
    budget = None
    if limits.monthly_chip_hours is not None:
        budget = budget_of(usage, limits.monthly_chip_hours, observed, ask.reservation.chip_hours)
        if ask.reservation.chip_hours > budget.left_certain:
            usage.waiting = [w for w in usage.waiting if w.run_id != ask.run_id]
            return "refused", Decision("refused", refusal(team, ask.reservation, budget), budget)
        if ask.reservation.chip_hours > budget.left:
            _queue(usage, ask, stamp, "budget")
            return "queued", Decision("wait", budget_wait(team, ask.reservation, budget), budget, "budget")
    usage.waiting = [w for w in usage.waiting if w.run_id != ask.run_id]
    usage.holders.append(
        Holder(
            run_id=ask.run_id, sweep_child=ask.sweep_child, since=stamp, reserved=ask.reservation.chip_hours
        )
    )
    return "admitted", Decision("admitted", budget=budget)


def preview(usage: TeamUsage, ask: Ask, limits: Limits, *, now: datetime) -> Decision:
    """What plan would decide for ``ask`` on ``usage`` now, without changing it (``rlpipe plan``):
    the holders' ledgers unread, so a place that ended unseen still counts."""
    copy = usage.model_copy(deep=True)
    return decide(
        copy, ask, limits, now=now, stamp=now.strftime(LEDGER_TIME), stale_after=timedelta(days=3650)
    )[1]


def _queue(usage: TeamUsage, ask: Ask, stamp: str, waits_for: Literal["slot", "budget"]) -> None:
    for w in usage.waiting:
        if w.run_id == ask.run_id:
            w.seen, w.waits_for = stamp, waits_for
            return
    usage.waiting.append(
        Waiter(run_id=ask.run_id, sweep_child=ask.sweep_child, since=stamp, seen=stamp, waits_for=waits_for)
    )


def _blocked(
    sweep_child: bool, active: int, children: int, limits: Limits
) -> Literal["active", "children"] | None:
    if limits.active_runs is not None and active >= limits.active_runs:
        return "active"
    if sweep_child and limits.sweep_children is not None and children >= limits.sweep_children:
        return "children"
    return None


def _slot_wait(usage: TeamUsage, ask: Ask, limits: Limits) -> str | None:
    """Why ``ask`` waits for a slot, or None. First come, first admitted: a run queued earlier that
    the free room would take keeps it, and one that a limit this run is not under holds (a sweep's
    child when only children are full) is passed."""
    active = len(usage.holders)
    children = sum(h.sweep_child for h in usage.holders)
    shown_active, shown_children = active, children
    ahead = 0
    for w in usage.waiting:
        if w.run_id == ask.run_id:
            break
        if w.waits_for == "slot" and _blocked(w.sweep_child, active, children, limits) is None:
            active, children, ahead = active + 1, children + w.sweep_child, ahead + 1
    which = _blocked(ask.sweep_child, active, children, limits)
    if which is None:
        return None
    team = usage.team
    if which == "active":
        why = f"team {team} has {shown_active} of {limits.active_runs} active runs (teams.{team}.limits.active_runs)"
    else:
        why = (
            f"team {team} has {shown_children} of {limits.sweep_children} sweep children running "
            f"(teams.{team}.limits.sweep_children, across all its sweeps)"
        )
    queue = f"; {ahead} queued before this run" if ahead else ""
    return f"queued: {why}{queue}; it goes on when one ends"


def refusal(team: str, asked: Reservation, budget: Budget) -> str:
    left = max(0.0, budget.left_certain)
    return (
        f"team {team}'s TPU budget for {budget.month} (UTC) cannot hold this run: it may hold up to "
        f"{asked.chip_hours:g} chip-hours ({asked.explained}) and {left:.1f} of the team's "
        f"{budget.limit:g} chip-hours are left (used {budget.used:.1f} by ended runs, {budget.running_held:.1f} "
        f"so far by running ones): teams.{team}.limits.monthly_chip_hours. Ask for fewer chips or shorter "
        f"deadlines (timeouts.train), wait until {next_month(budget.month)}-01 UTC, or ask the deployment "
        "to raise the budget"
    )


def budget_wait(team: str, asked: Reservation, budget: Budget) -> str:
    return (
        f"queued: team {team}'s running runs may still use {budget.running_reserved - budget.running_held:.1f} "
        f"chip-hours of the {max(0.0, budget.left_certain):.1f} left of its {budget.limit:g} for {budget.month}, "
        f"and this run may hold up to {asked.chip_hours:g}: it goes on if they end with enough left, "
        "and is refused if they do not"
    )


# ---- the document from the ledgers ---------------------------------------------------------------


def holds_now(record: RunRecord) -> bool:
    """Whether a run found in the ledgers (when the document is first built) holds a place: it
    has not ended, it is past plan (admitted: its conversion recorded, or launched), no queue holds it, and (a
    sweep's child) it has not reached its sweep's selection (control/lifecycle/team_places.py)."""
    if record.terminal or record.sweep is not None:
        return False
    if record.admission is not None:
        return False  # queued at plan, or at its sweep's selection, where it gave its place back
    member = record.lineage.sweep
    if member is not None and member.selected is not None:
        return False  # past its sweep's selection: it publishes from a CPU Job, if at all
    # Past plan: plan records the conversion it trains from once the run is admitted (its commits
    # alone are kept earlier, while it waits: core.runs.plan_record.pin_commits).
    return record.state != "accepted" or bool(record.lineage.conversion_key)


def seed(team: str, records: Iterable[RunRecord], *, now: datetime, stamp: str, read: int) -> TeamUsage:
    """The document built from the team's ledgers: each run that holds now is a holder since its
    current round's first attempt (its reservation its request's); every attempt that ended
    before a holding began is charged to the month it ended in."""
    usage = TeamUsage(team=team, month=month_of(now), seeded_at=stamp, seeded_from=read)
    for record in records:
        if record.team != team:
            continue
        since = None
        if holds_now(record):
            first = [a.launched_at for a in record.attempts if a.round == record.round]
            since = min(first) if first else stamp
            usage.holders.append(
                Holder(
                    run_id=record.run_id,
                    sweep_child=record.lineage.sweep is not None,
                    since=since,
                    reserved=reservation(record.request).chip_hours,
                )
            )
        start = parse_time(since) if since else None
        for a in record.attempts:
            if not a.chip_hours or (start is not None and parse_time(a.launched_at) >= start):
                continue
            ended = parse_time(a.finished_at) if a.finished_at else parse_time(record.updated_at)
            month = month_of(ended)
            if month == usage.month:
                usage.used[record.run_id] = round(usage.used.get(record.run_id, 0.0) + a.chip_hours, 6)
            elif month < usage.month:
                usage.earlier[month] = round(usage.earlier.get(month, 0.0) + a.chip_hours, 6)
    usage.earlier = dict(sorted(usage.earlier.items())[-EARLIER_MONTHS_KEPT:])
    return usage
