"""CloudEvent data held to Google's own classes for it (PyPI `google-events`), parsed strictly.

Google publishes the payloads of its CloudEvents as protos (github.com/googleapis/google-cloudevents)
and generates `google-events` from them: ``google.events.cloud.storage_v1.StorageObjectData`` and
``google.events.cloud.pubsub_v1.MessagePublishedData``. A payload is parsed with the library's own
JSON reader with ``ignore_unknown_fields=False``, so a field the proto does not have (a misspelling,
a field in the wrong place) or a value of the wrong kind (``"generation": "abc"``) is an error.

The package carries the data classes but not the CloudEvent type strings: those live in the protos'
``cloud_event_type`` option (proto/google/events/cloud/storage/v1/events.proto, ObjectFinalizedEvent;
proto/google/events/cloud/pubsub/v1/events.proto, MessagePublishedEvent), which the Python package
does not ship. So ``EVENT_DATA`` names each type we use once, with its data class, and
``type_problems`` holds each to the class's proto package (``google.cloud.storage.object.v1.…``
must carry ``google.events.cloud.storage.v1`` data).

The `google-events` version is named once, in requirements-dev.txt; ``version_drift`` compares it
with what is installed.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.events.cloud.pubsub_v1 import MessagePublishedData
from google.events.cloud.storage_v1 import StorageObjectData
from google.protobuf import json_format

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS_DEV = ROOT / "requirements-dev.txt"
DISTRIBUTION = "google-events"

# The CloudEvent types rlpipe receives, and the class Google generates for each one's data.
EVENT_DATA: dict[str, type[Any]] = {
    "google.cloud.storage.object.v1.finalized": StorageObjectData,
    "google.cloud.pubsub.topic.v1.messagePublished": MessagePublishedData,
}

# Fields real Cloud Storage sends in an object's resource that the protos of the pinned google-events
# predate, by name and only at the top of StorageObjectData. The objects resource:
# https://cloud.google.com/storage/docs/json_api/v1/objects#resource ("timeFinalized": the time the
# object was finalized). Each entry must still be one the library rejects
# (tests/local/test_event_schemas.py), so an entry the protos catch up with is dropped.
NEWER_THAN_THE_PROTOS: dict[str, str] = {
    "timeFinalized": "https://cloud.google.com/storage/docs/json_api/v1/objects#resource",
}

# google.cloud.<service>.<resource>.v<N>.<action>: the shape of every Google CloudEvent type.
_GOOGLE_TYPE = re.compile(
    r"google\.cloud\.(?P<service>[a-z]+)\.(?P<resource>[a-z]+)\.(?P<version>v[0-9]+)\.[a-zA-Z]+"
)


def data_problems(event_type: str, data: bytes | str | Mapping[str, Any]) -> list[str]:
    """Why the data of a CloudEvent of ``event_type`` is not what Google's class for it allows."""
    cls = EVENT_DATA.get(event_type)
    if cls is None:
        return [f"{event_type!r} is not a CloudEvent type rlpipe receives ({sorted(EVENT_DATA)})"]
    try:
        payload = json.loads(data) if isinstance(data, (bytes, str)) else dict(data)
    except ValueError as exc:
        return [f"the data is not JSON: {exc}"]
    if not isinstance(payload, dict):
        return ["the data is not a JSON object"]
    if cls is StorageObjectData:
        payload = {k: v for k, v in payload.items() if k not in NEWER_THAN_THE_PROTOS}
    try:
        json_format.ParseDict(payload, cls.pb()(), ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        return [str(exc).split("\n")[0]]
    return []


def type_problems(types: Iterable[str]) -> list[str]:
    """Each type string must be one EVENT_DATA names, shaped as Google's, with data of its service."""
    problems = []
    for event_type in types:
        if event_type not in EVENT_DATA:
            problems.append(f"{event_type!r} is not one of {sorted(EVENT_DATA)}")
            continue
        shape = _GOOGLE_TYPE.fullmatch(event_type)
        package = EVENT_DATA[event_type].pb().DESCRIPTOR.full_name.rsplit(".", 1)[0]
        if shape is None:
            problems.append(f"{event_type!r} is not shaped google.cloud.<service>.<resource>.v<N>.<action>")
        elif package != f"google.events.cloud.{shape['service']}.{shape['version']}":
            problems.append(
                f"{event_type!r} carries {package} data, not {shape['service']} {shape['version']}"
            )
    return problems


# Type strings in what we ship or run: a quoted google.cloud.<service>.<resource>.v<N>.<action>, the
# action in lower camelCase (a gRPC service, google.cloud.workflows.executions.v1.Executions, is not one).
_QUOTED_TYPE = re.compile(r"""["'](google\.cloud\.[a-z]+\.[a-zA-Z]+\.v[0-9]+\.[a-z][a-zA-Z]*)["']""")


def type_strings_in(paths: Iterable[Path]) -> dict[str, set[str]]:
    """type string → the files that spell it."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for m in _QUOTED_TYPE.finditer(path.read_text()):
            found.setdefault(m[1], set()).add(path.name)
    return found


def pinned_version(requirements: Path = REQUIREMENTS_DEV, distribution: str = DISTRIBUTION) -> str | None:
    for line in requirements.read_text().splitlines():
        m = re.fullmatch(rf"\s*{re.escape(distribution)}==(\S+)\s*(?:#.*)?", line)
        if m:
            return m[1]
    return None


def version_drift(requirements: Path = REQUIREMENTS_DEV, distribution: str = DISTRIBUTION) -> str | None:
    pinned = pinned_version(requirements, distribution)
    installed = importlib.metadata.version(distribution)
    if pinned is None:
        return f"{requirements.name} does not pin {distribution}==<version>: pin the one whose protos are checked"
    if pinned != installed:
        return (
            f"{distribution} {installed} is installed but {requirements.name} pins {pinned}: update the pin in "
            f"{requirements.name} (and NEWER_THAN_THE_PROTOS in tests/harness/event_schemas.py), or reinstall"
        )
    return None


# ------------------------------------------------------------------------------------ capturing


@dataclass(frozen=True)
class Delivered:
    """One binary-mode CloudEvent as a function receives it."""

    event_type: str
    attributes: dict[str, str]  # the ce-* headers, without the prefix
    data: bytes


class EventSink:
    """An HTTP endpoint standing where a function would, keeping every CloudEvent posted to it."""

    def __init__(self) -> None:
        self.received: list[Delivered] = []
        self._arrived = threading.Condition()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                attributes = {
                    k[3:].lower(): v for k, v in self.headers.items() if k.lower().startswith("ce-")
                }
                with sink._arrived:
                    sink.received.append(Delivered(attributes.get("type", ""), attributes, body))
                    sink._arrived.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="event-sink", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def wait_for(self, count: int, timeout: float) -> list[Delivered]:
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.received) >= count, timeout=timeout)
            return list(self.received)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
