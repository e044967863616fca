"""CloudEvents in (GCS finalized, Pub/Sub published) and artifact object names → signals.

``match_artifact`` is deliberately pure string work: the artifacts bucket sees thousands of
object writes per checkpoint, and all but a handful must be dismissed in microseconds without
touching the network.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Literal

from rlpipe.core import layout

GCS_FINALIZED = "google.cloud.storage.object.v1.finalized"
PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"

Signal = Literal["converted", "checkpoint", "exported"]


class BadEvent(ValueError):
    """The event is not one this function can act on; the message says why."""


@dataclass(frozen=True)
class ObjectEvent:
    bucket: str
    name: str
    generation: str
    size: int | None
    event_id: str


@dataclass(frozen=True)
class MessageEvent:
    topic: str
    message_id: str
    data: bytes
    attributes: dict[str, str]
    event_id: str


def object_event(attributes: dict[str, Any], data: Any) -> ObjectEvent:
    """Eventarc storage event → the object it names (generation and size arrive as strings)."""
    if attributes.get("type") != GCS_FINALIZED:
        raise BadEvent(f"event type {attributes.get('type')!r} is not {GCS_FINALIZED}")
    if not isinstance(data, dict):
        raise BadEvent("event data is not a JSON object")
    bucket, name = data.get("bucket"), data.get("name")
    if not bucket:
        source = str(attributes.get("source", ""))
        bucket = source.rsplit("/buckets/", 1)[-1] if "/buckets/" in source else None
    subject = str(attributes.get("subject", ""))
    if not name and subject.startswith("objects/"):
        name = subject[len("objects/") :]
    if not isinstance(bucket, str) or not bucket or not isinstance(name, str) or not name:
        raise BadEvent("event names no bucket or object")
    generation = _int64(data.get("generation"))
    if generation is None or generation == 0:
        # GCS generations are positive int64s; 0 would make a second key for the same object.
        raise BadEvent(f"object generation {str(data.get('generation'))[:40]!r} is not a positive int64")
    return ObjectEvent(bucket, name, str(generation), _int64(data.get("size")), str(attributes.get("id", "")))


_DECIMAL = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit() also accepts "²"
_INT64_MAX = 2**63 - 1


def _int64(value: Any) -> int | None:
    """A non-negative int64 from the JSON string (or number) GCS sends; None for anything else."""
    if isinstance(value, bool):
        return None
    text = str(value) if isinstance(value, (str, int)) else ""
    if not _DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if number <= _INT64_MAX else None


def message_event(attributes: dict[str, Any], data: Any) -> MessageEvent:
    if attributes.get("type") != PUBSUB_PUBLISHED:
        raise BadEvent(f"event type {attributes.get('type')!r} is not {PUBSUB_PUBLISHED}")
    if not isinstance(data, dict) or not isinstance(data.get("message"), dict):
        raise BadEvent("event data has no Pub/Sub message")
    message = data["message"]
    encoded = message.get("data") or ""
    if not isinstance(encoded, str):
        raise BadEvent("message data is not a base64 string")
    try:
        payload = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise BadEvent("message data is not valid base64") from None
    raw_id = message.get("messageId") or message.get("message_id") or ""
    if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool) or not str(raw_id):
        raise BadEvent("message has no messageId")
    message_id = str(raw_id)
    attrs = message.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise BadEvent("message attributes are not a mapping")
    source = str(attributes.get("source", ""))
    topic = (
        source.split("//pubsub.googleapis.com/", 1)[-1] if "//pubsub.googleapis.com/" in source else source
    )
    return MessageEvent(
        topic, message_id, payload, {str(k): str(v) for k, v in attrs.items()}, str(attributes.get("id", ""))
    )


@dataclass(frozen=True)
class ArtifactSignal:
    run_id: str | None  # None for conversion-cache objects: the cache key is known, not the run
    stage: str
    signal: Signal
    cache_key: str | None = None
    attempt_dir: str | None = None
    step: int | None = None


# A team's runs and conversions live under teams/<team>/ (layout.team_prefix): the same names after it.
_TEAM = r"(?P<team>teams/[a-z]([a-z0-9-]{0,38}[a-z0-9])?/)?"
_RUN_STEP_COMMIT = re.compile(
    rf"^{_TEAM}runs/(?P<run>[a-z][a-z0-9]{{1,40}})/trained/rl/checkpoints/actor/(?P<step>[0-9]{{1,9}})/commit_success\.txt$"
)
# The export Job writes its manifest after every file it uploads (core/export_manifest.py).
_RUN_EXPORT_MANIFEST = re.compile(
    rf"^{_TEAM}runs/(?P<run>[a-z][a-z0-9]{{1,40}})/hf/{re.escape(layout.EXPORT_MANIFEST)}$"
)
_CACHE_COMMIT = re.compile(
    rf"^{_TEAM}cache/maxtext/(?P<key>[a-z0-9]{{1,64}})/(?P<dir>(?P<run>[a-z][a-z0-9]{{1,40}})-a(?P<attempt>[0-9]{{1,4}}))/0/commit_success\.txt$"
)


def match_artifact(name: str) -> ArtifactSignal | None:
    """Object name → completion signal, or None for the thousands of objects that are not one."""
    if not name.endswith(("commit_success.txt", ".json", ".safetensors")):
        return None
    if name.startswith((layout.RUNS_PREFIX, layout.TEAMS_PREFIX)):
        m = _RUN_STEP_COMMIT.match(name)
        if m:
            return ArtifactSignal(m["run"], "train", "checkpoint", step=int(m["step"]))
        m = _RUN_EXPORT_MANIFEST.match(name)
        if m:
            return ArtifactSignal(m["run"], "export", "exported")
    if name.startswith((layout.CACHE_PREFIX, layout.TEAMS_PREFIX)):
        m = _CACHE_COMMIT.match(name)
        if m:
            return ArtifactSignal(
                m["run"],
                "convert",
                "converted",
                cache_key=m["key"],
                attempt_dir=f"{m['team'] or ''}{layout.CACHE_PREFIX}{m['key']}/{m['dir']}/",
            )
    return None
