"""What the local stack relies on from Google's Pub/Sub fake, pstest, held against the real server
(built from cloud.google.com/go/pubsub/v2 by components/build.sh) with the real Python client.

The first tests pin pstest's own behaviour where it matters to us (docs/pubsub.md): attributes
kept, redelivery when an ack deadline lapses, the dead-letter topic after the policy's attempts,
and the one difference we correct for: a nack is redelivered at once, whatever the subscription's
retry policy says. The last tests hold the shim's strict layer to production's shape: a failed
delivery comes back after the policy's backoff, and a delivery that keeps failing ends on the
dead-letter topic.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google.protobuf import duration_pb2

from rlpipe.control.adapters.logs import Logger
from rlpipe.local import pubsub
from rlpipe.local.shim import EmulatorShim, Redelivery, Routes
from tests.harness.pstest import start_pstest

PROJECT = "rlpipe-local"
# The tests poll with return_immediately (deprecated for production pulls, which should block).
pytestmark = pytest.mark.filterwarnings("ignore:The return_immediately flag is deprecated")


@pytest.fixture(scope="module")
def pstest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pubsub.PubSubEmulator]:
    server = start_pstest(tmp_path_factory.mktemp("pstest"))
    assert server.kind == pubsub.PSTEST
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = server.host
    yield server
    if previous is None:
        os.environ.pop("PUBSUB_EMULATOR_HOST", None)
    else:
        os.environ["PUBSUB_EMULATOR_HOST"] = previous
    server.stop()


def _clients() -> tuple[Any, Any]:
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


def _topic_and_subscription(name: str, **policy: Any) -> tuple[str, str]:
    publisher, subscriber = _clients()
    topic = publisher.topic_path(PROJECT, name)
    publisher.create_topic(name=topic)
    sub = subscriber.subscription_path(PROJECT, name)
    subscriber.create_subscription(
        request={"name": sub, "topic": topic, "ack_deadline_seconds": 10, **policy}
    )
    return topic, sub


def _pull_one(sub: str, timeout: float = 10.0) -> Any:
    _, subscriber = _clients()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = subscriber.pull(subscription=sub, max_messages=1, timeout=5, return_immediately=True)
        if got.received_messages:
            return got.received_messages[0]
        time.sleep(0.05)
    return None


def test_attributes_and_data_arrive_as_published(pstest: pubsub.PubSubEmulator) -> None:
    publisher, _ = _clients()
    topic, sub = _topic_and_subscription("attrs")
    publisher.publish(topic, b'{"a": 1}', eventType="OBJECT_FINALIZE", objectId="requests/x.yaml").result()
    got = _pull_one(sub)
    assert got.message.data == b'{"a": 1}'
    assert dict(got.message.attributes) == {"eventType": "OBJECT_FINALIZE", "objectId": "requests/x.yaml"}


def test_a_lapsed_ack_deadline_redelivers_and_a_nack_redelivers_at_once_ignoring_the_backoff(
    pstest: pubsub.PubSubEmulator,
) -> None:
    publisher, subscriber = _clients()
    topic, sub = _topic_and_subscription(
        "redelivery", retry_policy={"minimum_backoff": duration_pb2.Duration(seconds=30)}
    )
    publisher.publish(topic, b"x").result()
    first = _pull_one(sub)
    subscriber.modify_ack_deadline(subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=1)
    assert _pull_one(sub, timeout=0.3) is None, "not before its deadline"
    again = _pull_one(sub, timeout=5)
    assert again is not None and again.message.message_id == first.message.message_id
    subscriber.modify_ack_deadline(subscription=sub, ack_ids=[again.ack_id], ack_deadline_seconds=0)  # a nack
    # Real Pub/Sub would wait the retry policy's 30 s; pstest delivers it at once (docs/pubsub.md).
    assert _pull_one(sub, timeout=2) is not None


def test_the_dead_letter_topic_gets_a_message_after_the_policys_attempts(
    pstest: pubsub.PubSubEmulator,
) -> None:
    publisher, subscriber = _clients()
    _, dead_sub = _topic_and_subscription("dead-1")
    topic, sub = _topic_and_subscription(
        "poison",
        dead_letter_policy={
            "dead_letter_topic": publisher.topic_path(PROJECT, "dead-1"),
            "max_delivery_attempts": 5,
        },
    )
    publisher.publish(topic, b"poison").result()
    attempts = []
    while (got := _pull_one(sub, timeout=1)) is not None:
        attempts.append(got.delivery_attempt)
        subscriber.modify_ack_deadline(subscription=sub, ack_ids=[got.ack_id], ack_deadline_seconds=0)
    assert attempts == [1, 2, 3, 4, 5]
    dead = _pull_one(dead_sub)
    assert dead is not None and dead.message.data == b"poison"


class _Function:
    """A function endpoint that answers 500 ``fail`` times, then 200, and notes each arrival."""

    def __init__(self, fail: int) -> None:
        self.fail, self.arrivals = fail, []  # type: list[float]
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.arrivals.append(time.monotonic())
                self.send_response(500 if len(outer.arrivals) <= outer.fail else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"


def _shim_on(name: str, function: _Function, redelivery: Redelivery) -> tuple[EmulatorShim, str]:
    shim = EmulatorShim(
        PROJECT,
        f"{name}-gcs",
        Routes(buckets={}, requests_topic=f"{name}-requests", intake_message_url=function.url),
        Logger("shim-test"),
        redelivery,
    ).start()
    publisher, _ = _clients()
    return shim, publisher.topic_path(PROJECT, f"{name}-requests")


def _wait(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_shim_redelivers_a_failed_delivery_after_the_policys_backoff(
    pstest: pubsub.PubSubEmulator,
) -> None:
    function = _Function(fail=2)
    shim, topic = _shim_on(
        "backoff", function, Redelivery(min_delay=1, max_delay=2, dead_letter_topic="dl-backoff")
    )
    try:
        publisher, _ = _clients()
        publisher.publish(topic, b"{}").result()
        _wait(lambda: len(function.arrivals) >= 3, 20)
        assert len(function.arrivals) == 3
        gaps = [b - a for a, b in zip(function.arrivals, function.arrivals[1:], strict=False)]
        assert gaps[0] >= 0.9 and gaps[1] >= 1.9, f"backoff 1 s then 2 s, not pstest's at-once: {gaps}"
        time.sleep(1.5)
        assert len(function.arrivals) == 3 and shim.delivered == 1, "acked once it answered 200"
    finally:
        shim.stop()
        function.server.shutdown()


def test_a_delivery_that_keeps_failing_ends_on_the_dead_letter_topic(pstest: pubsub.PubSubEmulator) -> None:
    function = _Function(fail=10**6)
    policy = Redelivery(min_delay=1, max_delay=1, max_attempts=5, dead_letter_topic="dl-poison")
    shim, topic = _shim_on("poison-shim", function, policy)
    try:
        publisher, _ = _clients()
        publisher.publish(topic, b"{}", why="poison").result()
        _wait(lambda: len(function.arrivals) >= 5, 30)
        dead = _pull_one(_clients()[1].subscription_path(PROJECT, "dl-poison"), timeout=10)
        assert dead is not None and dict(dead.message.attributes)["why"] == "poison"
        assert len(function.arrivals) == 5, "five attempts, then no more"
    finally:
        shim.stop()
        function.server.shutdown()


def test_a_redelivery_schedule_pstest_or_production_would_not_keep_is_refused() -> None:
    with pytest.raises(ValueError, match="5 to 100"):
        Redelivery(max_attempts=0)  # pstest would dead-letter every message before delivering it
    with pytest.raises(ValueError, match="10 minutes"):
        Redelivery(min_delay=60, max_delay=600, max_attempts=5)  # 60+120+240+480 s: pstest drops it
    assert [Redelivery().backoff(n) for n in range(1, 6)] == [1, 2, 4, 8, 16]
