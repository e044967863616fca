"""What the reconciler concludes from the three sources of truth, as pure rules (no I/O).

The reconciler is level-triggered: it does not remember what it saw last time, it compares what
*is* (a ledger, an execution, the objects in the cluster) and derives one action per difference.
Keeping those comparisons here, away from the clients, means a dry run and a real pass reach
the same conclusions by construction, and each rule can be read in one place:

* a claim (``accepted``) older than ``min_age`` with no execution and no live start lease → start;
* a non-terminal run whose execution is FAILED, CANCELLED or gone → failed / cancelled, with the
  execution's error as the reason; SUCCEEDED → finished from the export's completeness;
* a workload whose run is terminal or unknown, or which is an older attempt than the run's
  current one for its stage → delete;
* a queued or running workload past its stage deadline → report, and leave it alone (deciding
  that a 30-hour training run is dead is a person's call, not a timer's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from rlpipe.cluster import RunObject
from rlpipe.control.adapters.orchestrator import ExecutionInfo
from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import FailureClass
from rlpipe.core.layout import Completeness
from rlpipe.core.runs.record import RunRecord, parse_time

ActionKind = Literal["start", "finish", "delete", "report"]
# The history event of a waiting run reported stuck by the liveness check (``rlpipe status`` reads it).
STUCK_WAITING_EVENT = "reconcile-stuck-waiting"
# The history event of a waiting run one pass found stuck: reported only if the next pass finds it
# stuck in the same wait (``same_wait``), since one pass reads the records and the teams' usage at
# slightly different moments and can see a chain that is already moving.
STUCK_SUSPECTED_EVENT = "reconcile-stuck-suspected"


def wait_of(record: RunRecord) -> dict[str, Any]:
    """What a stuck report is about: the wait the run is in (what for, and since when)."""
    admission = record.admission
    return {"waits_for": admission.waits_for, "waits_since": admission.since} if admission else {}


def same_wait(event: dict[str, Any] | None, record: RunRecord) -> bool:
    """Was ``event`` (a stuck report or suspicion) about the wait the run is in now? A report
    written before reports named their wait counts as about it, as it was read then."""
    wait = wait_of(record)
    if event is None or not wait:
        return False
    return all(event.get(k, v) == v for k, v in wait.items())


def confirmed(suspected: dict[str, Any] | None, record: RunRecord, previous_pass: str | None) -> bool:
    """Did the pass just before this one (``previous_pass``: when it began) find the run stuck in
    the wait it is in now? Only then is it reported: a suspicion from any earlier pass is stale,
    since a pass in between found it moving."""
    return (
        suspected is not None
        and bool(previous_pass)
        and suspected.get("pass") == previous_pass
        and same_wait(suspected, record)
    )


MAX_REASON = 1000
# The failure tags a workflow error may carry: the failure classes, the gate's `gated` (a run the
# quality gate held back ends `gated`, not `failed`, whoever finishes it) and early stopping's
# `stopped` (a sweep's child its rule stopped ends `stopped`).
_CLASSES = frozenset(c.value for c in FailureClass) | {"gated", "stopped"}


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str
    stage: str | None
    attempt: int | None
    phase: str

    @classmethod
    def of(cls, obj: RunObject) -> Workload:
        return cls(obj.kind, obj.name, obj.stage, obj.attempt, obj.phase)


@dataclass(frozen=True)
class Action:
    """One repair: what was found (evidence a person can check) and what is (to be) done."""

    kind: ActionKind
    run_id: str
    found: str
    do: str
    execution: str | None = None  # finish: the execution whose state is the evidence
    outcome: str | None = None  # finish: succeeded | failed | cancelled
    failure: dict[str, Any] | None = None  # finish: {tag, message, stage, attempt, rule}
    workload: Workload | None = None  # delete / report
    run_known: bool = True  # delete: False when no ledger exists (nothing to record it in)
    message: dict[str, Any] | None = None  # report: the status message

    @property
    def event(self) -> str:
        """The history event name this action writes (the report's name makes it once-only)."""
        if self.kind == "finish":
            return f"reconcile-{self.outcome}"
        if self.kind == "report":
            return f"reconcile-stuck-{self.workload.name}" if self.workload else STUCK_WAITING_EVENT
        return {"start": "reconcile-started", "delete": "reconcile-deleted"}.get(
            self.kind, f"reconcile-{self.kind}"
        )

    def line(self) -> str:
        subject = f"{self.workload.kind} {self.workload.name}" if self.workload else f"run {self.run_id}"
        return f"{self.kind:<6} {subject}: found {self.found} → {self.do}"


# ---- 1. claims that never started -------------------------------------------------------------


def claim_action(record: RunRecord, now: float, *, min_age: float) -> Action | None:
    if record.state != "accepted" or record.execution.name:
        return None
    if record.sweep is not None:
        return None  # a sweep's parent has no execution of its own: its children do the work
    age = now - epoch(record.created_at)
    if age < min_age:
        return None  # intake may still be starting it
    lease = record.execution.lease_until
    if record.execution.lease_holder and lease is not None and lease > now:
        return None  # a start is in progress right now
    return Action(
        "start",
        record.run_id,
        found=f"claimed {duration(age)} ago, no execution, no live start lease",
        do="start its execution (intake's start path, same lease)",
    )


# ---- 2. ledgers against executions ------------------------------------------------------------


def execution_action(
    record: RunRecord, info: ExecutionInfo | None, export: Completeness | None
) -> Action | None:
    """``info`` is None when the recorded execution does not exist; ``export`` is read only for
    a SUCCEEDED execution."""
    name = record.execution.name
    if record.terminal or not name:
        return None
    short = name.rsplit("/", 1)[-1]

    def finish(outcome: str, found: str, failure: dict[str, Any] | None) -> Action:
        do = (
            f"mark the run {outcome}"
            + (f" ({failure['message']})" if failure else "")
            + ", publish its status, delete its workloads"
        )
        return Action(
            "finish", record.run_id, found=found, do=do, execution=name, outcome=outcome, failure=failure
        )

    if info is None:
        return finish(
            "failed",
            f"state {record.state}, execution {short} no longer exists",
            {
                "tag": "permanent",
                "stage": record.stage,
                "attempt": record.attempt or None,
                "message": f"workflow execution {short} no longer exists; nothing drives this run",
                "rule": reported.EXECUTION_MISSING,
            },
        )
    if info.state == "FAILED":
        return finish(
            "failed", f"state {record.state}, execution {short} FAILED", execution_failure(info, record)
        )
    if info.state == "CANCELLED":
        why = _payload_message(info.error)
        return finish(
            "cancelled",
            f"state {record.state}, execution {short} CANCELLED",
            {
                "tag": "cancelled",
                "stage": record.stage,
                "attempt": record.attempt or None,
                "message": _bounded(
                    f"workflow execution {short} was cancelled" + (f": {why}" if why else "")
                ),
                "rule": reported.EXECUTION_CANCELLED,
            },
        )
    if info.state == "SUCCEEDED":
        found = f"state {record.state}, execution {short} SUCCEEDED"
        if export is not None and export.complete and record.state == "exporting":
            return finish("succeeded", f"{found}, export complete ({export.reason})", None)
        why = (
            f"the export is complete but the ledger never reached exporting (it is {record.state})"
            if export is not None and export.complete
            else f"the export is incomplete: {export.reason if export else 'not checked'}"
        )
        return finish(
            "failed",
            f"{found}, {why}",
            {
                "tag": "permanent",
                "stage": "export",
                "attempt": None,
                "message": _bounded(f"workflow execution {short} succeeded but {why}"),
                "rule": reported.EXECUTION_SUCCEEDED_INCOMPLETE,
            },
        )
    return None  # ACTIVE (or QUEUED): the workflow owns the run


def execution_failure(info: ExecutionInfo, record: RunRecord) -> dict[str, Any]:
    """The workflow's error map (``{tags, message, stage, attempt}``) as a ledger failure."""
    short = info.name.rsplit("/", 1)[-1]
    payload = _payload(info.error)
    tag, stage, attempt = "permanent", record.stage, record.attempt or None
    if isinstance(payload, dict):
        tags = payload.get("tags")
        first = next((t for t in tags if t in _CLASSES), None) if isinstance(tags, list) else None
        tag = first or tag
        stage = payload.get("stage") if isinstance(payload.get("stage"), str) else stage
        raw = payload.get("attempt")
        attempt = int(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else attempt
    message = _payload_message(info.error) or "no error payload"
    # The error the workflow raised: the named attempt's recorded failure, or its own deadline.
    said = payload.get("message") if isinstance(payload, dict) else None
    named = record.attempt_record(stage, attempt) if stage and attempt else None
    rule = reported.reported_rule(tag, str(said or ""), named, otherwise=reported.EXECUTION_FAILED)
    return {
        "tag": tag,
        "stage": stage,
        "attempt": attempt,
        "message": _bounded(f"workflow execution {short} failed: {message}"),
        "rule": rule,
    }


def _payload(error: str | None) -> Any:
    if not error:
        return None
    try:
        return json.loads(error)
    except ValueError:
        return error


def _payload_message(error: str | None) -> str:
    payload = _payload(error)
    if isinstance(payload, dict):
        message = payload.get("message")
        return str(message) if message else json.dumps(payload, sort_keys=True)
    return "" if payload is None else str(payload)


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


# ---- 3. orphaned workloads --------------------------------------------------------------------


def workload_action(obj: RunObject, record: RunRecord | None) -> Action | None:
    if obj.deleting:
        return None  # its deletion is already under way
    workload = Workload.of(obj)
    what = f"{obj.kind} {obj.name}"
    if record is None:
        return Action(
            "delete",
            obj.run_id or "?",
            found=f"{obj.phase} workload of unknown run {obj.run_id or '(empty label)'} (no ledger)",
            do=f"delete {what}",
            workload=workload,
            run_known=False,
        )
    if record.terminal:
        return Action(
            "delete",
            obj.run_id,
            found=f"{obj.phase} workload of a {record.state} run",
            do=f"delete {what}",
            workload=workload,
        )
    current = record.current_attempt(obj.stage) if obj.stage else None
    if current is not None and obj.attempt is not None and obj.attempt < current.attempt:
        return Action(
            "delete",
            obj.run_id,
            found=f"attempt {obj.attempt} of {obj.stage}; the run's current attempt is {current.attempt}",
            do=f"delete {what}",
            workload=workload,
        )
    return None


# ---- 4. stuck workloads -----------------------------------------------------------------------


def stuck_action(obj: RunObject, record: RunRecord, now: float, deadline: float | None) -> Action | None:
    """A current workload queued or running past its stage deadline (measured from the stage's
    first launch in the run's current round, as the ``stage`` function measures it: a retried
    run's deadline starts afresh): reported, never touched."""
    if (
        obj.deleting
        or record.terminal
        or obj.phase not in ("queued", "running")
        or not obj.stage
        or not deadline
    ):
        return None
    launches = [
        epoch(a.launched_at) for a in record.attempts if a.stage == obj.stage and a.round == record.round
    ]
    since = min(launches) if launches else (obj.created_at.timestamp() if obj.created_at else None)
    if since is None or now - since <= deadline:
        return None
    age = now - since
    text = (
        f"run {record.run_id}: {obj.stage} workload {obj.kind} {obj.name} has been {obj.phase} for "
        f"{duration(age)} since the stage's first launch, past its {duration(deadline)} deadline; "
        f"the reconciler reports it and leaves it alone"
    )
    message = {
        "run_id": record.run_id,
        "state": record.state,
        "event": "stuck",
        "message": text,
        "stage": obj.stage,
        "attempt": obj.attempt,
        "workload": obj.name,
        "kind": obj.kind,
        "phase": obj.phase,
        "age_seconds": round(age),
        "deadline_seconds": round(deadline),
        "request_id": record.request.get("request_id"),
        "model": record.request.get("model"),
    }
    return Action(
        "report",
        record.run_id,
        found=f"{obj.phase} for {duration(age)}, past the {obj.stage} deadline of {duration(deadline)}",
        do="report it in a status message; leave it alone",
        workload=Workload.of(obj),
        message=message,
    )


def waiting_stuck_action(record: RunRecord, reason: str) -> Action:
    """A waiting run the liveness check (``core.liveness``) found can never move in two passes:
    reported once per wait, in a status message and the stuck metric, and left alone (which run to
    cancel is a person's call)."""
    message = {
        "run_id": record.run_id,
        "state": record.state,
        "event": "stuck",
        "message": reason,
        "waits_for": None,
        **wait_of(record),
        "request_id": record.request.get("request_id"),
        "model": record.request.get("model"),
    }
    return Action(
        "report",
        record.run_id,
        found=reason,
        do="report it stuck in a status message; leave it alone",
        message=message,
    )


def stage_deadline(record: RunRecord, stage: str) -> float | None:
    """The request's ``timeouts.<stage>`` in seconds, or None if the stored request is unreadable."""
    from pydantic import ValidationError

    from rlpipe.core.request import Request

    try:
        return float(getattr(Request.model_validate(record.request).timeouts, stage))
    except (ValidationError, AttributeError, TypeError, ValueError):
        return None


# ---- small helpers ----------------------------------------------------------------------------


def epoch(timestamp: str) -> float:
    """A ledger timestamp (``now()`` format) as seconds since the epoch."""
    return parse_time(timestamp).timestamp()


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
