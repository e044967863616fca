"""Retry: a ``failed`` or ``cancelled`` run continues as a new round of the same run.

Why the same run and not a new request: the run id, its checkpoints, its conversion and its
history stay; training resumes from the last committed step and attempt numbers go on (so every
workload name stays unique and an older attempt can never be mistaken for the current one).
What starts afresh is what limits one round: the retry budgets, the workflow's retry cap and the
stage deadlines.

Who may retry: whoever may invoke the stage function (the operators, through their service
account or their own accounts in ``var.stage_invokers``), not whoever may drop a request. So a
retry is a stage operation (``rlpipe retry`` → ``{"op": "retry", ...}``), the identity Google
verified on the call is recorded beside the ``by`` a person gives (control/adapters/callers.py), and a
retry document dropped in the requests bucket or published on the requests topic is refused by
intake. The call carries a key the CLI makes once: ``start_round`` appends at most one ``Round``
per key, in one compare-and-swap, and the execution is then started by intake's exactly-once
start (``Intake.start_claimed``), so a call repeated after a lost answer makes one round and one
execution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from rlpipe.control.adapters import blobstore
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import RunPolicies
from rlpipe.core import identity
from rlpipe.core.identity import STAGES, Stage
from rlpipe.core.runs import end_record
from rlpipe.core.runs.record import Attempt, RunRecord

DOCUMENT_KEY = "retry"  # a document whose only key is this is a retry document, which intake refuses
FIELDS = ("run_id", "from", "reason", "by", "key")
MAX_REASON = 1000
MAX_BY = 200
CLIENT_KEY = re.compile(r"[A-Za-z0-9_-]{16,64}")  # what the CLI makes: a uuid4's hex
KEY_PREFIX = "call:"  # a round's key: the caller's key in its own namespace
ACTIVE = frozenset({"accepted", "converting", "training", "exporting", "publishing"})
REFUSED_DOCUMENT = (
    "a retry is not a request: it goes through the stage function, where the caller is checked "
    "(`rlpipe retry RUN --reason ...`, for those allowed to invoke it); this document started nothing"
)

Outcome = Literal["started", "duplicate", "refused"]


@dataclass(frozen=True)
class RetryDecision:
    outcome: Outcome
    run_id: str | None
    reason: str = ""  # why it was refused
    round: int | None = None  # the round started, or the one the repeated call started
    record: RunRecord | None = None


@dataclass(frozen=True)
class RetryOrder:
    """A checked retry call."""

    run_id: str
    reason: str
    key: str
    from_stage: Stage | None = None
    by: str | None = None


class BadRetry(ValueError):
    """The retry call is malformed; the message says what to fix."""


# ---- deciding ---------------------------------------------------------------------------------


def run_stages(record: RunRecord) -> tuple[Stage, ...]:
    """The stages this run's request has (``publish`` only with a publish section)."""
    return identity.stages_for(publish=bool(record.request.get("publish")))


def refusal(
    record: RunRecord, from_stage: str | None = None, policies: RunPolicies | None = None
) -> str | None:
    """Why this run cannot be retried now (None: it can): first what the run policies say of it (a
    gated sweep ships through a child), then the rules of a run's rounds. The CLI shows it before
    submitting."""
    run = record.run_id
    if policies is not None and (why := policies.refusal(record, "retry")) is not None:
        return why
    if record.state == "succeeded":
        return f"run {run} succeeded; there is nothing to retry"
    if record.state == "gated":
        return (
            f"run {run} is gated (the quality gate held the model back); "
            f"use `rlpipe promote {run} --reason …` to ship it anyway"
        )
    if record.state == "stopped":
        return (
            f"run {run} was stopped early by its sweep's rule, as the sweep's request asked "
            "(`rlpipe status` on it says at which step and why); it is not trained again"
        )
    if record.state in ACTIVE:
        return (
            f"run {run} is still running (state {record.state}); cancel it first with `rlpipe cancel {run}`"
        )
    if from_stage is not None and from_stage not in run_stages(record):
        return f"run {run} has no {from_stage} stage; retry from one of {', '.join(run_stages(record))}"
    return None


