"""Status messages to Pub/Sub: one per terminal state of a run, sent best-effort by :class:`Notifier`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.runs.record import RunRecord
from rlpipe.core.runs.results import reward_summary


def publish(topic_path: str, message: dict[str, Any]) -> str:
    """Publish a JSON status message; attributes carry run_id and state for subscription filters."""
    import google.cloud.pubsub_v1 as pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    attributes = {k: str(message[k]) for k in ("run_id", "state") if message.get(k) is not None}
    future = publisher.publish(topic_path, json.dumps(message, default=str).encode(), **attributes)
    return str(future.result(timeout=30))


Publish = Callable[[str, dict[str, Any]], Any]  # (topic path, message) → the message id


@dataclass(frozen=True)
class Notice:
    """A message that is not a run's status message (the upstream poller's no-access notice)."""

    what: str  # what it is, as the log names it when it cannot be sent ("the no-access message")
    body: dict[str, Any]
    topic: str | None = None  # as a request or a watch names it; None: the deployment's status topic
    context: Mapping[str, Any] = field(default_factory=dict)  # what its log line says it is about


@dataclass(frozen=True)
class Notifier:
    """Best-effort messages on the status topic (or the one a request names): a run's status
    message, or a :class:`Notice`. A message is only a message: the ledger is the record, so a
    failed publish never turns a finished run, an intake answer, a repair or a poll into a
    failure; it is logged, naming what could not be sent, and swallowed. No topic, or no
    ``publish`` (a deployment that sends none): nothing is sent."""

    settings: Settings
    publish: Publish | None
    log: Logger

    def send(self, item: RunRecord | Notice, *, topic: str | None = None) -> bool:
        """Publish ``item`` (a run's record: its status message); ``topic`` overrides the one its
        request names. → whether it was published."""
        if isinstance(item, Notice):
            what, body, named, log, context = item.what, item.body, item.topic, self.log, dict(item.context)
        else:
            what, body, named = "the status message", status_message(item), item.request.get("notify")
            log, context = self.log.bind(run_id=item.run_id), {}
        target = topic or named or self.settings.status_topic
        if not target or self.publish is None:
            return False
        try:
            self.publish(self.settings.topic_path(str(target)), body)
        except Exception as exc:  # a message must never turn what was done into a failure
            log.warning(f"could not publish {what}", **context, error=str(exc))
            return False
        return True


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
        # whose run it is (core.teams; default without teams): a subscriber can route by it
        "team": record.team,
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
