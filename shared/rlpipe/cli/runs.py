"""What the CLI does to runs: submit, read status, list, cancel. Same code against GCP and the local stack.

The CLI never needs cluster credentials: cancellation asks the ``stage`` function to clean up,
the way the workflow itself does, and reads everything else from the ledger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlpipe.control.ledger import TERMINAL, Ledger, RunRecord
from rlpipe.control.settings import Settings
from rlpipe.core import identity, layout
from rlpipe.core.request import load_request


@dataclass(frozen=True)
class Submitted:
    run_id: str
    via: str
    where: str


def submit(settings: Settings, path: Path, *, via: str = "gcs", storage_client: Any = None) -> Submitted:
    """Validate locally first (fast feedback), then hand the file to the same intake users use."""
    data = path.read_bytes()
    request = load_request(data, source=str(path))
    if via == "gcs":
        from rlpipe.control.blobstore import make_client

        client = storage_client or make_client(settings.project)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        name = f"{layout.REQUESTS_PREFIX}{path.stem}-{stamp}{path.suffix if path.suffix in layout.REQUEST_SUFFIXES else '.yaml'}"
        blob = client.bucket(settings.requests_bucket).blob(name)
        blob.upload_from_string(data, if_generation_match=0)
        key = (
            identity.key_for_request_id(request.request_id)
            if request.request_id
            else identity.key_for_object(settings.requests_bucket, name, blob.generation)
        )
        return Submitted(identity.run_id_for(key), "gcs", f"gs://{settings.requests_bucket}/{name}")
    if via == "pubsub":
        topic = settings.topic_path(settings.requests_topic)
        message_id = _publish(settings, topic, data)
        key = (
            identity.key_for_request_id(request.request_id)
            if request.request_id
            else identity.key_for_message(topic, message_id)
        )
        return Submitted(identity.run_id_for(key), "pubsub", f"{topic} message {message_id}")
    raise ValueError(f"unknown --via {via!r}; use gcs or pubsub")


def _publish(settings: Settings, topic: str, data: bytes) -> str:
    import os

    direct = os.environ.get("RLPIPE_INTAKE_MESSAGE_URL")
    if os.environ.get("RLPIPE_LOCAL") and not os.environ.get("PUBSUB_EMULATOR_HOST") and direct:
        # Local stack without the Pub/Sub emulator: deliver the same CloudEvent the shim would.
        import uuid

        from rlpipe.local.shim import deliver, message_published

        message_id = uuid.uuid4().hex[:16]
        event = message_published(
            topic, "projects/local/subscriptions/direct", data, {}, message_id, datetime.now(UTC).isoformat()
        )
        if not deliver(direct, event):
            raise RuntimeError("intake_message refused the request")
        return message_id
    from google.cloud import pubsub_v1

    return str(pubsub_v1.PublisherClient().publish(topic, data).result(timeout=30))


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


def stage_summary(record: RunRecord) -> list[dict[str, Any]]:
    """Per stage: attempts, phase, duration (first launch → last finish), failure if any."""
    rows = []
    for stage in identity.STAGES:
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
            }
        )
    return rows


def _parse(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def describe(record: RunRecord) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "state": record.state,
        "stage": record.stage,
        "attempt": record.attempt,
        "failure": record.failure.model_dump() if record.failure else None,
        "execution": record.execution.name,
        "progress": record.progress,
        "stages": stage_summary(record),
        "lineage": record.lineage.model_dump(exclude_none=True),
        "terminal": record.state in TERMINAL,
    }


def cancel(settings: Settings, ledger: Ledger, run_id: str, *, orchestrator: Any = None) -> dict[str, Any]:
    """Cancel the execution, delete the workloads, mark the run cancelled.

    Workflows runs no ``except`` block when an execution is cancelled from outside, so the
    cleanup the workflow would have done is asked for here explicitly.
    """
    record = ledger.get(run_id)
    if record is None:
        raise KeyError(f"no run {run_id}")
    cancelled_execution = False
    if record.execution.name:
        from rlpipe.control.orchestrator import Orchestrator

        cancelled_execution = (orchestrator or Orchestrator(settings)).cancel(record.execution.name)
    deleted = call_stage(settings, {"op": "cleanup", "run_id": run_id}).get("deleted", [])
    finished = call_stage(
        settings,
        {
            "op": "finish",
            "run_id": run_id,
            "outcome": "cancelled",
            "failure": {"tag": "cancelled", "message": "cancelled by rlpipe cancel"},
        },
    )
    return {"execution_cancelled": cancelled_execution, "deleted": deleted, "state": finished.get("state")}


def call_stage(settings: Settings, body: dict[str, Any]) -> dict[str, Any]:
    """POST to the ``stage`` function; in GCP with an identity token for its URL."""
    import requests

    if not settings.stage_url:
        raise RuntimeError("RLPIPE_STAGE_URL is not set: the stage function's URL is needed to clean up")
    headers = {"Content-Type": "application/json"}
    if not settings.local:
        import google.auth.transport.requests
        import google.oauth2.id_token

        token = google.oauth2.id_token.fetch_id_token(
            google.auth.transport.requests.Request(), settings.stage_url
        )
        headers["Authorization"] = f"Bearer {token}"
    response = requests.post(settings.stage_url, data=json.dumps(body), headers=headers, timeout=120)
    payload = (
        response.json() if response.headers.get("Content-Type", "").startswith("application/json") else {}
    )
    if response.status_code >= 300:
        raise RuntimeError(
            f"stage {body.get('op')} failed ({response.status_code}): {payload or response.text}"
        )
    return payload
