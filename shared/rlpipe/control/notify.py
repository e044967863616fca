"""Status messages to Pub/Sub: one per terminal state (and per rejected request)."""

from __future__ import annotations

import json
from typing import Any


def publish(topic_path: str, message: dict[str, Any]) -> str:
    """Publish a JSON status message; attributes carry run_id and state for subscription filters."""
    import google.cloud.pubsub_v1 as pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    attributes = {k: str(message[k]) for k in ("run_id", "state") if message.get(k) is not None}
    future = publisher.publish(topic_path, json.dumps(message, default=str).encode(), **attributes)
    return str(future.result(timeout=30))
