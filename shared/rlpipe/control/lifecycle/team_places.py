"""A team's limits as a run policy (``control.lifecycle.policies``): the places
(``core.team_limits``) a run takes at plan and gives back, its monthly budget, and the declaration
its launches need.

The rule for when a place is held (docs/teams.md, "When a run holds a place"): a run takes its
team's place at plan, once nothing else holds it back, and holds it while it can still use a TPU.
It gives it back when its run ends, or, for a sweep's child, when it arrives at its sweep's
selection: by then it has trained, passed its gate and exported, so it holds no slice while it
waits for its siblings, and the one chosen publishes from a CPU Job. A child that kept its place
there would keep its own siblings from the places they need to arrive, and its sweep would never
select (the deadlock of a sweep with more children than its team's places).

Why apart from the stage operations: team limits are one policy of several (sweeps, early
stopping); the operations call it at named points and know nothing else of teams.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import AdmissionRefused, RunPolicy
from rlpipe.control.lifecycle.team_usage import TeamUsageStore
from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.record import RunRecord
from rlpipe.core.team_limits import Decision
from rlpipe.core.teams import DEFAULT_TEAM, Team


@dataclass
class TeamPlaces(RunPolicy):
    settings: Settings
    ledger: Ledger
    state: blobstore.BlobStore  # where the teams' usage documents are
    log: Logger
    clock: Callable[[], float] = time.time
    usage: TeamUsageStore | None = field(default=None)

    def team_of(self, record: RunRecord) -> Team | None:
        """The run's declared team, whose limits it plans under; None without teams (or when its
        team is no longer declared: nothing to count it against), and for a sweep's parent, which
        runs nothing itself."""
        teams = self.settings.teams()
        if not teams.declared or record.sweep is not None:
            return None
        return teams.named(record.team)

    def store(self) -> TeamUsageStore:
        if self.usage is None:
            self.usage = TeamUsageStore(
                self.state, self.ledger, poll_seconds=self.settings.callback_timeout_seconds, clock=self.clock
            )
        return self.usage

    def admit(self, record: RunRecord) -> Decision | None:
        """The team's decision for the run at plan (None: no team limits apply)."""
        team = self.team_of(record)
        return None if team is None else self.store().admit(team, record)

    # ---- the policy's hooks ----------------------------------------------------------------------

    def admission(self, record: RunRecord, *, conversion_ready: bool) -> Queued | None:
        """Queued while the team's limits hold it back; ``AdmissionRefused`` when its monthly budget
        never can (the run is then finished failed with the numbers: nothing of it held a TPU)."""
        decision = self.admit(record)
        if decision is None or decision.outcome not in ("refused", "wait"):
            return None
        log = self.log.bind(run_id=record.run_id)
        if decision.outcome == "refused":
            reason = decision.reason or f"team {record.team}'s monthly chip-hour budget cannot hold this run"
            log.warning("refused by the team's budget", team=record.team, reason=reason)
            raise AdmissionRefused(reason, reported.TEAM_BUDGET_EXCEEDED)
        reason = decision.reason or f"queued under team {record.team}'s limits"
        log.info("queued under the team's limits", team=record.team, reason=reason)
        return Queued("team-budget" if decision.waits_for == "budget" else "team-place", reason)

    def may_launch(self, record: RunRecord, stage: str) -> None:
        """A run of a team no longer declared never launches: its namespace, queue and quota went
        with the declaration, and nothing else may run it."""
        teams = self.settings.teams()
        if teams.declared and record.team != DEFAULT_TEAM and teams.named(record.team) is None:
            raise PermanentFailure(
                f"run {record.run_id} is of team {record.team}, which this deployment no longer declares; "
                f"not launching {stage} (declare the team again, then retry the run)"
            )

    def operator_refusal(self, record: RunRecord, caller: str | None) -> str | None:
        """Only the operators its run's team declares may cancel, retry or promote it (core.teams),
        decided by the stage function, so that no client (the CLI or a hand-made call) can act on
        another team's run. A run from before the deployment declared teams is operated as it was
        then, by any caller IAM lets in."""
        teams = self.settings.teams()
        if not teams.declared or record.team == DEFAULT_TEAM:
            return None
        team = teams.named(record.team)
        if team is None:
            return (
                f"run {record.run_id} is of team {record.team}, which this deployment no longer declares: "
                "no one may operate on it until the team is declared again"
            )
        if team.may_operate(caller):
            return None
        who = caller or "a caller without a verified identity"
        return (
            f"{who} is not an operator of team {team.name}, whose run {record.run_id} is: ask one of its "
            f"operators, or have the deployment add you to teams.{team.name}.operators"
        )

    def arrived_at_selection(self, record: RunRecord) -> None:
        """It has trained, passed its gate and exported: it holds no TPU from here, so its place goes
        back now, not when the whole sweep ends (the rule in the module's docstring)."""
        self.give_back(record, "arrived at its sweep's selection")

    def ended(self, record: RunRecord) -> RunRecord | None:
        self.give_back(record, "the run ended")
        return None

    # ---- places ---------------------------------------------------------------------------------

    def give_back(self, record: RunRecord, why: str) -> None:
        """The run no longer needs its place (``why``: it ended, or arrived at selection); best
        effort: a place not given back here is found ended by the next plan that needs it, from
        the run's ledger."""
        if self.team_of(record) is None:
            return
        try:
            if self.store().release(record):
                self.log.bind(run_id=record.run_id).info("team place given back", team=record.team, why=why)
        except Exception as exc:  # what called this has happened; nothing of it may fail now
            self.log.bind(run_id=record.run_id).warning("team usage not released", error=repr(exc), why=why)
