"""The CloudEvents the local stand-ins deliver, and those the tests post, are what Google's classes allow.

Each CloudEvent's data is parsed strictly with `google-events` (tests/harness/event_schemas.py): the
shim's deliveries are captured from the real path (fake-gcs-server's notifications through Google's
Pub/Sub fake, and messages published to it), as are the bucket watcher's, the CLI's direct delivery
and the local upstream tick; the samples are the builders the tests feed the functions. A field
misspelt in the shim and a wrong type string, each planted in a copy of the real file, are caught.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from google.events.cloud.storage_v1 import StorageObjectData
from google.protobuf import json_format

from rlpipe.control.adapters import events as adapter_events
from rlpipe.control.adapters.logs import Logger
from rlpipe.local import pubsub, shim
from rlpipe.local.gcs import FakeGcs
from tests.harness import event_schemas
from tests.harness.event_schemas import EVENT_DATA, Delivered, EventSink, data_problems, type_problems
from tests.harness.functions import gcs_event, pubsub_event
from tests.harness.pstest import start_pstest

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "shared" / "rlpipe" / "local" / "shim.py"
PROJECT = "rlpipe-events"
FINALIZED = "google.cloud.storage.object.v1.finalized"
PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"


def _problems(deliveries: list[Delivered]) -> list[str]:
    return [
        f"{d.event_type} {d.data[:200]!r}: {p}"
        for d in deliveries
        for p in data_problems(d.event_type, d.data)
    ]


# ------------------------------------------------------------------------------------ the real path


@pytest.fixture(scope="module")
def pubsub_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pubsub.PubSubEmulator]:
    server = start_pstest(tmp_path_factory.mktemp("pstest"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shim_deliveries(
    pubsub_fake: pubsub.PubSubEmulator, tmp_path_factory: pytest.TempPathFactory
) -> list[Delivered]:
    """What the shim posts to the functions for objects written to fake-gcs-server (its real
    OBJECT_FINALIZE notifications) and for messages published to the requests topic. Everything
    is stopped, and the environment restored, before the tests read it."""
    from google.cloud import pubsub_v1

    from rlpipe.control.adapters.blobstore import make_client

    sink = EventSink()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PUBSUB_EMULATOR_HOST", pubsub_fake.host)
        routes = shim.Routes(
            buckets={"events-in": sink.url}, requests_topic="requests", intake_message_url=sink.url
        )
        emulator_shim = shim.EmulatorShim(PROJECT, "gcs-events", routes, Logger("event-schemas")).start()
        gcs = FakeGcs(
            tmp_path_factory.mktemp("fake-gcs"),
            pubsub_project=PROJECT,
            pubsub_topic="gcs-events",
            pubsub_host=pubsub_fake.host,
        ).start()
        try:
            env.setenv("STORAGE_EMULATOR_HOST", gcs.url)
            bucket = make_client(PROJECT).create_bucket("events-in")
            described = bucket.blob("requests/team/a.yaml")
            described.metadata = {"submitted-by": "someone"}  # passed on in the notification
            described.upload_from_string(b"model: gemma4-26b\n", content_type="application/yaml")
            bucket.blob("runs/r1/trained/rl/checkpoints/actor/50/commit_success.txt").upload_from_string(b"")
            publisher = pubsub_v1.PublisherClient()
            topic = publisher.topic_path(PROJECT, "requests")
            publisher.publish(topic, b'{"model": "gemma4-26b"}', origin="test").result()
            publisher.publish(topic, b"{}").result()
            delivered = sink.wait_for(4, timeout=30)
        finally:
            emulator_shim.stop()
            gcs.stop()
            sink.stop()
    return delivered


@pytest.mark.integration
def test_every_event_the_shim_delivers_parses_strictly(shim_deliveries: list[Delivered]) -> None:
    kinds = sorted(d.event_type for d in shim_deliveries)
    assert kinds == sorted([FINALIZED, FINALIZED, PUBLISHED, PUBLISHED]), (
        "the shim delivered what was written"
    )
    assert _problems(shim_deliveries) == []


def test_the_bucket_watchers_events_parse_strictly(fake_gcs: Any) -> None:
    """Without Pub/Sub the watcher lists the buckets and builds the events itself."""
    from rlpipe.control.adapters.blobstore import make_client

    sink = EventSink()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
        client = make_client(PROJECT)
        bucket = client.create_bucket(f"watched-{uuid.uuid4().hex[:8]}")
        bucket.blob("requests/a.yaml").upload_from_string(b"x: 1\n", content_type="application/yaml")
        bucket.blob("requests/b.json").upload_from_string(b"{}")
        watcher = shim.BucketWatcher(client, shim.Routes(buckets={bucket.name: sink.url}), Logger("t"), 0.05)
        watcher.start()
        try:
            deliveries = sink.wait_for(2, timeout=30)
        finally:
            watcher.stop()
            sink.stop()
    assert [d.event_type for d in deliveries] == [FINALIZED, FINALIZED]
    assert _problems(deliveries) == []


def test_the_direct_deliveries_parse_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rlpipe submit --via pubsub` without the Pub/Sub fake, and the local stack's upstream tick."""
    from rlpipe.cli import submit
    from rlpipe.local.stack import LocalStack, StackConfig

    sink = EventSink()
    try:
        monkeypatch.setenv("RLPIPE_LOCAL", "1")
        monkeypatch.setenv("RLPIPE_INTAKE_MESSAGE_URL", sink.url)
        monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
        submit._publish(None, "projects/local/topics/rlpipe-requests", b'{"model": "gemma4-26b"}')  # type: ignore[arg-type]
        stack = LocalStack(StackConfig(project="local"))
        stack.state = SimpleNamespace(endpoints={"function upstream_poll": sink.url})  # type: ignore[assignment]
        assert stack.upstream_tick() == 200
        deliveries = sink.wait_for(2, timeout=10)
    finally:
        sink.stop()
    assert [d.event_type for d in deliveries] == [PUBLISHED, PUBLISHED]
    assert _problems(deliveries) == []


