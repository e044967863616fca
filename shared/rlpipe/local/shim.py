"""The local stand-in for Eventarc: notifications in, CloudEvents of the production types out.

With Pub/Sub (Google's pstest, local/pubsub.py), fake-gcs-server publishes real GCS notifications (OBJECT_FINALIZE,
JSON_API_V1) to a topic; this shim pulls them, maps them to
``google.cloud.storage.object.v1.finalized`` CloudEvents and POSTs them, in binary mode, to the
function that owns the bucket. Messages on the requests topic, and on each declared team's
requests topic, become ``google.cloud.pubsub.topic.v1.messagePublished`` events. A message is
acked only after a 2xx, so a failing function gets the event again, as with Eventarc.

The shim's subscriptions have production's shape (infra/terraform/functions.tf, the Eventarc
subscription's dead-letter topic, delivery attempts and retry backoff), at local speed
(``Redelivery``). pstest honours the dead-letter policy but redelivers a nacked message at once,
whatever the retry policy says (docs/pubsub.md). So the shim does not nack: it sets the failed
message's ack deadline to the backoff the retry policy gives for its delivery attempt and
releases it, and Pub/Sub (pstest or real) delivers it again when that deadline lapses.

Without the emulator, ``BucketWatcher`` lists the buckets by generation and emits the same
CloudEvents; the local stack says so when it starts.
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

from rlpipe.control.adapters.logs import Logger

GCS_FINALIZED = "google.cloud.storage.object.v1.finalized"
PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"

DropFilter = Callable[[str, str], bool]  # (bucket, object name) → drop the event?


def storage_event(
    bucket: str, obj: dict[str, Any], event_id: str, event_time: str | None = None
) -> CloudEvent:
    attributes = {
        "type": GCS_FINALIZED,
        "source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        "subject": f"objects/{obj['name']}",
        "id": event_id,
        "datacontenttype": "application/json",
    }
    if event_time:
        attributes["time"] = event_time
    data = {k: (str(v) if k in ("generation", "size", "metageneration") else v) for k, v in obj.items()}
    data.setdefault("bucket", bucket)
    return CloudEvent(attributes, data)


def message_published(
    topic_path: str,
    subscription: str,
    data: bytes,
    attributes: dict[str, str],
    message_id: str,
    publish_time: str,
) -> CloudEvent:
    ce_attributes = {
        "type": PUBSUB_PUBLISHED,
        "source": f"//pubsub.googleapis.com/{topic_path}",
        "id": message_id,
        "datacontenttype": "application/json",
    }
    payload = {
        "message": {
            "data": base64.b64encode(data).decode(),
            "attributes": attributes,
            "messageId": message_id,
            "publishTime": publish_time,
        },
        "subscription": subscription,
    }
    return CloudEvent(ce_attributes, payload)


def deliver(url: str, event: CloudEvent, timeout: float = 60) -> bool:
    headers, body = to_binary(event)
    try:
        return requests.post(url, headers=headers, data=body, timeout=timeout).status_code < 300
    except requests.RequestException:
        return False


@dataclass
class Routes:
    """Which function receives events for which bucket, and the requests topics' function: the
    deployment's requests topic and each declared team's own (core.teams), all to ``intake_message``,
    which decides a message's team by the topic it arrived on."""

    buckets: dict[str, str]  # bucket → function URL
    requests_topic: str | None = None
    intake_message_url: str | None = None
    drop: DropFilter = field(default=lambda bucket, name: False)
    team_topics: tuple[str, ...] = ()

    @property
    def message_topics(self) -> list[str]:
        """Every topic whose messages become ``messagePublished`` events for ``intake_message``."""
        return [t for t in (self.requests_topic, *self.team_topics) if t]


PSTEST_RETENTION_SECONDS = 600  # pstest/fake.go retentionDuration (docs/pubsub.md)


@dataclass(frozen=True)
class Redelivery:
    """Production's retry shape for event deliveries: exponential backoff from ``min_delay`` to
    ``max_delay`` (Pub/Sub's retry policy), then the dead-letter topic after ``max_attempts``.
    Production: 10 s, 600 s, 5 (infra/terraform/variables.tf); locally the delays are shorter."""

    min_delay: float = 1.0
    max_delay: float = 60.0
    max_attempts: int = 5
    dead_letter_topic: str = "rlpipe-dead-letter"

    def __post_init__(self) -> None:
        # Production takes 5 to 100 attempts (0 means 5); pstest takes anything, and with 0 it
        # dead-letters every message before its first delivery. pstest also deletes a message
        # that waits 10 minutes past its publish time, skipping the dead-letter topic.
        if not 5 <= self.max_attempts <= 100:
            raise ValueError(f"max_attempts {self.max_attempts}: Pub/Sub takes 5 to 100")
        total = sum(self.backoff(attempt) for attempt in range(1, self.max_attempts))
        if total >= PSTEST_RETENTION_SECONDS:
            raise ValueError(f"backoffs add up to {total} s; pstest drops a message after 10 minutes")

    def backoff(self, attempt: int) -> int:
        """Seconds until the next delivery after failed ``attempt`` (1-based), as an ack deadline."""
        return max(1, round(float(min(self.max_delay, self.min_delay * 2 ** max(0, attempt - 1)))))


