"""A run's record: the models the ledger stores as ``runs/<run_id>/run.json``, and its state machine.

Pure data, kept in the core so that every layer reads the same typed record: the control plane
writes it (``control.lifecycle.ledger``, a compare-and-swap store), the report and the CLI read it. The
field names and shapes are the ledger's JSON on disk; a change here must keep existing ledgers
loading.

State machine (illegal transitions raise ``IllegalTransition``)::

    accepted → converting → training → exporting → [publishing →] succeeded
        │           │           │           │              │
        └───────────┴───────────┴───────────┴──────────────┴──→ failed | cancelled
    accepted → training            (conversion cache hit)
    training → gated               (the quality gate held the model back; terminal)
    gated → training               (``rlpipe promote``: a person overrides the gate; the run goes on)
    accepted → exporting | publishing | succeeded  (a retried round whose earlier, or all, stages are done)
    failed | cancelled → accepted  (only ``RunRecord.reopen``: ``rlpipe retry`` starts a new round)

A run's rounds: round 1 is the original request; each retry (``control.lifecycle.retry_rounds``) appends a
``Round`` and continues the same run (same run id, attempt numbers going on, same checkpoints).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlpipe.core.identity import Stage
from rlpipe.core.teams import DEFAULT_TEAM

State = Literal[
    "accepted",
    "converting",
    "training",
    "exporting",
    "publishing",
    "succeeded",
    "failed",
    "cancelled",
    "gated",
    "stopped",
]
# stopped: a sweep's early-stopping rule ended a child while it trained (core.early_stop); its
# chip-hours are kept and it is never a candidate for selection.
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "gated", "stopped"})
STAGE_STATE: dict[str, State] = {
    "convert": "converting",
    "train": "training",
    "export": "exporting",
    "publish": "publishing",
}

_ALLOWED: dict[str, frozenset[str]] = {
    # exporting, publishing, succeeded, gated: a retried round whose earlier (or all) stages are done
    "accepted": frozenset(
        {"converting", "training", "exporting", "publishing", "succeeded", "failed", "cancelled", "gated"}
    ),
    "converting": frozenset({"training", "failed", "cancelled"}),
    "training": frozenset({"exporting", "failed", "cancelled", "gated", "stopped"}),
    "exporting": frozenset({"publishing", "succeeded", "failed", "cancelled"}),
    "publishing": frozenset({"succeeded", "failed", "cancelled"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
    "gated": frozenset({"training"}),  # promote
    "stopped": frozenset(),
}
# The states a retry may reopen (``RunRecord.reopen``); never through ``set_state``.
RETRYABLE: frozenset[str] = frozenset({"failed", "cancelled"})

LEDGER_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def now() -> str:
    return datetime.now(UTC).strftime(LEDGER_TIME)


def parse_time(timestamp: str) -> datetime:
    """A ledger timestamp (``now()``'s format) as an aware UTC datetime."""
    return datetime.strptime(timestamp, LEDGER_TIME).replace(tzinfo=UTC)


class IllegalTransition(Exception):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(_Model):
    kind: Literal["gcs", "pubsub", "upstream", "cli"]
    bucket: str | None = None
    name: str | None = None
    generation: str | None = None
    topic: str | None = None
    message_id: str | None = None
    # The team the source decided (core.teams: its folder, its topic, its watch entry); None is
    # the deployment's one team when it declares none, and every run recorded before teams.
    team: str | None = None

    def same_delivery(self, other: Source) -> bool:
        """Whether ``other`` is this very delivery again. The team is what the deployment made of
        the source, not part of it: a redelivery of a run claimed before teams were declared is
        still that delivery."""
        return self.model_dump(exclude={"team"}) == other.model_dump(exclude={"team"})


class Attempt(_Model):
    stage: Stage
    attempt: int
    workload: str
    uid: str | None = None
    launched_at: str
    finished_at: str | None = None
    phase: str = "launched"
    failure_class: str | None = None
    reason: str | None = None
    resume_step: int | None = None
    # The newest committed checkpoint when a cancel ended the attempt, read once its pods were gone:
    # what a retry resumes from (a train attempt only; 0: none was committed; None: not read).
    committed_step: int | None = None
    # TPU chip-hours its pods held (core.chip_hours): pod_chip_hours added up, or what Kueue
    # held for it once it ended when that is more (at least the total a record from before
    # pods were kept one by one had)
    chip_hours: float | None = None
    # What each of its pods (by UID) was last read holding: pods come and go between reads (a
    # JobSet restarting in place, a failing one deleting its active Jobs), so each keeps its own.
    pod_chip_hours: dict[str, float] = Field(default_factory=dict)
    # Once its workload ended by its own condition: the chip-hours Kueue held for it, from its
    # Workload's admission and Admitted time to the end (core.chip_hours.reserved_by_kueue)
    reserved_chip_hours: float | None = None
    cost_estimate: float | None = None  # chip_hours at the mode's list price (core.cost); None: no price
    round: int = 1  # the run's round when it was launched (retry budgets and deadlines count per round)
    # The failure class whose retry budget (or the retry cap) this failure used up: the attempt
    # is then ``permanent``, but what happened was that class (core/runs/budgets.py).
    budget_exhausted: str | None = None
    # The rule that decided the failure (core.failure_rules); None in ledgers older than the rules.
    failure_rule: str | None = None
    # Where the next read of the head's log starts (cluster/log_cursor.py; train attempts only).
    log_cursor: dict[str, Any] | None = None


# ---- a sweep (control/sweep): the parent's coordination record and a child's membership -------
# Every change to a parent is a compare-and-swap on its run.json (``control.lifecycle.ledger``), which is
# what makes the slot count, the one converter and the one selection hold when children ask at
# the same moment.


class SweepSelection(_Model):
    """The child chosen to publish, and why (``core.sweep.select``); run_id None: none could be."""

    run_id: str | None
    index: int | None
    metric: str
    direction: str
    value: float | None
    reason: str
    at: str
    table: list[dict[str, Any]] = Field(default_factory=list)


class EarlyStopRecord(_Model):
    """Why the sweep's rule stopped a child early (``core.early_stop.Decision``, as kept): the rule,
    the step, the child's value, the threshold it missed and the values it was measured against."""

    run_id: str
    index: int
    rule: str
    metric: str
    step: int | None
    value: float | None
    threshold: float | None
    compared: dict[str, float] = Field(default_factory=dict)  # peer index → its value
    reason: str
    at: str


class SweepParent(_Model):
    """A parent record's sweep: its children (by point index) and what they coordinate through."""

    children: list[str]  # run ids, point index order
    points: list[dict[str, Any]]
    max_parallel: int
    # Children holding a slot (a TPU slice's worth of work: convert, train, export).
    slots: list[str] = Field(default_factory=list)
    converter: str | None = None  # the one child converting the checkpoint all of them share
    # The commits every child trains on, pinned once by the first child to plan:
    # {"hf_sha": …, "data": …} (lineage.hf_sha and lineage.data of each child).
    pins: dict[str, Any] | None = None
    arrived: list[str] = Field(default_factory=list)  # children waiting at selection, trained and gated
    selection: SweepSelection | None = None
    # Every child's intermediate evaluations of the select metric, run id → {step: value}, copied
    # here by each child's status read so that an early-stopping decision reads one record,
    # under one compare-and-swap (control/sweep/early_stopping.py).
    evaluations: dict[str, dict[str, float]] = Field(default_factory=dict)
    stopped: list[EarlyStopRecord] = Field(default_factory=list)  # the children stopped early
    cancelled: bool = False
    # Who cancelled it: the identity Google verified on the rlpipe cancel call (control/adapters/callers.py).
    cancelled_by: str | None = None


# What a run that is not running yet waits for: a place under its team's limits (a slot, or room
# in its monthly budget), a slot of its sweep, the conversion its sweep's children share, or (a
# sweep's child that trained) its siblings at the selection. Kueue's own queueing of a launched
# workload is the attempt's phase ``queued``, not an admission wait.
WaitsFor = Literal["team-place", "team-budget", "sweep-slot", "conversion", "selection"]
PLAN_WAITS: frozenset[str] = frozenset({"team-place", "team-budget", "sweep-slot", "conversion"})


class Admission(_Model):
    """Why the run is not running yet, in one vocabulary for ``rlpipe status``, ``list`` and the
    report (``core.runs.admission``); None on the record once nothing holds it back. Like
    SkyPilot's schedule state beside a job's status, it sits next to the run's state, not in it."""

    waits_for: WaitsFor
    reason: str  # the words the decision gave, with its numbers and the limit's field
    since: str  # when this wait began (ledger time): plan's waits count as one, selection's as another


class SweepMember(_Model):
    """A child's place in its sweep: which parent, which point of the grid."""

    parent: str
    index: int
    size: int
    point: dict[str, Any]
    selected: bool | None = None  # None until the selection; then whether it is the one that publishes


class Execution(_Model):
    name: str | None = None
    started_at: str | None = None
    lease_holder: str | None = None
    lease_until: float | None = None
    start_attempts: int = 0  # leases taken to start an execution; capped (intake.MAX_START_ATTEMPTS)


class GateOverride(_Model):
    by: str  # the name the person gave
    at: str
    reason: str
    caller: str | None = None  # the identity Google verified on the call (control/adapters/callers.py)


class Lineage(_Model):
    hf_repo: str | None = None
    hf_revision: str | None = None
    hf_sha: str | None = None
    image: str | None = None
    conversion_key: str | None = None
    conversion_cache_hit: bool | None = None
    converted_uri: str | None = None
    checkpoint_uri: str | None = None
    final_step: int | None = None
    # The step export loaded and why (export.step; core.export_step), once export launched.
    exported_step: int | None = None
    export_reason: str | None = None
    export_uri: str | None = None
    # The sha256 of the export manifest export's done rule was judged on (publish checks it).
    export_manifest_sha256: str | None = None
    published_to: str | None = None  # repo@branch on the Hugging Face Hub (the publish stage)
    published_commit: str | None = None  # the Hub commit that holds this run's model (its receipt's)
    promoted: GateOverride | None = None  # a person overrode the quality gate: who, when, why
    pinning: dict[str, Any] | None = None  # what every read of the HF repo is pinned to, and how
    # The datasets plan pinned: {"train": …, "eval": …}, each control.adapters.hub_datasets' record (repo,
    # commit, subset, split, every data file with its size and sha256) and where it is staged.
    data: dict[str, Any] | None = None
    # The user's files intake copied under the run's prefix: role (rewards, processor,
    # chat_template) → {uri, sha256, size, functions}; every attempt checks these bytes.
    inputs: dict[str, Any] | None = None
    sweep: SweepMember | None = None  # a sweep's child: its parent and its point (control/sweep)


class GateRecord(_Model):
    """The quality gate's verdict (``core.gate``), and a person's override (``rlpipe promote``)."""

    passed: bool | None = None  # None: could not be evaluated
    reasons: list[str] = Field(default_factory=list)
    evaluated_at: str | None = None
    override: GateOverride | None = None


class Failure(_Model):
    tag: str
    message: str
    stage: str | None = None
    attempt: int | None = None
    # A person ended the run (rlpipe cancel): the identity Google verified on that call
    # (control/adapters/callers.py); None when the pipeline ended it.
    caller: str | None = None
    # The rule that ended the run (core.failure_rules.reported); None in ledgers older than the rules.
    rule: str | None = None


class Round(_Model):
    """One retry of the run (``rlpipe retry``, through the stage function): round 2 onwards."""

    round: int
    by: str  # the name the person gave
    caller: str | None = None  # the identity Google verified on the call (control/adapters/callers.py)
    at: str
    from_stage: Stage | None = None  # stages at or after it run again even if done
    reason: str
    key: str  # the caller's idempotency key (one round per key, however often it is sent)
    previous_state: str  # failed or cancelled
    previous_failure: dict[str, Any] | None = None  # the Failure that ended the previous round


class RunRecord(_Model):
    run_id: str
    key: str
    source: Source
    request: dict[str, Any]
    state: State = "accepted"
    stage: Stage | None = None
    attempt: int = 0
    attempts: list[Attempt] = Field(default_factory=list)
    execution: Execution = Field(default_factory=Execution)
    callbacks: dict[str, str] = Field(default_factory=dict)
    lineage: Lineage = Field(default_factory=Lineage)
    failure: Failure | None = None
    progress: dict[str, Any] = Field(default_factory=dict)  # e.g. {"step": 40, "mean_reward": 0.61}
    # Every evaluation train_rl printed (train_log.TrainLog.results) and the final step.
    results: dict[str, Any] = Field(default_factory=dict)
    gate: GateRecord | None = None
    round: int = 1  # 1 for the original request; +1 for each retry
    rounds: list[Round] = Field(default_factory=list)  # the retries, oldest first
    sweep: SweepParent | None = None  # a sweep's parent: no workloads of its own, only children
    # Why the run is not running yet (plan queued it, or it waits at its sweep's selection).
    admission: Admission | None = None
    created_at: str = Field(default_factory=now)
    updated_at: str = Field(default_factory=now)
    seq: int = 1

    @model_validator(mode="before")
    @classmethod
    def _ledgers_before_admission(cls, data: Any) -> Any:
        """Ledgers written before ``admission`` kept the reason as free text in two places
        (``waiting``, and a sweep child's ``lineage.sweep.waiting``): read them into it."""
        if not isinstance(data, dict) or ("waiting" not in data and "waiting" not in _member(data)):
            return data
        data = dict(data)
        team_reason = data.pop("waiting", None)
        member = dict(_member(data))
        sweep_reason = member.pop("waiting", None)
        if member:
            data["lineage"] = {**data["lineage"], "sweep": member}
        reason = sweep_reason or team_reason
        if reason and data.get("admission") is None:
            at = str(data.get("updated_at") or now())
            waits_for = (
                "selection"
                if reason.startswith("at selection")
                else "conversion"
                if "to convert" in reason
                else "sweep-slot"
                if sweep_reason
                else "team-place"
            )
            data["admission"] = {"waits_for": waits_for, "reason": reason, "since": at}
        return data

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def team(self) -> str:
        """The team whose run this is (``default`` on a deployment without teams)."""
        return self.source.team or DEFAULT_TEAM

    def set_state(self, new: State) -> None:
        if new == self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(f"run {self.run_id}: {self.state} → {new} is not allowed")
        self.state = new

    def reopen(self) -> None:
        """failed | cancelled → accepted, for a new round (``control.lifecycle.retry_rounds.start_round`` only)."""
        if self.state not in RETRYABLE:
            raise IllegalTransition(f"run {self.run_id}: {self.state} cannot be retried")
        self.state = "accepted"

    def current_round(self) -> Round | None:
        """The retry that started the current round; None in round 1."""
        return next((r for r in reversed(self.rounds) if r.round == self.round), None)

    def current_attempt(self, stage: str) -> Attempt | None:
        found = [a for a in self.attempts if a.stage == stage]
        return max(found, key=lambda a: a.attempt) if found else None

    def attempt_record(self, stage: str, attempt: int) -> Attempt | None:
        return next((a for a in self.attempts if a.stage == stage and a.attempt == attempt), None)


def _member(data: dict[str, Any]) -> dict[str, Any]:
    lineage = data.get("lineage")
    member = lineage.get("sweep") if isinstance(lineage, dict) else None
    return member if isinstance(member, dict) else {}