# ------------------------------------------------------------------------------------ the samples


SAMPLES = [
    pytest.param(gcs_event("requests", "requests/team/a.yaml", 1712, 99), id="gcs_event"),
    pytest.param(
        gcs_event("artifacts", "runs/r1/hf/manifest.json", "7", 0, event_id="e"), id="gcs_event-str"
    ),
    pytest.param(
        pubsub_event("projects/p/topics/t", b'{"a": 1}', "42", attributes={"k": "v"}), id="pubsub_event"
    ),
    pytest.param(pubsub_event("projects/p/topics/t", b"", "43"), id="pubsub_event-empty"),
]


@pytest.mark.parametrize("event", SAMPLES)
def test_the_sample_payloads_the_tests_post_parse_strictly(event: Any) -> None:
    assert data_problems(event["type"], event.data) == []


# ------------------------------------------------------------------------------------ what bites


def _load_copy(path: Path, tmp_path: Path, old: str, new: str) -> ModuleType:
    text = path.read_text()
    assert old in text, f"the mutation's anchor is no longer in {path.name}"
    copy = tmp_path / path.name
    copy.write_text(text.replace(old, new, 1))
    name = f"mutated_{path.stem}_{uuid.uuid4().hex[:6]}"
    spec = importlib.util.spec_from_file_location(name, copy)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("old", "new", "build", "says"),
    [
        pytest.param(
            '"messageId": message_id,',
            '"messageID": message_id,',
            lambda m: m.message_published(
                "projects/p/topics/t", "projects/p/subscriptions/s", b"{}", {}, "1", "2026-01-01T00:00:00Z"
            ),
            'no field named "messageID"',
            id="pubsub-message-field",
        ),
        pytest.param(
            '"subscription": subscription,',
            '"subscriptions": subscription,',
            lambda m: m.message_published(
                "projects/p/topics/t", "projects/p/subscriptions/s", b"{}", {}, "1", "2026-01-01T00:00:00Z"
            ),
            'no field named "subscriptions"',
            id="pubsub-subscription-field",
        ),
        pytest.param(
            'data.setdefault("bucket", bucket)',
            'data.setdefault("bucketName", bucket)',
            lambda m: m.storage_event("b", {"name": "requests/a.yaml", "generation": 1, "size": 3}, "e1"),
            'no field named "bucketName"',
            id="storage-bucket-field",
        ),
    ],
)
def test_a_field_misspelt_in_the_shim_is_caught(
    tmp_path: Path, old: str, new: str, build: Any, says: str
) -> None:
    event = build(_load_copy(SHIM, tmp_path, old, new))
    problems = data_problems(event["type"], event.data)
    assert any(says in p for p in problems), problems
    assert data_problems(event["type"], build(shim).data) == [], "the real shim's event is accepted"


