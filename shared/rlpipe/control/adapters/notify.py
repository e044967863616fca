"""Status messages to Pub/Sub: one per terminal state of a run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlpipe.core.runs.results import reward_summary

if TYPE_CHECKING:
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.core.runs.record import RunRecord


def publish(topic_path: str, message: dict[str, Any]) -> str:
    """Publish a JSON status message; attributes carry run_id and state for subscription filters."""
    import google.cloud.pubsub_v1 as pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    attributes = {k: str(message[k]) for k in ("run_id", "state") if message.get(k) is not None}
    future = publisher.publish(topic_path, json.dumps(message, default=str).encode(), **attributes)
    return str(future.result(timeout=30))


def status_notifier(
    settings: Settings, send: Callable[[str, dict[str, Any]], Any] = publish
) -> Callable[[RunRecord], None]:
    """The terminal status message of a run that ended outside the workflow (it could not start),
    for ``settings``' deployment: to the request's ``notify`` topic, else the status topic. The
    function's intake and the CLI's reconciler both use it, so neither ends a run in silence."""

    def notify(record: RunRecord) -> None:
        topic = record.request.get("notify") or settings.status_topic
        if topic:
            send(settings.topic_path(topic), status_message(record))

    return notify


def status_message(record: RunRecord) -> dict[str, Any]:
    """What subscribers of the status topic receive: the outcome, why, and where the results are."""
    attempts: dict[str, int] = {}
    for a in record.attempts:
        attempts[a.stage] = max(attempts.get(a.stage, 0), a.attempt)
    text = f"run {record.run_id} {record.state}"
    if record.failure:
        text += (
            f" in {record.failure.stage or 'the pipeline'}: [{record.failure.tag}] {record.failure.message}"
        )
    elif record.state == "succeeded" and record.lineage.export_uri:
        text += f"; model at {record.lineage.export_uri}"
    results = record.results or {}
    post, gain = reward_summary(results)
    if post is not None:
        change = f" ({gain:+.4f} over pre {post - gain:.4f})" if gain is not None else ""
        text += f"; post mean_reward {post:.4f}{change}"
    publish = record.request.get("publish")
    selection = record.sweep.selection if record.sweep is not None else None
    if record.sweep is not None:
        text += f"; a sweep of {len(record.sweep.children)} children"
        if selection is not None:
            text += f", selected {selection.run_id or 'none'}: {selection.reason}"
    if record.state == "succeeded" and publish:
        text += f"; published to {publish['repo']}@{publish['branch']}"
        if selection is not None and selection.run_id:
            text += f" by {selection.run_id}"
    return {
        "run_id": record.run_id,
        "state": record.state,
        "message": text,
        "failure": record.failure.model_dump() if record.failure else None,
        "attempts": attempts,
        "lineage": record.lineage.model_dump(exclude_none=True),
        "request_id": record.request.get("request_id"),
        "model": record.request.get("model"),
        "hf_repo": record.request.get("hf_repo"),
        "results": results,
        "gate": record.gate.model_dump() if record.gate else None,
        "chip_hours": round(sum(a.chip_hours or 0.0 for a in record.attempts), 3),
        # a sweep's parent: its children, and the selection with its reason (docs/sweeps.md)
        "sweep": record.sweep.model_dump(include={"children", "selection"}) if record.sweep else None,
    }
