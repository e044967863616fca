"""What the CLI does to runs: submit, read status, list, cancel. Same code against GCP and the local stack.

The CLI never needs cluster credentials: cancellation asks the ``stage`` function to cancel the
run (its ``cancel`` operation cleans up and finishes it, as the workflow itself would), and
reads everything else from the ledger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import RunPolicies
from rlpipe.core import identity
from rlpipe.core.runs.record import TERMINAL, RunRecord, parse_time


def list_runs(ledger: Ledger, *, page_size: int = 500, workers: int = 16) -> list[RunRecord]:
    """Every run's record, newest first.

    Why paged run ids and not a listing of ``runs/``: a listing without a delimiter walks every
    checkpoint shard and event of every run; the delimiter listing returns one prefix per run, so
    the number of requests depends on the number of runs only. Records are fetched concurrently.
    """
    from concurrent.futures import ThreadPoolExecutor

    run_ids: list[str] = []
    after = ""
    while True:
        page = ledger.list_run_ids_page(after, limit=page_size)
        run_ids.extend(page.run_ids)
        if not page.more or not page.run_ids:
            break
        after = page.run_ids[-1]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(run_ids)))) as pool:
        records = [r for r in pool.map(ledger.peek, run_ids) if r is not None]
    return sorted(records, key=lambda r: r.created_at, reverse=True)


@dataclass(frozen=True)
class RunFilter:
    """Which runs ``rlpipe list`` shows: any of ``states`` (none: every state), every one of
    ``labels`` (the request's labels), created at or after ``since``, of any of ``teams`` (none:
    every team; a run recorded before teams, or on a deployment without them, is ``default``'s)."""

    states: frozenset[str] = frozenset()
    labels: tuple[tuple[str, str], ...] = ()
    since: datetime | None = None
    teams: frozenset[str] = frozenset()

    def matches(self, record: RunRecord) -> bool:
        if self.states and record.state not in self.states:
            return False
        if self.teams and record.team not in self.teams:
            return False
        labels = record.request.get("labels") or {}
        if any(labels.get(key) != value for key, value in self.labels):
            return False
        return self.since is None or parse_time(record.created_at) >= self.since


@dataclass(frozen=True)
class RunPage:
    """One page of ``rlpipe list --limit``: its runs (newest first) and the token of the next page
    (the last run id examined: the listing resumes after it), None after the last page."""

    records: list[RunRecord]
    next_page_token: str | None


def list_page(
    ledger: Ledger,
    *,
    limit: int,
    after: str = "",
    where: RunFilter = RunFilter(),
    page_size: int = 500,
    workers: int = 16,
) -> RunPage:
    """Up to ``limit`` runs that match ``where``, in run-id order after ``after`` (the previous
    page's token): the same delimiter listing of run ids as ``list_runs``, read page by page, and
    stopped as soon as ``limit`` runs matched, so a page costs what it shows, not the whole bucket."""
    from concurrent.futures import ThreadPoolExecutor

    if limit < 1:
        raise ValueError("limit must be >= 1")
    chosen: list[RunRecord] = []
    cursor = after
    size = min(page_size, max(limit, 20)) if where == RunFilter() else page_size
    while True:
        page = ledger.list_run_ids_page(cursor, limit=size)
        if not page.run_ids:
            break
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(page.run_ids)))) as pool:
            records = list(pool.map(ledger.peek, page.run_ids))
        for index, (run_id, record) in enumerate(zip(page.run_ids, records, strict=True)):
            cursor = run_id
            if record is not None and where.matches(record):
                chosen.append(record)
                if len(chosen) == limit:
                    more = page.more or index < len(page.run_ids) - 1
                    return RunPage(_newest_first(chosen), cursor if more else None)
        if not page.more:
            break
    return RunPage(_newest_first(chosen), None)


def _newest_first(records: list[RunRecord]) -> list[RunRecord]:
    return sorted(records, key=lambda r: r.created_at, reverse=True)


def list_entry(record: RunRecord) -> dict[str, Any]:
    """One run as ``rlpipe list --json`` prints it (docs/cli.md, "list")."""
    from rlpipe.core.runs.results import reward_summary

    post, gain = reward_summary(record.results or {})
    return {
        "run_id": record.run_id,
        "state": record.state,
        "stage": record.stage,
        "attempt": record.attempt,
        "created_at": record.created_at,
        "team": record.team,
        "model": record.request.get("model"),
        "labels": dict(record.request.get("labels") or {}),
        "post_mean_reward": post,
        "reward_change": gain,
        "terminal": record.state in TERMINAL,
    }