def start_round(
    ledger: Ledger,
    run_id: str,
    *,
    by: str,
    reason: str,
    from_stage: str | None,
    key: str,
    caller: str | None = None,
) -> RetryDecision:
    """Open the run's next round in ONE compare-and-swap; the caller then starts its execution
    (``Intake.start_claimed``). A round with the same ``key`` already existing is a repeated
    call: nothing changes, and starting again finds the execution (or the lease) in place."""
    if not reason.strip():
        return RetryDecision("refused", run_id, "a reason is required: say why the run should go on")
    if from_stage is not None and from_stage not in STAGES:
        return RetryDecision(
            "refused", run_id, f"unknown stage {from_stage!r}; use one of {', '.join(STAGES)}"
        )

    asked = end_record.RoundAsked(by=by, caller=caller, from_stage=from_stage, reason=reason, key=key)

    def change(r: RunRecord) -> tuple[str | None, RetryDecision]:
        event, round_, why = end_record.open_round(r, asked, refusal(r, from_stage))
        if why is not None:
            return None, RetryDecision("refused", run_id, why)
        return event, RetryDecision("started" if event else "duplicate", run_id, round=round_ or r.round)

    try:
        record, decision = ledger.update(run_id, change, detail=lambda r: r.rounds[-1].model_dump())
    except blobstore.NotFound:
        return RetryDecision("refused", run_id, f"no run {run_id}")
    return replace(decision, record=record)


# ---- the call ----------------------------------------------------------------------------------


def is_retry_document(doc: Any) -> bool:
    """A mapping whose only key is ``retry`` (a request's own ``retry`` section sits beside
    ``model`` and ``hf_repo``, so the two cannot be confused): intake refuses it."""
    return isinstance(doc, dict) and set(doc) == {DOCUMENT_KEY}


def call_body(
    run_id: str, *, reason: str, key: str, from_stage: str | None = None, by: str | None = None
) -> dict[str, Any]:
    """The stage call ``rlpipe retry`` makes."""
    body: dict[str, Any] = {"op": "retry", "run_id": run_id, "reason": reason, "key": key}
    if from_stage is not None:
        body["from"] = from_stage
    if by is not None:
        body["by"] = by
    return body


def parse_order(body: dict[str, Any]) -> RetryOrder:
    """The call's fields, checked; ``BadRetry`` names the first problem (and never echoes a value)."""
    unknown = sorted(str(k)[:40] for k in body if k not in (*FIELDS, "op"))
    if unknown:
        raise BadRetry(f"unknown field(s) in retry: {', '.join(unknown)}; allowed: {', '.join(FIELDS)}")
    run_id = body.get("run_id")
    if not identity.is_run_id(run_id):
        raise BadRetry("run_id must be a run id (as `rlpipe list` shows it, e.g. rabc123def45)")
    key = body.get("key")
    if not isinstance(key, str) or not CLIENT_KEY.fullmatch(key):
        raise BadRetry("key must be 16 to 64 letters, digits, - or _, made once per retry by the caller")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise BadRetry("reason is required: say why the run should go on")
    if len(reason) > MAX_REASON:
        raise BadRetry(f"reason is {len(reason)} characters; keep it under {MAX_REASON}")
    stage = body.get("from")
    if stage is not None and stage not in STAGES:
        raise BadRetry(f"from must be one of {', '.join(STAGES)} (or absent)")
    by = body.get("by")
    if by is not None and (not isinstance(by, str) or not by.strip() or len(by) > MAX_BY):
        raise BadRetry(f"by must be a non-empty name under {MAX_BY} characters (or absent)")
    return RetryOrder(
        run_id, reason.strip(), KEY_PREFIX + key, cast(Stage | None, stage), by.strip() if by else None
    )


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
