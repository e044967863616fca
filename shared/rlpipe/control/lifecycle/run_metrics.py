"""The structured log events the control plane writes for Cloud Monitoring: one definition.

Each function below writes one JSON line through ``rlpipe.control.adapters.logs.Logger``; on Cloud Run
functions the line becomes a log entry whose fields sit under ``jsonPayload`` (``severity`` and
``time`` are lifted into the entry itself: https://cloud.google.com/logging/docs/structured-logging).
infra/terraform/monitoring.tf builds its log-based metrics, dashboard and alert policy on
``jsonPayload.event`` and the fields named here, and tests/control/lifecycle/test_monitoring.py checks that every
field it reads is one these lines carry (``EMITTED_FIELDS``). The functions build their lines
from the same tables, and refuse a value a metric label would not expect.

Each line is written without the caller's bound context (``Logger.bind``), so a line carries
exactly its declared fields whatever logger is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.core.failures import FailureClass
from rlpipe.core.teams import TEAM_NAME

# ---- event names (jsonPayload.event) ---------------------------------------------------------------

RUN_STARTED = "run_started"
RUN_ENDED = "run_ended"
# A later end of a run that had ended before: a retried round's, or a promoted run's after its
# gate. Its own event, so that the runs-ended counts hold one end per run.
ROUND_ENDED = "round_ended"
STAGE_ENDED = "stage_ended"
GATE_EVALUATED = "gate_evaluated"
RUN_STUCK = "run_stuck"

# ---- field names (jsonPayload.<field>) -------------------------------------------------------------

EVENT = "event"
RUN_ID = "run_id"
STAGE = "stage"
ATTEMPT = "attempt"
SOURCE_KIND = "source_kind"
OUTCOME = "outcome"
FAILURE_CLASS = "failure_class"
POST_MEAN_REWARD = "post_mean_reward"
REWARD_GAIN = "reward_gain"
GATE = "gate"
PHASE = "phase"
DURATION_SECONDS = "duration_seconds"
CHIP_HOURS = "chip_hours"
PASSED = "passed"
VERDICT = "verdict"
REASONS = "reasons"
REASON = "reason"
BUDGET_EXHAUSTED = "budget_exhausted"
ROUND = "round"
# The run's team (core.teams; ``default`` without teams): runs and chip-hours are charted by it.
TEAM = "team"

# Every Logger line carries these (rlpipe.control.adapters.logs.Logger.log), whatever the event.
LINE_FIELDS: frozenset[str] = frozenset({"severity", "message", "component", "time", RUN_ID, STAGE, ATTEMPT})
# Cloud Logging moves these out of jsonPayload into the LogEntry (severity, timestamp): a filter
# must not read them as jsonPayload.<field>.
PROMOTED_FIELDS: frozenset[str] = frozenset({"severity", "time"})

# ---- the values metric labels take -----------------------------------------------------------------

OUTCOMES: tuple[str, ...] = ("succeeded", "failed", "cancelled", "gated", "stopped")
GATE_RESULTS: tuple[str, ...] = ("passed", "failed", "overridden", "none")
VERDICTS: tuple[str, ...] = ("passed", "failed", "not_evaluated")
STAGE_END_PHASES: tuple[str, ...] = ("succeeded", "failed", "superseded", "cancelled", "stopped")
FAILURE_CLASSES: tuple[str, ...] = tuple(c.value for c in FailureClass)
# field -> the values it takes when it is not null (what a filter may compare it with).
LABEL_VALUES: Mapping[str, tuple[str, ...]] = {
    OUTCOME: OUTCOMES,
    GATE: GATE_RESULTS,
    VERDICT: VERDICTS,
    PHASE: STAGE_END_PHASES,
    FAILURE_CLASS: FAILURE_CLASSES,
}

# event -> the fields its line adds to LINE_FIELDS and EVENT.
EVENT_FIELDS: Mapping[str, tuple[str, ...]] = {
    RUN_STARTED: (SOURCE_KIND, TEAM),
    RUN_ENDED: (OUTCOME, FAILURE_CLASS, BUDGET_EXHAUSTED, POST_MEAN_REWARD, REWARD_GAIN, GATE, TEAM),
    ROUND_ENDED: (OUTCOME, FAILURE_CLASS, BUDGET_EXHAUSTED, POST_MEAN_REWARD, REWARD_GAIN, GATE, ROUND, TEAM),
    STAGE_ENDED: (PHASE, FAILURE_CLASS, DURATION_SECONDS, CHIP_HOURS, TEAM),
    GATE_EVALUATED: (PASSED, VERDICT, REASONS),
    RUN_STUCK: (REASON,),
}

# event -> every field its JSON line carries.
EMITTED_FIELDS: dict[str, frozenset[str]] = {
    event: frozenset({EVENT, *LINE_FIELDS, *fields}) for event, fields in EVENT_FIELDS.items()
}

_MESSAGES = {
    RUN_STARTED: "run started",
    RUN_ENDED: "run ended",
    ROUND_ENDED: "run ended again",
    STAGE_ENDED: "stage ended",
    GATE_EVALUATED: "gate evaluated",
    RUN_STUCK: "run stuck",
}


def payload_fields(event: str) -> frozenset[str]:
    """The fields of an event's line a log filter can read as ``jsonPayload.<field>``."""
    return EMITTED_FIELDS[event] - PROMOTED_FIELDS


