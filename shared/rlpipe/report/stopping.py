"""Where a sweep's rule stopped each child, and the chip-hours the sweep would have used without it.

Why on the page: a stopped child has no post evaluation, so without a mark its curve simply ends,
and a reader cannot tell a child the rule ended from one that crashed. And the point of a rule is
the chip-hours it saved, which no ledger records: a sweep runs once, under one rule. So the page
estimates what ``none`` would have used, and says it is an estimate and how it is made.

The estimate: every child that was not stopped used what it used. A stopped child used what it
used, plus its remaining steps (its final step − the step it had trained to: its last recorded
evaluation, in the same outer steps as the final step, ``core.request.stop_schedule.schedule_of``)
at the rate measured on the children that trained to their end: their train chip-hours ÷ their
final steps. That rate counts each finisher's start-up once over all its steps, as a child that
had gone on would have. Scaling a stopped child's own chip-hours to its final step, as before,
multiplied its start-up with its steps and so estimated high, the more so the earlier it stopped;
that is used only where no child trained to its end, and the page then says so. Its other stages
count as they are; its export, which never ran, is not added.

Pure: records in, facts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import RunRecord
from rlpipe.report.charts import finite
from rlpipe.report.rows import attempt_rows, chip_hours

STOPPED = "stopped"
ESTIMATE_HOW = (
    "an estimate: each stopped child's train chip-hours × its final step ÷ the step it had trained to "
    "(its own measured rate, as no child trained to its end; start-up included, so on the high side), "
    "plus every other child's and stage's chip-hours as used; the export a stopped child never ran is "
    "not added"
)


def _measured_how(train: float, steps: int, finishers: int) -> str:
    rate = train / steps
    return (
        f"measured: the {finishers} child{'ren' if finishers != 1 else ''} that trained to the end used "
        f"{train:.2f} train chip-hours for {steps} steps ({rate:.4f} per step); each stopped child is "
        "counted as what it used plus its remaining steps (its final step − the step it had trained to) "
        "at that rate; every other child's and stage's chip-hours as used; the export a stopped child "
        "never ran is not added"
    )


@dataclass(frozen=True)
class StopMark:
    """Where and why one child was stopped."""

    run_id: str
    rule: str | None  # median or asha; None when only the child's record is at hand
    step: int | None  # the step the rule judged at (ASHA: the rung)
    trained_to: int | None  # the last step it recorded an evaluation at
    reason: str


@dataclass(frozen=True)
class ChildEstimate:
    run_id: str
    used: float  # chip-hours it used, every stage
    without: float | None  # what it would have used trained to its end; None: not known
    why_unknown: str | None = None


@dataclass(frozen=True)
class Savings:
    """The sweep's chip-hours used, and estimated without its stopping rule."""

    used: float
    without: float | None  # None: some stopped child's could not be estimated (``unknown``)
    children: tuple[ChildEstimate, ...]
    unknown: tuple[str, ...]  # why, per child
    how: str = ESTIMATE_HOW
    # The plan's best case for the rule (``rlpipe plan``'s ``fraction_of_none.best``, in training
    # steps): the page sets the measured share against it. None: not a sweep, or not known.
    plan_best: float | None = None
    short: int = 0  # children that failed or were cancelled before their final step, not stopped
    running: int = 0  # children that have not ended: they count what they have used so far
    measured: bool = False  # a child trained to its end, and its rate prices the remaining steps

    @property
    def fraction(self) -> float | None:
        return self.used / self.without if self.without else None

    @property
    def below_plan_why(self) -> str | None:
        """Why the measured share is below the plan's best case, which counts training steps alone
        (start-up, the stop's delay and the other stages only add to the share); None when it is not."""
        share = self.fraction
        if share is None or self.plan_best is None or share >= self.plan_best:
            return None
        if self.running:
            one = self.running == 1
            return (
                f"{self.running} child{'' if one else 'ren'} {'has' if one else 'have'} not ended and "
                f"{'counts' if one else 'count'} only what {'it has' if one else 'they have'} used so far"
            )
        if self.short:
            one = self.short == 1
            return (
                f"{self.short} child{'' if one else 'ren'} ended before {'its' if one else 'their'} final "
                f"step without being stopped (failed or cancelled) and {'counts' if one else 'count'} as "
                f"what {'it' if one else 'they'} used, where the plan's best case trains "
                f"{'it' if one else 'them'} to the end"
            )
        if not self.measured:  # no child trained to its end: each stopped child's own rate
            return (
                "each stopped child's own rate scales its start-up with its steps, so the estimate "
                "without stopping is on the high side"
            )
        return (
            "the stopped children's remaining steps are estimated at the finishers' measured rate, "
            "their start-up and any retried attempt included, so the estimate without stopping is on "
            "the high side"
        )


def _last_step(record: RunRecord) -> int | None:
    steps = [e.step for e in recorded.results(record.results).intermediate or [] if e.step is not None]
    return max(steps) if steps else None