class EmulatorShim:
    """Pulls from Pub/Sub and delivers CloudEvents; requires PUBSUB_EMULATOR_HOST."""

    def __init__(
        self, project: str, gcs_topic: str, routes: Routes, log: Logger, redelivery: Redelivery | None = None
    ):
        self.project, self.gcs_topic, self.routes, self.log = (
            project,
            gcs_topic,
            routes,
            log.bind(simulated=False),
        )
        self.redelivery = redelivery or Redelivery()
        self._futures: list[Any] = []
        self.delivered = 0

    def setup(self) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import pubsub_v1
        from google.protobuf import duration_pb2

        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        policy = self.redelivery
        dead_letter = publisher.topic_path(self.project, policy.dead_letter_topic)
        with contextlib.suppress(gexc.AlreadyExists):
            publisher.create_topic(name=dead_letter)
        with contextlib.suppress(gexc.AlreadyExists):  # where an operator would look, as in production
            subscriber.create_subscription(
                name=subscriber.subscription_path(self.project, policy.dead_letter_topic), topic=dead_letter
            )
        topics = [self.gcs_topic, *self.routes.message_topics]
        for topic in topics:
            path = publisher.topic_path(self.project, topic)
            with contextlib.suppress(gexc.AlreadyExists):
                publisher.create_topic(name=path)
            sub = subscriber.subscription_path(self.project, f"{topic}-shim")
            with contextlib.suppress(gexc.AlreadyExists):
                subscriber.create_subscription(
                    request={
                        "name": sub,
                        "topic": path,
                        "ack_deadline_seconds": 60,
                        "dead_letter_policy": {
                            "dead_letter_topic": dead_letter,
                            "max_delivery_attempts": policy.max_attempts,
                        },
                        "retry_policy": {
                            "minimum_backoff": duration_pb2.Duration(seconds=int(policy.min_delay)),
                            "maximum_backoff": duration_pb2.Duration(seconds=int(policy.max_delay)),
                        },
                    }
                )

    def start(self) -> EmulatorShim:
        from google.cloud import pubsub_v1

        self.setup()
        subscriber = pubsub_v1.SubscriberClient()
        gcs_sub = subscriber.subscription_path(self.project, f"{self.gcs_topic}-shim")
        self._futures.append(subscriber.subscribe(gcs_sub, callback=self._on_gcs))
        for topic in self.routes.message_topics:
            self._futures.append(self._subscribe_requests(subscriber, topic))
        return self

    def _subscribe_requests(self, subscriber: Any, topic: str) -> Any:
        """One topic's messages to ``intake_message``, each event naming the topic it came from."""
        sub = subscriber.subscription_path(self.project, f"{topic}-shim")
        topic_path = f"projects/{self.project}/topics/{topic}"
        return subscriber.subscribe(sub, callback=lambda m: self._on_request(m, topic_path, sub))

    def _on_gcs(self, message: Any) -> None:
        attrs = dict(message.attributes)
        if attrs.get("eventType") != "OBJECT_FINALIZE":
            message.ack()
            return
        import json

        bucket, name = attrs.get("bucketId", ""), attrs.get("objectId", "")
        url = self.routes.buckets.get(bucket)
        if url is None or self.routes.drop(bucket, name):
            message.ack()
            return
        obj = json.loads(message.data or b"{}")
        obj.setdefault("name", name)
        event = storage_event(bucket, obj, message.message_id, attrs.get("eventTime"))
        if deliver(url, event):
            self.delivered += 1
            message.ack()
        else:
            self._back_off(message)

    def _on_request(self, message: Any, topic_path: str, subscription: str) -> None:
        publish_time = message.publish_time.isoformat() if message.publish_time else _now()
        event = message_published(
            topic_path, subscription, message.data, dict(message.attributes), message.message_id, publish_time
        )
        if self.routes.intake_message_url and deliver(self.routes.intake_message_url, event):
            self.delivered += 1
            message.ack()
        else:
            self._back_off(message)

    def _back_off(self, message: Any) -> None:
        """The retry policy's wait, which pstest does not keep for a nack: the failed message's
        deadline becomes the backoff, and the client lets go of it (no lease extension)."""
        delay = self.redelivery.backoff(message.delivery_attempt or 1)
        self.log.warning(
            "delivery failed; Pub/Sub delivers it again", attempt=message.delivery_attempt, after_s=delay
        )
        message.modify_ack_deadline(delay)
        message.drop()

    def stop(self) -> None:
        for future in self._futures:
            future.cancel()


class BucketWatcher:
    """Fallback without the emulator: list each bucket, emit one event per new (name, generation)."""

    def __init__(self, storage_client: Any, routes: Routes, log: Logger, interval: float = 0.3):
        self.client, self.routes, self.log, self.interval = storage_client, routes, log, interval
        self._seen: set[tuple[str, str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bucket-watcher", daemon=True)
        self.delivered = 0

    def start(self) -> BucketWatcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for bucket, url in self.routes.buckets.items():
                try:
                    blobs = list(self.client.list_blobs(bucket))
                except Exception as exc:  # the emulator may be restarting; try again next tick
                    self.log.warning("bucket listing failed", bucket=bucket, error=str(exc))
                    continue
                for blob in sorted(blobs, key=lambda b: b.generation or 0):
                    key = (bucket, blob.name, int(blob.generation or 0))
                    if key in self._seen:
                        continue
                    self._seen.add(key)
                    if self.routes.drop(bucket, blob.name):
                        continue
                    obj = {
                        "name": blob.name,
                        "bucket": bucket,
                        "generation": str(blob.generation),
                        "size": str(blob.size or 0),
                        "contentType": blob.content_type or "",
                    }
                    event = storage_event(bucket, obj, f"watch-{bucket}-{blob.generation}", _now())
                    for _ in range(5):
                        if deliver(url, event):
                            self.delivered += 1
                            break
                        time.sleep(0.5)
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