def stage_summary(record: RunRecord) -> list[dict[str, Any]]:
    """Per stage: attempts, phase, duration (first launch → last finish), failure if any."""
    rows: list[dict[str, Any]] = []
    wanted = identity.stages_for(publish=bool(record.request.get("publish")))
    for stage in wanted:
        attempts = [a for a in record.attempts if a.stage == stage]
        if not attempts:
            skipped = stage == "convert" and record.lineage.conversion_cache_hit
            rows.append(
                {
                    "stage": stage,
                    "attempts": 0,
                    "phase": "cached" if skipped else "pending",
                    "seconds": None,
                    "failure": None,
                }
            )
            continue
        last = max(attempts, key=lambda a: a.attempt)
        start = min(_parse(a.launched_at) for a in attempts)
        end = _parse(last.finished_at) if last.finished_at else datetime.now(UTC)
        rows.append(
            {
                "stage": stage,
                "attempts": len(attempts),
                "phase": last.phase,
                "seconds": round((end - start).total_seconds(), 1),
                "failure": f"[{last.failure_class}] {last.reason}" if last.failure_class else None,
                "resume_step": last.resume_step,
                "round": last.round,
                "attempts_this_round": sum(1 for a in attempts if a.round == record.round),
                "chip_hours": round(sum(a.chip_hours or 0.0 for a in attempts), 3),
                "chip_hours_per_attempt": {a.attempt: a.chip_hours for a in attempts if a.chip_hours},
                "cost_per_attempt": {
                    a.attempt: a.cost_estimate for a in attempts if a.cost_estimate is not None
                },
            }
        )
    return rows


_parse = parse_time


def cost_estimate(record: RunRecord) -> dict[str, Any] | None:
    """The TPU chip-hours the run held, at its provisioning mode's list price (``core.cost``;
    ``RLPIPE_PRICES`` overrides); unset when no price is published."""
    from rlpipe.core.runs.pricing import run_price

    priced = run_price(record.request, Settings.from_env().prices_json)
    if priced is None:
        return None
    mode, price = priced
    held = sum(a.chip_hours or 0.0 for a in record.attempts)
    # What the ledger accumulated per attempt (at the price of the time), else today's list price.
    recorded = [a.cost_estimate for a in record.attempts if a.chip_hours]
    amount = round(sum(recorded), 2) if recorded and None not in recorded else price.cost(held)  # type: ignore[arg-type]
    return {"mode": mode, "chip_hours": round(held, 3), "amount": amount, "price": price.describe()}


def describe(record: RunRecord, children: list[RunRecord | None] | None = None) -> dict[str, Any]:
    """``status --json``. ``children``: a sweep parent's, read (``sweep_view.children_of``)."""
    from rlpipe.cli.sweep_view import sweep_info

    # Round 1 (the request) and each retry: who, when, from which stage, why the one before ended.
    rounds: list[dict[str, Any]] = [
        {"round": 1, "by": record.source.kind, "at": record.created_at, "from_stage": None, "reason": None}
    ]
    for r in record.rounds:
        ended = r.previous_failure or {}
        where = f" ({ended.get('stage')} attempt {ended.get('attempt')})" if ended.get("stage") else ""
        rounds.append(
            {
                "round": r.round,
                "by": r.by,
                "at": r.at,
                "from_stage": r.from_stage,
                "reason": r.reason,
                "previous_state": r.previous_state,
                "previous_ended": f"{r.previous_state}: [{ended.get('tag')}] {ended.get('message')}{where}"
                if ended
                else r.previous_state,
            }
        )
    return {
        "run_id": record.run_id,
        "state": record.state,
        "stage": record.stage,
        "attempt": record.attempt,
        "failure": record.failure.model_dump() if record.failure else None,
        "execution": record.execution.name,
        "progress": record.progress,
        "results": record.results,
        "gate": record.gate.model_dump() if record.gate else None,
        # A sweep's parent runs nothing itself: its figure is its children's, when they were read.
        "chip_hours": round(
            sum(
                a.chip_hours or 0.0
                for r in [record, *(c for c in children or [] if c is not None)]
                for a in r.attempts
            ),
            3,
        ),
        "cost_estimate": cost_estimate(record),
        "stages": stage_summary(record),
        "round": record.round,
        "rounds": rounds,
        "lineage": record.lineage.model_dump(exclude_none=True),
        "terminal": record.state in TERMINAL,
        "sweep": sweep_info(record, children),
        "team": record.team,
        # why it is not running yet (core.runs.admission); null once nothing holds it back
        "waiting": record.admission.reason if record.admission is not None and not record.terminal else None,
        "admission": record.admission.model_dump()
        if record.admission is not None and not record.terminal
        else None,
        # why the reconciler found the waiting run can never move (core.liveness); `status` reads it
        "stuck": None,
    }