def stop_marks(records: Sequence[RunRecord], parent: RunRecord | None = None) -> dict[str, StopMark]:
    """Each stopped child's mark: the parent's record of the decision when it is given
    (``sweep.stopped``), else the child's own (``failure.message`` is the decision's reason)."""
    kept = {s.run_id: s for s in (parent.sweep.stopped if parent and parent.sweep else [])}
    marks = {}
    for record in records:
        if record.state != STOPPED and record.run_id not in kept:
            continue
        decided = kept.get(record.run_id)
        failure = record.failure
        reason = decided.reason if decided else (failure.message if failure else "no reason recorded")
        last = _last_step(record)
        marks[record.run_id] = StopMark(
            record.run_id,
            decided.rule if decided else None,
            decided.step if decided else last,
            last if last is not None else (decided.step if decided else None),
            reason,
        )
    return marks


def _final_step(record: RunRecord) -> int | None:
    """The child's final outer step from its request; None when the request no longer validates."""
    from rlpipe.core.request import Request, stop_schedule

    try:
        return stop_schedule.schedule_of(Request.model_validate(record.request))[1]
    except ValueError:  # pydantic's ValidationError and steps.ConfigProblem both are
        return None


def _trained_to_the_end(record: RunRecord, now: datetime) -> tuple[float, int] | None:
    """(train chip-hours, final step) of a child that trained to its end; None for any other. The
    final step is counted as a stopped child's remaining steps are (``_final_step``: the outer
    steps of ``stop_schedule.schedule_of``), not in train_rl's checkpoint steps, which are
    ``rl.num_iterations`` times as many."""
    final = _final_step(record)
    if record.state not in ("succeeded", "gated") or not record.lineage.final_step or not final:
        return None
    train = sum(finite(r.chip_hours) or 0.0 for r in attempt_rows(record, now) if r.stage == "train")
    return (train, final) if train > 0 else None


def plan_best(parent: RunRecord | None, records: Sequence[RunRecord]) -> float | None:
    """The best case ``rlpipe plan`` gives the sweep's rule, as a fraction of ``none``'s training
    steps (``core.stop_plan.bound``, the stop's delay not counted), for the children recorded;
    None when there is no parent, no rule, or a request that no longer validates."""
    from rlpipe.core.request import Request
    from rlpipe.core.stop_plan import bound, child_steps

    if parent is None or parent.sweep is None or len(records) != len(parent.sweep.children):
        return None  # a bound over some of the children is not the sweep's
    try:
        spec = Request.model_validate(parent.request).sweep
        stop = spec.stopping if spec is not None else None
        if stop is None or stop.rule == "none":
            return None
        kids = [child_steps(i, stop, Request.model_validate(r.request)) for i, r in enumerate(records)]
    except ValueError:  # pydantic's ValidationError and steps.ConfigProblem both are
        return None
    return bound(stop.rule, stop.eta, parent.sweep.max_parallel, kids).best_fraction


def savings(
    records: Sequence[RunRecord],
    marks: dict[str, StopMark],
    now: datetime,
    parent: RunRecord | None = None,
) -> Savings | None:
    """The chip-hours used and estimated without the rule (module docstring), set against the
    plan's best case when the sweep's ``parent`` is given; None: none stopped."""
    if not marks:
        return None
    finished = [f for r in records if r.run_id not in marks and (f := _trained_to_the_end(r, now))]
    measured = sum(t for t, _ in finished), sum(n for _, n in finished)
    rate = measured[0] / measured[1] if finished else None
    children, unknown = [], []
    for record in records:
        rows = attempt_rows(record, now)
        used = chip_hours(rows)["total"]
        mark = marks.get(record.run_id)
        if mark is None:
            children.append(ChildEstimate(record.run_id, used, used))
            continue
        train = sum(finite(r.chip_hours) or 0.0 for r in rows if r.stage == "train")
        final, step = _final_step(record), mark.trained_to
        why = None
        if final is None:
            why = f"{record.run_id}: its request gives no final step"
        elif not step:
            why = f"{record.run_id}: no evaluation recorded, so no step it trained to"
        elif rate is None and train <= 0:
            why = (
                f"{record.run_id}: its train attempts recorded no chip-hours, and no child trained to its end"
            )
        if why is not None:
            unknown.append(why)
            children.append(ChildEstimate(record.run_id, used, None, why))
            continue
        assert final is not None and step  # for mypy: checked above
        remaining = max(final - step, 0)
        without = used + rate * remaining if rate is not None else used - train + train * final / step
        children.append(ChildEstimate(record.run_id, used, without))
    total = sum(c.used for c in children)
    without_all = None if unknown else sum(c.without or 0.0 for c in children)
    how = _measured_how(measured[0], measured[1], len(finished)) if rate is not None else ESTIMATE_HOW
    short = sum(
        1
        for r in records
        if r.run_id not in marks and r.state in ("failed", "cancelled") and not r.lineage.final_step
    )
    running = sum(1 for r in records if not r.terminal and r.run_id not in marks)
    best = plan_best(parent, records)
    return Savings(
        total,
        without_all,
        tuple(children),
        tuple(unknown),
        how,
        best,
        short,
        running,
        measured=rate is not None,
    )
