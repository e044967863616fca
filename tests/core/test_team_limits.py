"""A team's limits as rules (core.team_limits): slots first come first admitted, sweep children capped
across sweeps, a monthly chip-hour budget that refuses only what cannot fit and waits for what may.

``limit_problems`` plays each rule on a module and says what it got wrong; the real module has no
problem, and each mutation of a copy of it (a mistake one could commit) is reported.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rlpipe.core import team_limits
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Admission, Attempt, RunRecord, Source
from rlpipe.core.teams import Limits
from tests.conftest import minimal_request
from tests.harness.mutants import mutant

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
STAMP = "2026-12-10T12:00:00.000000Z"
STALE = timedelta(minutes=16)


def _request(**fields: Any) -> dict[str, Any]:
    return validate_request(minimal_request(**fields)).model_dump(mode="json")


def test_a_reservation_is_chips_times_the_deadlines_of_the_stages_on_the_slice() -> None:
    # v6e-32 is 4x8 = 32 chips; cpu placement: train only, 24 h by default → 768 chip-hours.
    default = team_limits.reservation(_request())
    assert default.chip_hours == 768.0
    assert "32 chips × 24 h of train" in default.explained
    # On the slice, convert and export hold one slice too: 32 × (2 + 4 + 4) h = 320.
    on_slice = team_limits.reservation(_request(placement="tpu-slice", timeouts={"train": 7200}))
    assert on_slice.chip_hours == 320.0
    # Two slices train on 64 chips; convert and export still on one: 64 × 1 + 32 × (4 + 4) = 320.
    two = team_limits.reservation(
        _request(placement="tpu-slice", tpu={"slices": 2}, timeouts={"train": 3600})
    )
    assert two.chip_hours == 320.0


# ---- the rules, played on a module -----------------------------------------------------------------


def _ask(tl: ModuleType, run_id: str, hours: float = 10.0, *, child: bool = False) -> Any:
    return tl.Ask(run_id, child, tl.Reservation(hours, f"{hours} h"))


def _decide(tl: ModuleType, usage: Any, ask: Any, limits: Limits, **kw: Any) -> Any:
    at = kw.pop("now", NOW)
    return tl.decide(
        usage, ask, limits, now=at, stamp=at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), stale_after=STALE, **kw
    )[1]


def limit_problems(tl: ModuleType) -> list[str]:
    """What ``tl`` (core.team_limits or a mutant of it) gets wrong; empty: nothing."""
    problems: list[str] = []

    # active_runs: two go on, the third waits and is told the count; it goes on when one ends.
    usage = tl.TeamUsage(team="vision", month="2026-12")
    two = Limits(active_runs=2)
    outcomes = [_decide(tl, usage, _ask(tl, r), two).outcome for r in ("ra", "rb", "rc")]
    if outcomes != ["admitted", "admitted", "wait"]:
        problems.append(f"active_runs=2: three plans were {outcomes}")
    third = _decide(tl, usage, _ask(tl, "rc"), two)
    if "2 of 2 active runs" not in (third.reason or ""):
        problems.append(f"the wait does not say how many are active of how many: {third.reason!r}")
    if _decide(tl, usage, _ask(tl, "ra"), two).outcome != "holding":
        problems.append("a repeated plan of a holder is not told it holds its place")
    tl.settle(usage, "ra", {})
    if _decide(tl, usage, _ask(tl, "rc"), two).outcome != "admitted":
        problems.append("a queued run does not go on when a place is free")

    # First come, first admitted: rd queued before re; a freed place goes to rd even if re asks first.
    usage = tl.TeamUsage(team="vision", month="2026-12")
    one = Limits(active_runs=1)
    for run_id in ("rh", "rd", "re"):
        _decide(tl, usage, _ask(tl, run_id), one)
    tl.settle(usage, "rh", {})
    late = _decide(tl, usage, _ask(tl, "re"), one)
    if late.outcome != "wait" or "1 queued before this run" not in (late.reason or ""):
        problems.append(f"a later run took the place of one queued before it: {late}")
    if _decide(tl, usage, _ask(tl, "rd"), one).outcome != "admitted":
        problems.append("the first queued run was not admitted")
    # ... unless the earlier one stopped asking (its workflow ended): its place in the queue lapses.
    usage = tl.TeamUsage(team="vision", month="2026-12")
    for run_id in ("rh", "rd"):
        _decide(tl, usage, _ask(tl, run_id), one)
    tl.settle(usage, "rh", {})
    later = NOW + STALE + timedelta(seconds=1)
    if _decide(tl, usage, _ask(tl, "re"), one, now=later).outcome != "admitted":
        problems.append("a waiter that stopped asking keeps the queue blocked")

    # sweep_children: across sweeps; a plain run passes a child queued only for the children's limit.
    usage = tl.TeamUsage(team="vision", month="2026-12")
    caps = Limits(active_runs=3, sweep_children=1)
    first = _decide(tl, usage, _ask(tl, "rk1", child=True), caps)
    second = _decide(tl, usage, _ask(tl, "rk2", child=True), caps)
    plain = _decide(tl, usage, _ask(tl, "rp"), caps)
    if (first.outcome, second.outcome, plain.outcome) != ("admitted", "wait", "admitted"):
        problems.append(f"sweep_children=1: child, child, plain run were {first}, {second}, {plain}")
    if "1 of 1 sweep children" not in (second.reason or ""):
        problems.append(f"the child's wait does not say the children's count: {second.reason!r}")
    filled = _decide(tl, usage, _ask(tl, "rq"), caps)  # rk1 and rp hold 2 of 3; rk2 waits only for children
    if filled.outcome != "admitted":
        problems.append(f"a plain run waited behind a child that only the children's limit holds: {filled}")

    # The budget: 1000 chip-hours; 700 used by ended runs.
    budget = Limits(monthly_chip_hours=1000)
    usage = tl.TeamUsage(team="vision", month="2026-12", used={"rold": 700.0})
    refused = _decide(tl, usage, _ask(tl, "rbig", 320.0), budget)
    if refused.outcome != "refused":
        problems.append(f"a reservation of 320 with 300 left was {refused.outcome}")
    for number in ("320 chip-hours", "300.0 of the team's 1000 chip-hours are left", "2027-01-01"):
        if number not in (refused.reason or ""):
            problems.append(f"the refusal does not say {number!r}: {refused.reason!r}")
    if usage.holder("rbig") is not None or any(w.run_id == "rbig" for w in usage.waiting):
        problems.append("a refused run holds or waits for a place")
    fits = _decide(tl, usage, _ask(tl, "rmid", 200.0), budget)
    if fits.outcome != "admitted":
        problems.append(f"200 of 300 left was {fits.outcome}")
    # 100 left once rmid's reservation counts: a 150 waits (rmid may end under it) ...
    waits = _decide(tl, usage, _ask(tl, "rnext", 150.0), budget)
    if waits.outcome != "wait" or waits.waits_for != "budget":
        problems.append(f"150 with 100 left after others' reservations was {waits}")
    # ... and goes on once rmid ended having held only 20.
    ended = tl.Observed(ended={"rmid": {"2026-12": 20.0}})
    after = _decide(tl, usage, _ask(tl, "rnext", 150.0), budget, observed=ended)
    if after.outcome != "admitted" or usage.used.get("rmid") != 20.0:
        problems.append(f"after rmid ended with 20 held: {after}, used {usage.used}")
    # A running run that held more than it reserved is charged what it held.
    usage = tl.TeamUsage(team="vision", month="2026-12", used={"rold": 700.0})
    _decide(tl, usage, _ask(tl, "rrun", 100.0), budget)
    over = _decide(tl, usage, _ask(tl, "rx", 150.0), budget, observed=tl.Observed(held={"rrun": 200.0}))
    if over.outcome != "refused":
        problems.append(f"150 with 100 certain left (rrun held 200 of its 100) was {over.outcome}")

    # A new month starts afresh; the last one's total is kept.
    usage = tl.TeamUsage(team="vision", month="2026-11", used={"rold": 990.0})
    fresh = _decide(tl, usage, _ask(tl, "rjan", 500.0), budget)
    if fresh.outcome != "admitted" or usage.month != "2026-12" or usage.earlier.get("2026-11") != 990.0:
        problems.append(f"a new month: {fresh}, month {usage.month}, earlier {usage.earlier}")

    # A release charges once, to the month the chip-hours were held in.
    usage = tl.TeamUsage(team="vision", month="2026-12")
    _decide(tl, usage, _ask(tl, "rr"), Limits())
    tl.settle(usage, "rr", {"2026-11": 5.0, "2026-12": 7.0})
    tl.settle(usage, "rr", {"2026-11": 5.0, "2026-12": 7.0})
    if usage.used != {"rr": 7.0} or usage.earlier != {"2026-11": 5.0}:
        problems.append(f"a release twice: used {usage.used}, earlier {usage.earlier}")
    return problems


def test_the_rules_hold() -> None:
    assert limit_problems(team_limits) == []


MUTATIONS = [
    # (the real text, the mistake, what the check reports)
    (
        "limits.active_runs is not None and active >= limits.active_runs",
        "limits.active_runs is not None and active > limits.active_runs",
        "active_runs=2: three plans were",
    ),
    (
        'if w.waits_for == "slot" and _blocked(w.sweep_child, active, children, limits) is None:',
        "if False:",
        "a later run took the place",
    ),
    (
        "sweep_child and limits.sweep_children is not None",
        "limits.sweep_children is not None",
        "a plain run waited behind a child",
    ),
    (
        "if ask.reservation.chip_hours > budget.left_certain:",
        "if ask.reservation.chip_hours > budget.left:",
        "150 with 100 left after others' reservations was",
    ),
    (
        "running_held=sum(held.values()),",
        "running_held=0.0,",
        "rrun held 200 of its 100",
    ),
    (
        "    if usage.holder(run_id) is None:\n        return False\n",
        "",
        "a release twice",
    ),
]


@pytest.mark.parametrize(("original", "mistake", "reported"), MUTATIONS, ids=[m[2] for m in MUTATIONS])
def test_a_mistake_in_the_rules_is_reported(
    tmp_path: Path, original: str, mistake: str, reported: str
) -> None:
    with mutant(team_limits, original, mistake, tmp_path) as tl:
        problems = limit_problems(tl)
    assert any(reported in p for p in problems), problems


# ---- the document built from the ledgers ------------------------------------------------------------


def _record(run_id: str, team: str | None, state: str, attempts: list[Attempt], **extra: Any) -> RunRecord:
    record = RunRecord(
        run_id=run_id,
        key=run_id,
        source=Source(kind="gcs", team=team),
        request=_request(),
        attempts=attempts,
        updated_at="2026-12-09T00:00:00.000000Z",
    )
    record.state = state  # type: ignore[assignment]
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def _attempt(stage: str, launched: str, finished: str | None, hours: float, round: int = 1) -> Attempt:
    return Attempt(
        stage=stage,  # type: ignore[arg-type]
        attempt=1,
        workload="w",
        launched_at=launched,
        finished_at=finished,
        chip_hours=hours,
        round=round,
    )


def test_the_document_built_from_the_ledgers_counts_the_team_only() -> None:
    records = [
        # ended this month: 12 charged; a November attempt goes to November
        _record(
            "rdone",
            "vision",
            "succeeded",
            [
                _attempt("train", "2026-11-30T20:00:00.000000Z", "2026-11-30T23:00:00.000000Z", 3.0),
                _attempt("train", "2026-12-01T01:00:00.000000Z", "2026-12-01T05:00:00.000000Z", 12.0),
            ],
        ),
        # running: a holder since its round's first attempt, reserved its request's 768
        _record(
            "rlive",
            "vision",
            "training",
            [_attempt("train", "2026-12-09T00:00:00.000000Z", None, 4.0)],
        ),
        # accepted, queued by the team: no place
        _record(
            "rqueued",
            "vision",
            "accepted",
            [],
            admission=Admission(
                waits_for="team-place", reason="queued: ...", since="2026-12-09T00:00:00.000000Z"
            ),
        ),
        # another team's, and a run before teams
        _record(
            "rother", "speech", "training", [_attempt("train", "2026-12-09T00:00:00.000000Z", None, 9.0)]
        ),
        _record(
            "rold",
            None,
            "succeeded",
            [_attempt("train", "2026-12-02T00:00:00.000000Z", "2026-12-02T01:00:00.000000Z", 1.0)],
        ),
    ]
    usage = team_limits.seed("vision", records, now=NOW, stamp=STAMP, read=len(records))
    assert [h.run_id for h in usage.holders] == ["rlive"]
    assert usage.holders[0].since == "2026-12-09T00:00:00.000000Z" and usage.holders[0].reserved == 768.0
    assert usage.used == {"rdone": 12.0} and usage.earlier == {"2026-11": 3.0}
    assert usage.seeded_from == 5
