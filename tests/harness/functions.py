"""functions-framework servers as real HTTP processes, and Eventarc-shaped CloudEvents to post to them."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import requests
from cloudevents.conversion import to_binary, to_structured
from cloudevents.http import CloudEvent

from rlpipe.local.ports import free_port
from rlpipe.local.procs import Child

ROOT = Path(__file__).resolve().parents[2]


class FunctionServer:
    def __init__(self, target: str, signature: str, env: dict[str, str], log_dir: Path):
        self.port = free_port()
        self.log_path = log_dir / f"{target}-{self.port}.log"
        argv = [
            str(ROOT / ".venv" / "bin" / "functions-framework"),
            "--target",
            target,
            "--source",
            str(ROOT / "functions" / "main.py"),
            "--signature-type",
            signature,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self.child = Child(target, argv, log_path=self.log_path, env=env, cwd=ROOT)
        self._since = 0  # where this test's part of the log begins (a server a module's tests share)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> FunctionServer:
        return self.spawn().wait()

    def spawn(self) -> FunctionServer:
        """Start the process (from the main thread: it dies with the thread that spawned it)."""
        self.child.start()
        return self

    def wait(self) -> FunctionServer:
        def ready() -> bool:
            try:
                requests.get(self.url, timeout=1)
                return True
            except requests.RequestException:
                return False

        self.child.wait_ready(ready, timeout=120)
        return self

    def stop(self) -> None:
        self.child.stop()

    def begin_test(self) -> None:
        """From here on, :meth:`logs` is this test's: what the server printed for earlier tests of
        its module is left out, so no test passes on another's lines."""
        self._since = self.log_path.stat().st_size if self.log_path.exists() else 0

    def logs(self) -> str:
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(self._since)
            return log.read().decode(errors="replace")


def gcs_event(
    bucket: str,
    name: str,
    generation: int | str,
    size: int,
    *,
    event_id: str | None = None,
    event_type: str = "google.cloud.storage.object.v1.finalized",
) -> CloudEvent:
    """The exact Eventarc storage shape: generation and size as strings, subject objects/NAME."""
    attributes = {
        "type": event_type,
        "source": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
        "subject": f"objects/{name}",
        "id": event_id or uuid.uuid4().hex,
        "datacontenttype": "application/json",
    }
    data = {
        "bucket": bucket,
        "name": name,
        "generation": str(generation),
        "size": str(size),
        "contentType": "application/octet-stream",
        "kind": "storage#object",
    }
    return CloudEvent(attributes, data)


def pubsub_event(
    topic: str, payload: bytes, message_id: str, *, attributes: dict[str, str] | None = None
) -> CloudEvent:
    ce_attributes = {
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "source": f"//pubsub.googleapis.com/{topic}",
        "id": message_id,
        "datacontenttype": "application/json",
    }
    data = {
        "message": {
            "data": base64.b64encode(payload).decode(),
            "messageId": message_id,
            "publishTime": "2026-12-02T00:00:00Z",
            "attributes": attributes or {},
        },
        "subscription": "projects/p/subscriptions/intake",
    }
    return CloudEvent(ce_attributes, data)


def post(url: str, event: CloudEvent, *, mode: str = "binary", timeout: float = 60) -> requests.Response:
    headers, body = (to_binary if mode == "binary" else to_structured)(event)
    return requests.post(url, headers=headers, data=body, timeout=timeout)


def post_json(url: str, body: Any, timeout: float = 60) -> requests.Response:
    return requests.post(
        url, data=json.dumps(body), headers={"Content-Type": "application/json"}, timeout=timeout
    )
