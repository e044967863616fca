"""The run ledger: a run's durable record in GCS, written only with generation preconditions.

It lives in the state bucket (``Settings.state_bucket``), apart from the artifacts the workloads
write: the workload identity has no access there, so no training container can rewrite a ledger.

``runs/<run_id>/run.json`` is created once with ``if_generation_match=0`` (the claim); every
later write is a compare-and-swap on the generation that was read, retried a bounded number of
times on 412 by re-reading and re-applying the change. Each successful write also leaves a small,
never-rewritten history object ``runs/<run_id>/events/<seq>-<what>.json``.

State machine (illegal transitions raise ``IllegalTransition``)::

    accepted → converting → training → exporting → [publishing →] succeeded
        │           │           │           │              │
        └───────────┴───────────┴───────────┴──────────────┴──→ failed | cancelled
    accepted → training            (conversion cache hit)
    training → gated               (the quality gate held the model back; terminal)
    gated → training               (``rlpipe promote``: a person overrides the gate; the run goes on)
    accepted → exporting | publishing | succeeded  (a retried round whose earlier, or all, stages are done)
    failed | cancelled → accepted  (only ``RunRecord.reopen``: ``rlpipe retry`` starts a new round)

A run's rounds: round 1 is the original request; each retry (``control.retry``) appends a
``Round`` and continues the same run (same run id, attempt numbers going on, same checkpoints).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlpipe.control import blobstore, interleave
from rlpipe.core import layout
from rlpipe.core.identity import Stage

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
]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "gated"})
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
    "training": frozenset({"exporting", "failed", "cancelled", "gated"}),
    "exporting": frozenset({"publishing", "succeeded", "failed", "cancelled"}),
    "publishing": frozenset({"succeeded", "failed", "cancelled"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
    "gated": frozenset({"training"}),  # promote
}
# The states a retry may reopen (``RunRecord.reopen``); never through ``set_state``.
RETRYABLE: frozenset[str] = frozenset({"failed", "cancelled"})

CAS_ATTEMPTS = 8
# The character right after "/" in byte order: "runs/<id>0" sorts after every "runs/<id>/...".
_AFTER_SLASH = chr(ord("/") + 1)


LEDGER_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def now() -> str:
    return datetime.now(UTC).strftime(LEDGER_TIME)


def parse_time(timestamp: str) -> datetime:
    """A ledger timestamp (``now()``'s format) as an aware UTC datetime."""
    return datetime.strptime(timestamp, LEDGER_TIME).replace(tzinfo=UTC)


class IllegalTransition(Exception):
    pass


class ConcurrentUpdate(Exception):
    """CAS kept losing: too many writers at once. Callers treat it as transient."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(_Model):
    kind: Literal["gcs", "pubsub", "upstream", "cli"]
    bucket: str | None = None
    name: str | None = None
    generation: str | None = None
    topic: str | None = None
    message_id: str | None = None


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
    chip_hours: float | None = None  # TPU chip-hours its pods held (core.chip_hours), at the last status read
    cost_estimate: float | None = None  # chip_hours at the mode's list price (core.cost); None: no price
    round: int = 1  # the run's round when it was launched (retry budgets and deadlines count per round)
    # The failure class whose retry budget (or the retry cap) this failure used up: the attempt
    # is then ``permanent``, but what happened was that class (control/budgets.py).
    budget_exhausted: str | None = None
    # Where the next read of the head's log starts (cluster/log_cursor.py; train attempts only).
    log_cursor: dict[str, Any] | None = None


# ---- a sweep (control/sweep): the parent's coordination record and a child's membership -------
# Every change to a parent is a compare-and-swap on its run.json (``Ledger.update``), which is
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
    cancelled: bool = False
    # Who cancelled it: the identity Google verified on the rlpipe cancel call (control/callers.py).
    cancelled_by: str | None = None


class SweepMember(_Model):
    """A child's place in its sweep: which parent, which point of the grid."""

    parent: str
    index: int
    size: int
    point: dict[str, Any]
    waiting: str | None = None  # why it is queued (no slot, or the shared conversion not ready)
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
    caller: str | None = None  # the identity Google verified on the call (control/callers.py)


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
    export_uri: str | None = None
    published_to: str | None = None  # repo@branch on the Hugging Face Hub (the publish stage)
    published_commit: str | None = None  # the Hub commit that holds this run's model (its receipt's)
    promoted: GateOverride | None = None  # a person overrode the quality gate: who, when, why
    pinning: dict[str, Any] | None = None  # what every read of the HF repo is pinned to, and how
    # The datasets plan pinned: {"train": …, "eval": …}, each control.hub_datasets' record (repo,
    # commit, subset, split, every data file with its size and sha256) and where it is staged.
    data: dict[str, Any] | None = None
    # The user's files intake copied under the run's prefix: role (rewards, processor,
    # chat_template) → {uri, sha256, size, functions}; every attempt checks these bytes.
    inputs: dict[str, Any] | None = None
    sweep: SweepMember | None = None  # a sweep's child: its parent and its point (control/sweeps.py)


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
    # (control/callers.py); None when the pipeline ended it.
    caller: str | None = None


class Round(_Model):
    """One retry of the run (``rlpipe retry``, through the stage function): round 2 onwards."""

    round: int
    by: str  # the name the person gave
    caller: str | None = None  # the identity Google verified on the call (control/callers.py)
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
    created_at: str = Field(default_factory=now)
    updated_at: str = Field(default_factory=now)
    seq: int = 1

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def set_state(self, new: State) -> None:
        if new == self.state:
            return
        if new not in _ALLOWED[self.state]:
            raise IllegalTransition(f"run {self.run_id}: {self.state} → {new} is not allowed")
        self.state = new

    def reopen(self) -> None:
        """failed | cancelled → accepted, for a new round (``control.retry.start_round`` only)."""
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


class Ledger:
    """Reads and writes run records in the state bucket (``store``), which no workload can write."""

    def __init__(self, store: blobstore.BlobStore, *, sleep: Callable[[float], None] = time.sleep):
        self.store = store
        self.sleep = sleep

    def layout(self, run_id: str) -> layout.RunLayout:
        return layout.RunLayout(self.store.bucket_name, run_id)

    def claim(self, record: RunRecord) -> bool:
        """Create the record if no one has; True only for the caller that created it."""
        run = self.layout(record.run_id)
        generation = self.store.create(run.ledger, blobstore.dumps(record.model_dump(mode="json")))
        if generation is None:
            return False
        self._event(
            record.run_id,
            1,
            "accepted",
            {"state": record.state, "key": record.key, "source": record.source.model_dump(exclude_none=True)},
        )
        return True

    def load(self, run_id: str) -> tuple[RunRecord, int]:
        data, generation = self.store.read_json(self.layout(run_id).ledger)
        return RunRecord.model_validate(data), generation

    def get(self, run_id: str) -> RunRecord | None:
        try:
            return self.load(run_id)[0]
        except blobstore.NotFound:
            return None

    def peek(self, run_id: str) -> RunRecord | None:
        """The record in one GET (no metadata request, so no generation): for scans that only
        decide whether to act, such as the reconciler reading thousands of ledgers. Every write
        still goes through ``update``, which re-reads under compare-and-swap."""
        from google.api_core import exceptions as gexc

        blob = self.store.client.bucket(self.store.bucket_name).blob(self.layout(run_id).ledger)
        try:
            return RunRecord.model_validate_json(blob.download_as_bytes())
        except gexc.NotFound:
            return None

    def update(
        self,
        run_id: str,
        change: Callable[[RunRecord], str | None],
        *,
        detail: Callable[[RunRecord], dict[str, Any]] | None = None,
    ) -> RunRecord:
        """Apply ``change`` (which mutates the record and returns an event name, or None for
        "nothing to do") under compare-and-swap, re-reading and re-applying on conflict."""
        for attempt in range(CAS_ATTEMPTS):
            record, generation = self.load(run_id)
            interleave.point("ledger.update:read")
            what = change(record)
            if what is None:
                return record
            record.seq += 1
            record.updated_at = now()
            try:
                self.store.replace(
                    self.layout(run_id).ledger, blobstore.dumps(record.model_dump(mode="json")), generation
                )
            except blobstore.PreconditionFailed:
                self.sleep(min(0.05 * 2**attempt, 1.0) * random.uniform(0.5, 1.5))
                continue
            self._event(run_id, record.seq, what, detail(record) if detail else {"state": record.state})
            return record
        raise ConcurrentUpdate(f"run {run_id}: ledger changed under us {CAS_ATTEMPTS} times")

    def _event(self, run_id: str, seq: int, what: str, detail: dict[str, Any]) -> None:
        body = {"run_id": run_id, "seq": seq, "event": what, "time": now(), **detail}
        self.store.create(self.layout(run_id).event(seq, what), blobstore.dumps(body))

    def note(self, run_id: str, what: str, detail: dict[str, Any]) -> None:
        """A history event that changes nothing in the record (e.g. a duplicate delivery seen)."""
        self.update(run_id, lambda r: what, detail=lambda r: detail)

    def history(self, run_id: str) -> list[dict[str, Any]]:
        names = sorted(self.store.list(self.layout(run_id).events_prefix))
        return [self.store.read(n).json() for n in names]

    def rejection(self, run_id: str) -> dict[str, Any] | None:
        """The rejection record written for ``run_id`` (``write_error``), if any."""
        return self._record(self.layout(run_id).error)

    def _record(self, name: str) -> dict[str, Any] | None:
        """A JSON object the control plane wrote once, if it is there and reads as one."""
        try:
            body = self.store.read(name).json()
        except (blobstore.NotFound, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def write_error(self, run_id: str, body: dict[str, Any]) -> bool:
        """The readable rejection record of a request that never became a run (written once)."""
        run = self.layout(run_id)
        created = self.store.create(run.error, blobstore.dumps(body)) is not None
        if created:
            self._event(
                run_id, 0, "rejected", {"problems": body.get("problems", []), "source": body.get("source")}
            )
        return created

    def write_delivery(self, delivery_id: str, body: dict[str, Any]) -> bool:
        """Which run a delivery went to, when its id is not the run's (a ``request_id`` named the
        run): written once, so a redelivery of the same event leaves the first answer."""
        return self.store.create(self.layout(delivery_id).delivery, blobstore.dumps(body)) is not None

    def delivery(self, delivery_id: str) -> dict[str, Any] | None:
        """The record :meth:`write_delivery` left for ``delivery_id``, if any."""
        return self._record(self.layout(delivery_id).delivery)

    def list_run_ids(self) -> list[str]:
        ids = set()
        for name in self.store.list(layout.RUNS_PREFIX):
            parts = name.split("/")
            if len(parts) >= 3 and parts[2] == "run.json":
                ids.add(parts[1])
        return sorted(ids)

    def list_run_ids_page(self, after: str = "", limit: int = 500) -> RunIdPage:
        """Up to ``limit`` run ids that sort after ``after``, in listing order, without listing
        any run's objects: a delimiter listing of ``runs/`` returns one prefix per run, starting
        at an offset past ``after``'s own objects, so a scan of thousands of runs resumes from a
        cursor instead of re-reading every checkpoint and event name.

        Prefixes without a ``run.json`` (a rejected request's ``error.json``) are included; the
        caller finds no ledger there. Order is that of ``"<id>/"`` (the bucket's byte order).
        """
        if limit < 1:
            raise ValueError("limit must be >= 1")
        start = f"{layout.RUNS_PREFIX}{after}{_AFTER_SLASH}" if after else layout.RUNS_PREFIX
        listing = self.store.client.list_blobs(
            self.store.bucket_name,
            prefix=layout.RUNS_PREFIX,
            delimiter="/",
            start_offset=start,
            page_size=limit,
        )
        found: set[str] = set()
        for page in listing.pages:  # some servers ignore page_size with a delimiter: cut below
            found.update(p[len(layout.RUNS_PREFIX) : -1] for p in page.prefixes)
            if len(found) > limit:
                break
        ids = sorted((i for i in found if i and _order(i) > _order(after)), key=_order)
        more = len(ids) > limit or bool(listing.next_page_token)
        return RunIdPage(ids[:limit], more)

    def has_event(self, run_id: str, what: str) -> bool:
        """Whether the run's history holds an event named ``what`` (for notes written once)."""
        suffix = f"-{what}.json"
        return any(name.endswith(suffix) for name in self.store.list(self.layout(run_id).events_prefix))


@dataclass(frozen=True)
class RunIdPage:
    run_ids: list[str]
    more: bool  # more ids may follow the last one (ask again with after=run_ids[-1])


def _order(run_id: str) -> str:
    return run_id + "/" if run_id else ""
