"""A team's usage document in the state bucket (``teams/<team>/usage.json``), kept under compare-and-swap.

The rules are the core's (``core.team_limits``); this module reads and writes the document the way
the ledger writes a run: every change is a write on the generation that was read, retried on 412
by re-reading and deciding again, so two plans at a team's limit cannot both be admitted.

What a plan costs: one read of the document and, when it admits or queues the run, one write. The
holders' ledgers are read only when the decision is not to go on (to find holdings that ended
without a release: a run the reconciler ended, or one whose finish never came; and to count what
the running ones held) or when the document holds many holders (``PRUNE_AT``), one read per holder.
The ledgers are listed once per team, when its document does not exist yet (``seed``): a cost
that grows with every run in the bucket, measured in docs/teams-limits.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from rlpipe.control.adapters import blobstore, interleave
from rlpipe.control.lifecycle.ledger import CAS_ATTEMPTS, ConcurrentUpdate, Ledger
from rlpipe.core import layout, team_limits
from rlpipe.core.runs.record import LEDGER_TIME, RunRecord
from rlpipe.core.team_limits import Ask, Decision, Observed, TeamUsage
from rlpipe.core.teams import Team

T = TypeVar("T")

# With this many holders, each plan reads their ledgers to drop the ones that ended unseen
# (a team without limits still keeps its document, but need not read ledgers until then).
PRUNE_AT = 64
# A waiter not seen for this many of its workflow's polls has gone (its execution ended).
STALE_POLLS = 3


class TeamUsageStore:
    """The teams' usage documents in ``store`` (the state bucket), with the ledger beside them."""

    def __init__(
        self,
        store: blobstore.BlobStore,
        ledger: Ledger,
        *,
        poll_seconds: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        workers: int = 16,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.sleep = sleep
        self.workers = workers

    # ---- plan and the end of a run ------------------------------------------------------------

    def admit(self, team: Team, record: RunRecord) -> Decision:
        """Whether ``record``'s run goes on now, waits, or is refused under ``team``'s limits."""
        ask = Ask(record.run_id, record.lineage.sweep is not None, team_limits.reservation(record.request))
        stale_after = timedelta(seconds=STALE_POLLS * self.poll_seconds + 60)
        observed: Observed | None = None  # the holders' ledgers, once read
        while True:
            now = self._now()
            seen = observed or Observed()

            def change(
                usage: TeamUsage, seen: Observed = seen, at: datetime = now
            ) -> tuple[str | None, Decision]:
                return team_limits.decide(
                    usage,
                    ask,
                    team.limits,
                    now=at,
                    stamp=at.strftime(LEDGER_TIME),
                    observed=seen,
                    stale_after=stale_after,
                )

            usage, decision = self._update(team.name, change)
            must_read = decision.outcome == "wait" or len(usage.holders) > PRUNE_AT
            if observed is not None or not must_read or not usage.holders:
                return decision
            observed = self._observe(usage)

    def release(self, record: RunRecord) -> bool:
        """The run ended: its holder goes, its chip-hours are charged to the months they were held
        in. → whether it held a place (a repeated release charges nothing)."""
        now = self._now()

        def change(usage: TeamUsage) -> tuple[str | None, bool]:
            rolled = team_limits.roll_month(usage, now)
            holder = usage.holder(record.run_id)
            if holder is None:
                usage.waiting = [w for w in usage.waiting if w.run_id != record.run_id]
                return ("rolled" if rolled else None), False
            team_limits.settle(usage, record.run_id, team_limits.holding_months(record, holder.since, now))
            usage.waiting = [w for w in usage.waiting if w.run_id != record.run_id]
            return "released", True

        if self.read(record.team) is None:  # nothing to release where nothing was ever admitted
            return False
        return self._update(record.team, change)[1]

    def read(self, team: str) -> TeamUsage | None:
        """The team's document as stored (None before its first plan)."""
        try:
            data, _ = self.store.read_json(layout.team_usage(team))
        except blobstore.NotFound:
            return None
        return TeamUsage.model_validate(data)

    # ---- the document ---------------------------------------------------------------------------

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _load(self, team: str) -> tuple[TeamUsage, int]:
        name = layout.team_usage(team)
        while True:
            try:
                data, generation = self.store.read_json(name)
                return TeamUsage.model_validate(data), generation
            except blobstore.NotFound:
                seeded = self.seed(team)
                self.store.create(name, blobstore.dumps(seeded.model_dump(mode="json")))
                # created, or another plan seeded it first: either way read what is stored

    def _update(self, team: str, change: Callable[[TeamUsage], tuple[str | None, T]]) -> tuple[TeamUsage, T]:
        """``change`` under compare-and-swap, as ``Ledger.update`` applies a run's."""
        name = layout.team_usage(team)
        for attempt in range(CAS_ATTEMPTS):
            usage, generation = self._load(team)
            interleave.point("team_usage.update:read")
            what, decided = change(usage)
            if what is None:
                return usage, decided
            usage.seq += 1
            try:
                self.store.replace(name, blobstore.dumps(usage.model_dump(mode="json")), generation)
            except blobstore.PreconditionFailed:
                self.sleep(min(0.05 * 2**attempt, 1.0) * random.uniform(0.5, 1.5))
                continue
            return usage, decided
        raise ConcurrentUpdate(f"team {team}: its usage changed under us {CAS_ATTEMPTS} times")

    def _observe(self, usage: TeamUsage) -> Observed:
        """The holders' ledgers, read in parallel: which holdings ended (and what they held, by
        month), and what the others have held so far."""
        now = self._now()
        holders = list(usage.holders)
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(holders)))) as pool:
            records = list(pool.map(lambda h: self.ledger.peek(h.run_id), holders))
        ended: dict[str, dict[str, float]] = {}
        held: dict[str, float] = {}
        for holder, record in zip(holders, records, strict=True):
            if record is None:
                ended[holder.run_id] = {}
            elif record.terminal:
                ended[holder.run_id] = team_limits.holding_months(record, holder.since, now)
            else:
                held[holder.run_id] = team_limits.held_so_far(record, holder.since)
        return Observed(ended=ended, held=held)

    def seed(self, team: str) -> TeamUsage:
        """The team's document from every ledger in the bucket: the one listing of all runs, done
        when the document does not exist yet (the first plan of a team, or after it was deleted)."""
        ids: list[str] = []
        after = ""
        while True:
            page = self.ledger.list_run_ids_page(after, limit=500)
            ids += page.run_ids
            if not page.more or not page.run_ids:
                break
            after = page.run_ids[-1]
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(ids) or 1))) as pool:
            records = [r for r in pool.map(self.ledger.peek, ids) if r is not None]
        now = self._now()
        return team_limits.seed(team, records, now=now, stamp=now.strftime(LEDGER_TIME), read=len(ids))