def test_a_wrong_value_in_a_known_field_is_caught() -> None:
    event = gcs_event("requests", "requests/a.yaml", 1, 1)
    assert any("generation" in p for p in data_problems(FINALIZED, {**event.data, "generation": "first"}))


# ------------------------------------------------------------------------------------ type strings

# What we ship or run that names a CloudEvent type.
TYPE_SOURCES = [
    *sorted((ROOT / "shared").rglob("*.py")),
    ROOT / "functions" / "main.py",
    *sorted((ROOT / "infra" / "terraform").glob("*.tf")),
    ROOT / "tests" / "harness" / "functions.py",
]


def test_every_type_string_we_use_is_one_google_publishes_for_its_data() -> None:
    found = event_schemas.type_strings_in(TYPE_SOURCES)
    assert set(found) == set(EVENT_DATA), f"type strings in use: {found}"
    assert {"shim.py", "events.py", "functions.tf", "functions.py"} <= set().union(*found.values())
    assert type_problems(found) == []
    assert type_problems([adapter_events.GCS_FINALIZED, adapter_events.PUBSUB_PUBLISHED]) == []
    assert type_problems([shim.GCS_FINALIZED, shim.PUBSUB_PUBLISHED]) == []


@pytest.mark.parametrize(
    ("path", "old", "new"),
    [
        pytest.param(
            SHIM,
            '"google.cloud.storage.object.v1.finalized"',
            '"google.cloud.storage.object.v1.finalised"',
            id="shim",
        ),
        pytest.param(
            ROOT / "shared" / "rlpipe" / "control" / "adapters" / "events.py",
            '"google.cloud.pubsub.topic.v1.messagePublished"',
            '"google.cloud.pubsub.topic.v1.published"',
            id="adapter",
        ),
    ],
)
def test_a_wrong_type_string_is_caught(tmp_path: Path, path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    copy = tmp_path / path.name
    copy.write_text(text.replace(old, new, 1))
    wrong = new.strip('"')
    assert any(wrong in p for p in type_problems(event_schemas.type_strings_in([copy])))
    assert any("is not a CloudEvent type rlpipe receives" in p for p in data_problems(wrong, "{}"))


def test_a_type_mapped_to_another_services_data_is_caught(tmp_path: Path) -> None:
    harness = ROOT / "tests" / "harness" / "event_schemas.py"
    mutated = _load_copy(
        harness,
        tmp_path,
        '"google.cloud.storage.object.v1.finalized": StorageObjectData',
        '"google.cloud.storage.object.v1.finalized": MessagePublishedData',
    )
    problems = mutated.type_problems([FINALIZED])
    assert problems and "carries google.events.cloud.pubsub.v1 data" in problems[0], problems


# ------------------------------------------------------------------------------------ newer fields, drift


def test_each_field_newer_than_the_protos_is_still_one_they_reject() -> None:
    sample = dict(gcs_event("requests", "requests/a.yaml", 1, 1).data)
    for name in event_schemas.NEWER_THAN_THE_PROTOS:
        with pytest.raises(json_format.ParseError):
            json_format.ParseDict(
                {**sample, name: "2026-01-01T00:00:00Z"},
                StorageObjectData.pb()(),
                ignore_unknown_fields=False,
            )
    assert data_problems(FINALIZED, {**sample, "timeFinalized": "2026-01-01T00:00:00Z"}) == []
    assert data_problems(FINALIZED, {**sample, "timeFinalised": "2026-01-01T00:00:00Z"}), (
        "only the named field"
    )


def test_the_installed_google_events_is_the_pinned_one() -> None:
    assert event_schemas.version_drift() is None


def test_a_pin_other_than_the_installed_version_is_reported(tmp_path: Path) -> None:
    copy = tmp_path / "requirements-dev.txt"
    shutil.copy(event_schemas.REQUIREMENTS_DEV, copy)
    pinned = event_schemas.pinned_version()
    assert pinned
    copy.write_text(copy.read_text().replace(f"google-events=={pinned}", "google-events==0.1.1"))
    drift = event_schemas.version_drift(copy)
    assert drift and "update the pin in requirements-dev.txt" in drift, drift
