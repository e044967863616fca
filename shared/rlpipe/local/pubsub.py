"""The official Pub/Sub emulator (Java, shipped with the Google Cloud CLI), when this machine has it.

The jar's own launcher is started directly rather than ``gcloud beta emulators pubsub start``:
killing the gcloud wrapper orphans the Java child, which keeps the port. Machines without the
CLI or Java get ``None`` from ``find_launcher`` and the local stack falls back to a bucket watcher.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from rlpipe.local.ports import free_port
from rlpipe.local.procs import Child, http_ready


@functools.cache
def find_launcher() -> Path | None:
    """The emulator's launcher script (asking ``gcloud info`` costs a second and a half: once per process)."""
    if shutil.which("java") is None:
        return None
    gcloud = shutil.which("gcloud")
    roots = []
    if gcloud:
        try:
            out = subprocess.run(
                [gcloud, "info", "--format=value(installation.sdk_root)"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout.strip()
            if out:
                roots.append(Path(out))
        except (OSError, subprocess.TimeoutExpired):
            pass
        roots.append(Path(gcloud).resolve().parent.parent)
    roots += [Path("/usr/lib/google-cloud-sdk"), Path("/usr/share/google-cloud-sdk")]
    for root in roots:
        launcher = root / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
        if launcher.exists():
            return launcher
    return None


def unavailable_reason() -> str | None:
    if shutil.which("java") is None:
        return "no java on PATH"
    if find_launcher() is None:
        return "no Google Cloud CLI Pub/Sub emulator (google-cloud-cli-pubsub-emulator) installed"
    return None


class PubSubEmulator:
    def __init__(self, log_dir: Path, *, port: int | None = None, die_with_parent: bool = True):
        launcher = find_launcher()
        if launcher is None:
            raise RuntimeError(f"Pub/Sub emulator unavailable: {unavailable_reason()}")
        self.port = port or free_port()
        self.child = Child(
            "pubsub-emulator",
            [str(launcher), "--host=127.0.0.1", f"--port={self.port}"],
            log_path=log_dir / "pubsub-emulator.log",
            die_with_parent=die_with_parent,
        )

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> PubSubEmulator:
        self.child.start()
        self.child.wait_ready(
            http_ready(f"http://{self.host}/", lambda status, body: body.strip() == b"Ok"), timeout=60
        )
        return self

    def stop(self) -> None:
        self.child.stop()
