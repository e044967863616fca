"""Retry: a ``failed`` or ``cancelled`` run continues as a new round of the same run.

Why the same run and not a new request: the run id, its checkpoints, its conversion and its
history stay; training resumes from the last committed step and attempt numbers go on (so every
workload name stays unique and an older attempt can never be mistaken for the current one).
What starts afresh is what limits one round: the retry budgets, the workflow's retry cap and the
stage deadlines.

A retry arrives like a request (``rlpipe retry``, a control document dropped in the requests
bucket or published on the requests topic)::

    {"retry": {"run_id": "r…", "from": "train", "reason": "…", "by": "…"}}

and is idempotent on the delivery's own key: ``start_round`` appends at most one ``Round`` per
key, in one compare-and-swap, and the execution is then started by intake's exactly-once start
(``Intake.start_claimed``), so the same retry delivered twice makes one round and one execution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, cast

from rlpipe.control import blobstore
from rlpipe.control.ledger import Attempt, Execution, Ledger, Round, RunRecord, Source, now
from rlpipe.control.logs import Logger
from rlpipe.core import identity
from rlpipe.core.identity import STAGES, Stage

DOCUMENT_KEY = "retry"  # a document whose only key is this is a retry, not a request
FIELDS = ("run_id", "from", "reason", "by")
MAX_REASON = 1000
MAX_BY = 200
_RUN_ID = re.compile(r"[a-z][a-z0-9]{1,40}")  # what a run id may look like (a path component)
ACTIVE = frozenset({"accepted", "converting", "training", "exporting", "publishing"})

Outcome = Literal["started", "duplicate", "refused", "malformed"]


@dataclass(frozen=True)
class RetryDecision:
    outcome: Outcome
    run_id: str | None
    reason: str = ""  # why it was refused (or what is malformed)
    round: int | None = None  # the round started, or the one the duplicate delivery started
    record: RunRecord | None = None


@dataclass(frozen=True)
class RetryOrder:
    """A parsed retry control document."""

    run_id: str
    reason: str
    from_stage: Stage | None = None
    by: str | None = None


class BadRetry(ValueError):
    """The retry document is malformed; the message says what to fix."""


# ---- deciding ---------------------------------------------------------------------------------


def run_stages(record: RunRecord) -> tuple[Stage, ...]:
    """The stages this run's request has (``publish`` only with a publish section)."""
    return identity.STAGES if record.request.get("publish") else identity.MAXTEXT_STAGES


def refusal(record: RunRecord, from_stage: str | None = None) -> str | None:
    """Why this run cannot be retried now (None: it can). The CLI shows it before submitting."""
    run = record.run_id
    if record.state == "succeeded":
        return f"run {run} succeeded; there is nothing to retry"
    if record.state == "gated":
        return (
            f"run {run} is gated (the quality gate held the model back); "
            f"use `rlpipe promote {run} --reason …` to ship it anyway"
        )
    if record.state in ACTIVE:
        return (
            f"run {run} is still running (state {record.state}); cancel it first with `rlpipe cancel {run}`"
        )
    if from_stage is not None and from_stage not in run_stages(record):
        return f"run {run} has no {from_stage} stage; retry from one of {', '.join(run_stages(record))}"
    return None


def start_round(
    ledger: Ledger, run_id: str, *, by: str, reason: str, from_stage: str | None, key: str
) -> RetryDecision:
    """Open the run's next round in ONE compare-and-swap; the caller then starts its execution
    (``Intake.start_claimed``). A round with the same ``key`` already existing is a duplicate
    delivery: nothing changes, and starting again finds the execution (or the lease) in place."""
    if not reason.strip():
        return RetryDecision("refused", run_id, "a reason is required: say why the run should go on")
    if from_stage is not None and from_stage not in STAGES:
        return RetryDecision(
            "refused", run_id, f"unknown stage {from_stage!r}; use one of {', '.join(STAGES)}"
        )
    decision: dict[str, Any] = {}

    def change(r: RunRecord) -> str | None:
        decision.clear()  # a compare-and-swap may run this again on a newer record
        same = next((x for x in r.rounds if x.key == key), None)
        if same is not None:
            decision.update(outcome="duplicate", round=same.round)
            return None
        why = refusal(r, from_stage)
        if why is not None:
            decision.update(outcome="refused", reason=why)
            return None
        r.rounds.append(
            Round(
                round=r.round + 1,
                by=by,
                at=now(),
                from_stage=from_stage,
                reason=reason.strip(),
                key=key,
                previous_state=r.state,
                previous_failure=r.failure.model_dump() if r.failure else None,
            )
        )
        r.round += 1
        r.reopen()
        r.failure = None
        r.execution = Execution()  # fresh: intake's exactly-once start takes a lease on it
        decision.update(outcome="started", round=r.round)
        return "retried"

    try:
        record = ledger.update(run_id, change, detail=lambda r: r.rounds[-1].model_dump())
    except blobstore.NotFound:
        return RetryDecision("refused", run_id, f"no run {run_id}")
    return RetryDecision(
        decision["outcome"], run_id, decision.get("reason", ""), decision.get("round"), record
    )


# ---- the control document ---------------------------------------------------------------------