# The service account the CLI impersonates for its ID token to the stage function (see id_token).
IMPERSONATE_ENV = "RLPIPE_IMPERSONATE_SERVICE_ACCOUNT"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
CANCEL_HINT = (
    "cancelling an execution needs workflows.executions.cancel on the project "
    "(roles/workflows.invoker); docs/deploy.md lists the operator roles"
)


def policies(settings: Settings, ledger: Ledger) -> RunPolicies:
    """The deployment's run policies as the stage function wires them (``control.services``), on
    the CLI's ledger: what the CLI checks before it asks the stage function is what it will decide."""
    from rlpipe.control import services
    from rlpipe.control.adapters.logs import Logger

    return services.run_policies(settings, ledger, ledger.store, Logger("rlpipe.cli"))


def cancel(settings: Settings, ledger: Ledger, run_id: str, *, orchestrator: Any = None) -> dict[str, Any]:
    """``rlpipe cancel``: the run's Workflows executions cancelled with the operator's own
    credentials, then the stage function asked to cancel the run (``op: cancel``: its workloads
    deleted and the run finished ``cancelled``, recording the identity Google verified on this
    call). Which executions, in what order, and what is reported rather than fatal, is decided by
    ``control.operator_ops.cancel_from_outside``; here are the CLI's identity (its Workflows
    client, ``orchestrator``) and its call to the stage function."""
    import logging

    from rlpipe.control import operator_ops
    from rlpipe.core.operator_contract import CancelAnswer, CancelCheck

    log = logging.getLogger("rlpipe.cli")
    record = ledger.get(run_id)
    if record is None:
        raise KeyError(f"no run {run_id}")
    executions = orchestrator

    def cancel_execution(who: str, name: str) -> dict[str, Any]:
        nonlocal executions
        try:
            if executions is None:
                from rlpipe.control.adapters.orchestrator import Orchestrator

                executions = Orchestrator(settings)
            return {"execution_cancelled": bool(executions.cancel(name))}
        except Exception as exc:  # PermissionDenied, Unauthenticated, unreachable: report, go on
            error = f"{type(exc).__name__}: {exc}".strip()
            if "PermissionDenied" in type(exc).__name__ or "403" in str(exc):
                error += f" ({CANCEL_HINT})"
            log.warning("run %s: the execution was not cancelled: %s", who, error)
            return {"execution_cancelled": False, "execution_error": error}

    # Whether this operator may cancel the run at all (on a deployment with teams, only its team's
    # operators may), decided by the stage function before any execution is touched: a refusal
    # raises StageRefused here, and nothing is cancelled.
    CancelCheck.model_validate(call_stage(settings, {"op": "cancel", "run_id": run_id, "check_only": True}))
    result = operator_ops.cancel_from_outside(
        ledger,
        run_id,
        record,
        policies=policies(settings, ledger),
        cancel_execution=cancel_execution,
        end_run=lambda run: CancelAnswer.model_validate(
            call_stage(settings, {"op": "cancel", "run_id": run})
        ),
    )
    if result.get("cleanup_error"):  # the run is still finished; reconcile deletes what is left
        log.warning(
            "run %s: cleanup failed (reconcile will delete its workloads): %s",
            run_id,
            result["cleanup_error"],
        )
    return result