def _one_of(name: str, value: str | None, allowed: Sequence[str], *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _team(value: str) -> str:
    """A team is a label value of every chart that breaks runs down by team: a declared name only."""
    if not isinstance(value, str) or not re.match(TEAM_NAME, value):
        raise ValueError(f"{TEAM} must be a team name (core.teams); got {value!r}")
    return value


def _number(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number or None; got {value!r}")
    return float(value)


def _emit(
    log: Logger,
    event: str,
    severity: str,
    *,
    run_id: str,
    stage: str | None = None,
    attempt: int | None = None,
    fields: Mapping[str, Any],
) -> None:
    if set(fields) != set(EVENT_FIELDS[event]):  # a function and its declaration disagree
        raise AssertionError(f"{event}: writes {sorted(fields)}, declares {sorted(EVENT_FIELDS[event])}")
    plain = Logger(log.component, log.stream)  # no bound context: exactly the declared fields
    plain.log(
        severity,
        _MESSAGES[event],
        **{EVENT: event, RUN_ID: run_id, STAGE: stage, ATTEMPT: attempt},
        **fields,
    )


def run_started(log: Logger, *, run_id: str, source_kind: str, team: str) -> None:
    """A run was claimed and its execution started (intake); ``source_kind`` is the ledger's
    ``Source.kind`` (gcs, pubsub, upstream, cli), ``team`` the run's (``RunRecord.team``)."""
    _emit(log, RUN_STARTED, "INFO", run_id=run_id, fields={SOURCE_KIND: source_kind, TEAM: _team(team)})


def run_ended(
    log: Logger,
    *,
    run_id: str,
    outcome: str,
    failure_class: str | None,
    stage: str | None,
    post_mean_reward: float | None,
    reward_gain: float | None,
    gate: str,
    team: str,
    budget_exhausted: bool = False,
    round: int | None = None,
) -> None:
    """A run reached its end: ``run_ended`` the first time, ``round_ended`` (with ``round``) for
    a later end, after a retry or a promotion. ``outcome``: succeeded, failed, cancelled, gated or stopped (early, by its sweep's rule);
    ``gate``: passed, failed, overridden or none. A run that failed because a retry budget ran
    out has the class of its last failure (preempted, capacity, …) and ``budget_exhausted``, so
    lost capacity is not counted as a bug."""
    _one_of(OUTCOME, outcome, OUTCOMES)
    _one_of(GATE, gate, GATE_RESULTS)
    _one_of(FAILURE_CLASS, failure_class, FAILURE_CLASSES, optional=True)
    severity = {"succeeded": "INFO", "stopped": "INFO", "cancelled": "WARNING", "gated": "WARNING"}.get(
        outcome, "ERROR"
    )
    fields: dict[str, Any] = {
        OUTCOME: outcome,
        FAILURE_CLASS: failure_class,
        BUDGET_EXHAUSTED: bool(budget_exhausted),
        POST_MEAN_REWARD: _number(POST_MEAN_REWARD, post_mean_reward),
        REWARD_GAIN: _number(REWARD_GAIN, reward_gain),
        GATE: gate,
        TEAM: _team(team),
    }
    if round is not None:
        fields[ROUND] = round
    _emit(
        log,
        ROUND_ENDED if round is not None else RUN_ENDED,
        severity,
        run_id=run_id,
        stage=stage,
        fields=fields,
    )


def stage_ended(
    log: Logger,
    *,
    run_id: str,
    stage: str,
    attempt: int,
    phase: str,
    failure_class: str | None,
    duration_seconds: float,
    chip_hours: float | None,
    team: str,
) -> None:
    """One attempt of a stage finished: ``phase`` succeeded, failed, superseded or cancelled;
    ``duration_seconds`` from its launch to its end; ``chip_hours`` when known; ``team`` the run's."""
    _one_of(PHASE, phase, STAGE_END_PHASES)
    _one_of(FAILURE_CLASS, failure_class, FAILURE_CLASSES, optional=True)
    duration = _number(DURATION_SECONDS, duration_seconds)
    if duration is None or duration < 0:
        raise ValueError(f"{DURATION_SECONDS} must be a number >= 0; got {duration_seconds!r}")
    _emit(
        log,
        STAGE_ENDED,
        "WARNING" if phase == "failed" else "INFO",
        run_id=run_id,
        stage=stage,
        attempt=attempt,
        fields={
            PHASE: phase,
            FAILURE_CLASS: failure_class,
            DURATION_SECONDS: duration,
            CHIP_HOURS: _number(CHIP_HOURS, chip_hours),
            TEAM: _team(team),
        },
    )


def gate_evaluated(log: Logger, *, run_id: str, passed: bool | None, reasons: Sequence[str]) -> None:
    """The quality gate's verdict (``rlpipe.core.gate.GateVerdict``): ``passed`` is None when it
    could not be evaluated; ``verdict`` says the same as a label value."""
    if passed is not None and not isinstance(passed, bool):
        raise ValueError(f"{PASSED} must be True, False or None; got {passed!r}")
    verdict = "not_evaluated" if passed is None else ("passed" if passed else "failed")
    _emit(
        log,
        GATE_EVALUATED,
        "INFO" if passed else "WARNING",
        run_id=run_id,
        fields={PASSED: passed, VERDICT: verdict, REASONS: [str(r) for r in reasons]},
    )


def run_stuck(log: Logger, *, run_id: str, stage: str | None, reason: str) -> None:
    """A run makes no progress and needs a person (the reconciler found it)."""
    _emit(log, RUN_STUCK, "WARNING", run_id=run_id, stage=stage, fields={REASON: reason})
