"""Pub/Sub for the local stack: Google's own fake, ``pstest``, served by ``components/pstest``.

Why pstest: it is the in-memory server Google maintains beside the Go client
(``cloud.google.com/go/pubsub/v2/pstest``), it speaks the real gRPC API, and every machine with Go
builds it from the module proxy (``make components``, seconds once Go's cache is warm). With it,
fake-gcs-server publishes real GCS notifications, ``rlpipe submit --via pubsub`` publishes real
messages, and the real ``google-cloud-pubsub`` client pulls them, as in production.

Where pstest is not built, the Google Cloud CLI's Java emulator is used if the machine has it. Its
launcher is started directly rather than ``gcloud beta emulators pubsub start``: killing the
gcloud wrapper orphans the Java child, which keeps the port. With neither, ``unavailable_reason``
says why and the local stack falls back to a bucket watcher, saying so.

docs/pubsub.md lists what we rely on from pstest and where it differs from Pub/Sub.
"""

from __future__ import annotations

import functools
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from rlpipe.local.controlplane import components
from rlpipe.local.ports import free_port
from rlpipe.local.procs import Child, http_ready

PSTEST = "pstest"


def pstest_binary() -> Path | None:
    path = components.bin_dir() / PSTEST
    return path if path.is_file() else None


@functools.cache
def find_launcher() -> Path | None:
    """The Java emulator's launcher script (asking ``gcloud info`` costs a second and a half: once per process)."""
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


def build_pstest(say: Callable[[str], None]) -> Path | None:
    """Build pstest where Go is installed and it is missing (about 20 s cold, from the module
    proxy; ``components/build.sh`` caches it), so that ``rlpipe local up`` always has Pub/Sub
    on a machine with Go. Returns None (and says why) when it cannot."""
    if pstest_binary() is not None or shutil.which("go") is None:
        return pstest_binary()
    say("[local] building Google's Pub/Sub fake (pstest) from its Go module, once (about 20 s)")
    done = subprocess.run(
        [str(components.COMPONENTS / "build.sh"), PSTEST], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        say(f"[local] pstest did not build: {done.stderr.strip()[-500:]}")
    return pstest_binary()


def server_kind() -> str | None:
    """Which server the stack will run: ``pstest``, ``java``, or None (the bucket watcher)."""
    if pstest_binary() is not None:
        return PSTEST
    if find_launcher() is not None:
        return "java"
    return None


def unavailable_reason() -> str | None:
    if server_kind() is not None:
        return None
    go = "" if shutil.which("go") else "; Go is not installed, so it cannot be built here"
    return (
        f"Google's Pub/Sub fake (pstest) is not built in {components.bin_dir()}{go}: {components.BUILD_HINT}"
    )


def _grpc_port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class PubSubEmulator:
    def __init__(self, log_dir: Path, *, port: int | None = None, die_with_parent: bool = True):
        self.kind = server_kind()
        if self.kind is None:
            raise RuntimeError(f"Pub/Sub unavailable: {unavailable_reason()}")
        self.port = port or free_port()
        if self.kind == PSTEST:
            argv = [str(pstest_binary()), "-host", "127.0.0.1", "-port", str(self.port)]
        else:
            argv = [str(find_launcher()), "--host=127.0.0.1", f"--port={self.port}"]
        self.child = Child(
            f"pubsub-{self.kind}",
            argv,
            log_path=log_dir / f"pubsub-{self.kind}.log",
            die_with_parent=die_with_parent,
        )

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def description(self) -> str:
        return (
            "Google's Pub/Sub fake (pstest)"
            if self.kind == PSTEST
            else "the Google Cloud CLI's Pub/Sub emulator (Java)"
        )

    def start(self) -> PubSubEmulator:
        self.child.start()
        if self.kind == PSTEST:
            self.child.wait_ready(lambda: _grpc_port_open(self.port), timeout=30)
        else:
            self.child.wait_ready(
                http_ready(f"http://{self.host}/", lambda status, body: body.strip() == b"Ok"), timeout=60
            )
        return self

    def stop(self) -> None:
        self.child.stop()