def is_retry_document(doc: Any) -> bool:
    """A mapping whose only key is ``retry`` (a request's own ``retry`` section sits beside
    ``model`` and ``hf_repo``, so the two cannot be confused)."""
    return isinstance(doc, dict) and set(doc) == {DOCUMENT_KEY}


def document(
    run_id: str, *, reason: str, from_stage: str | None = None, by: str | None = None
) -> dict[str, Any]:
    """The control document ``rlpipe retry`` submits."""
    body: dict[str, Any] = {"run_id": run_id, "reason": reason}
    if from_stage is not None:
        body["from"] = from_stage
    if by is not None:
        body["by"] = by
    return {DOCUMENT_KEY: body}


def parse_order(doc: dict[str, Any]) -> RetryOrder:
    """The document's fields, checked; ``BadRetry`` names the first problem."""
    body = doc.get(DOCUMENT_KEY)
    if not isinstance(body, dict):
        raise BadRetry("`retry` must be a mapping with run_id and reason (and optionally from, by)")
    unknown = sorted(str(k)[:40] for k in body if k not in FIELDS)
    if unknown:
        raise BadRetry(f"unknown field(s) in retry: {', '.join(unknown)}; allowed: {', '.join(FIELDS)}")
    run_id = body.get("run_id")
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise BadRetry("retry.run_id must be a run id (as `rlpipe list` shows it, e.g. rabc123def45)")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise BadRetry("retry.reason is required: say why the run should go on")
    if len(reason) > MAX_REASON:
        raise BadRetry(f"retry.reason is {len(reason)} characters; keep it under {MAX_REASON}")
    stage = body.get("from")
    if stage is not None and stage not in STAGES:
        raise BadRetry(f"retry.from must be one of {', '.join(STAGES)} (or absent)")
    by = body.get("by")
    if by is not None and (not isinstance(by, str) or not by.strip() or len(by) > MAX_BY):
        raise BadRetry(f"retry.by must be a non-empty name under {MAX_BY} characters (or absent)")
    return RetryOrder(run_id, reason.strip(), cast(Stage | None, stage), by.strip() if by else None)


def describe_source(source: Source) -> str:
    """Who asked, when the document does not say: where it came from."""
    if source.kind == "gcs":
        return f"gs://{source.bucket}/{source.name}"
    if source.kind == "pubsub":
        return f"{source.topic} message {source.message_id}"
    return source.kind


def from_document(
    ledger: Ledger, doc: dict[str, Any], *, key: str, source: Source, log: Logger
) -> RetryDecision:
    """A retry control document → a round (or a recorded refusal). Never raises for a refusal or
    a malformed document: those are logged (and noted on the run when it exists), never retried."""
    try:
        order = parse_order(doc)
    except BadRetry as exc:
        body = doc.get(DOCUMENT_KEY)
        named = body.get("run_id") if isinstance(body, dict) else None
        run_id = named if isinstance(named, str) and _RUN_ID.fullmatch(named) else None
        _refused(ledger, log, run_id, str(exc), key, malformed=True)
        return RetryDecision("malformed", run_id, str(exc))
    by = order.by or describe_source(source)
    decision = start_round(
        ledger, order.run_id, by=by, reason=order.reason, from_stage=order.from_stage, key=key
    )
    log = log.bind(run_id=order.run_id)
    if decision.outcome == "refused":
        _refused(ledger, log, order.run_id, decision.reason, key, by=by, from_stage=order.from_stage)
    elif decision.outcome == "duplicate":
        log.info("duplicate retry delivery: its round exists", round=decision.round, key=key)
    else:
        log.info("retry: new round", round=decision.round, by=by, from_stage=order.from_stage, key=key)
    return decision


def _refused(
    ledger: Ledger,
    log: Logger,
    run_id: str | None,
    reason: str,
    key: str,
    *,
    malformed: bool = False,
    by: str | None = None,
    from_stage: str | None = None,
) -> None:
    log.bind(run_id=run_id).warning(
        "retry document malformed; ignored" if malformed else "retry refused", reason=reason, key=key
    )
    if run_id is None:
        return
    try:
        if ledger.get(run_id) is not None:
            ledger.note(run_id, "retry-refused", {"reason": reason, "key": key, "by": by, "from": from_stage})
    except blobstore.NotFound:
        pass


# ---- what the current round runs ----------------------------------------------------------------


def forced_stages(record: RunRecord) -> set[str]:
    """Stages the current round runs again even if their done rule holds: those at or after the
    round's ``from`` stage. Empty in round 1 and for a retry without ``from``."""
    current = record.current_round()
    if current is None or current.from_stage is None:
        return set()
    return set(STAGES[STAGES.index(current.from_stage) :])


def first_attempts(record: RunRecord) -> dict[str, int]:
    """Per stage, the attempt number the next launch takes: one past the highest in any round."""
    return {
        stage: max((a.attempt for a in record.attempts if a.stage == stage), default=0) + 1
        for stage in run_stages(record)
    }


def this_round(record: RunRecord, stage: str) -> list[Attempt]:
    """The stage's attempts launched in the record's current round."""
    return [a for a in record.attempts if a.stage == stage and a.round == record.round]