def id_token(
    audience: str, *, impersonate: str | None = None, credentials: Any = None, request: Any = None
) -> str:
    """An OIDC ID token for ``audience`` (the stage function's URL) from the operator's credentials.

    ``google.oauth2.id_token.fetch_id_token`` alone mints one only from a service-account key named
    by GOOGLE_APPLICATION_CREDENTIALS, from impersonated credentials named there, or from a metadata
    server; the user credentials of ``gcloud auth application-default login`` cannot mint one. So:

    1. ``impersonate`` (``RLPIPE_IMPERSONATE_SERVICE_ACCOUNT``): the ADC, user credentials included,
       impersonate that service account, which signs a token for ``audience`` (IAM Credentials
       generateIdToken; the operator needs roles/iam.serviceAccountTokenCreator on it, and it
       needs roles/run.invoker on the stage function);
    2. ADC that are themselves impersonated credentials (``gcloud auth application-default login
       --impersonate-service-account=SA``): the same, without the setting;
    3. otherwise ``fetch_id_token`` (a key file, or the metadata server on Google Cloud).
    """
    import google.auth
    import google.auth.transport.requests
    import google.oauth2.credentials
    import google.oauth2.id_token
    from google.auth import exceptions as auth_exceptions
    from google.auth import impersonated_credentials

    request = request or google.auth.transport.requests.Request()
    if credentials is None and impersonate:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
    if impersonate:
        target = impersonated_credentials.Credentials(
            source_credentials=credentials, target_principal=impersonate, target_scopes=[CLOUD_PLATFORM]
        )
    elif credentials is None:
        try:
            return str(google.oauth2.id_token.fetch_id_token(request, audience))
        except auth_exceptions.DefaultCredentialsError:
            credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
            return id_token(audience, credentials=credentials, request=request)
    elif isinstance(credentials, impersonated_credentials.Credentials):
        target = credentials
    elif isinstance(credentials, google.oauth2.credentials.Credentials):
        raise RuntimeError(
            "your Application Default Credentials are user credentials, which cannot mint an ID token "
            f"for {audience}: set {IMPERSONATE_ENV} to a service account that may invoke the stage "
            "function (and grant yourself roles/iam.serviceAccountTokenCreator on it), or run "
            "`gcloud auth application-default login --impersonate-service-account=<that account>`; "
            "see docs/deploy.md"
        )
    else:
        return str(google.oauth2.id_token.fetch_id_token(request, audience))
    token_credentials = impersonated_credentials.IDTokenCredentials(
        target, target_audience=audience, include_email=True
    )
    token_credentials.refresh(request)
    return str(token_credentials.token)


class StageRefused(RuntimeError):
    """The stage function answered with a refusal: ``message`` is its own sentence (what a person
    reads), ``tag`` its failure class, ``status`` the HTTP status."""

    def __init__(self, op: str, status: int, tag: str, message: str) -> None:
        super().__init__(f"stage {op} refused ({status}, {tag}): {message}")
        self.op, self.status, self.tag, self.message = op, status, tag, message


class StageUnreachable(RuntimeError):
    """No answer from the stage function (a network error, a timeout or a 503): asking again
    with the same body is safe for the operations that carry a key (retry) or check state."""


def call_stage(settings: Settings, body: dict[str, Any]) -> dict[str, Any]:
    """POST to the ``stage`` function with the operator's ID token for its URL: in GCP a real one
    (see id_token), on the local stack the one it plays (``RLPIPE_LOCAL_OPERATOR_IDENTITY``)."""
    import os

    import requests

    if not settings.stage_url:
        raise RuntimeError("RLPIPE_STAGE_URL is not set: the stage function's URL is needed to clean up")
    headers = {"Content-Type": "application/json"}
    if not settings.local:
        # the audience the stage function verifies (RLPIPE_STAGE_AUDIENCE), else its URL
        audience = settings.stage_audiences[0] if settings.stage_audiences else settings.stage_url
        token = id_token(audience, impersonate=os.environ.get(IMPERSONATE_ENV) or None)
        headers["Authorization"] = f"Bearer {token}"
    else:  # the local stack plays the operator's identity (rlpipe/local/identities.py)
        from rlpipe.local.identities import OPERATOR_IDENTITY_ENV, played_id_token

        operator = os.environ.get(OPERATOR_IDENTITY_ENV, "").strip() or None
        if operator is not None:
            audience = settings.stage_audiences[0] if settings.stage_audiences else settings.stage_url
            headers["Authorization"] = f"Bearer {played_id_token(operator, audience)}"
    try:
        response = requests.post(settings.stage_url, data=json.dumps(body), headers=headers, timeout=120)
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise StageUnreachable(f"stage {body.get('op')}: no answer ({type(exc).__name__})") from None
    if response.status_code == 503:
        raise StageUnreachable(f"stage {body.get('op')}: unavailable (503), {response.text[:300]}")
    payload = (
        response.json() if response.headers.get("Content-Type", "").startswith("application/json") else {}
    )
    if response.status_code >= 300:
        error = payload.get("error") if isinstance(payload, dict) else None
        error = error if isinstance(error, dict) else {}
        raise StageRefused(
            str(body.get("op")),
            response.status_code,
            str(error.get("tag") or "unknown"),
            str(error.get("message") or response.text[:500] or "no reason given"),
        )
    return payload
