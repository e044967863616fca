"""A container's log as the kubelet serves it: timestamped lines and the log options.

Both local clusters answer ``GET pods/{name}/log`` (the API double itself, and the real plane's
played kubelet), and the stage function reads the training log incrementally through them with
``timestamps``, ``sinceSeconds`` and ``limitBytes``. So both keep each line's time and apply the
options as the kubelet does (k8s pkg/kubelet/kuberuntime/logs/logs.go ReadLogs, and the
PodLogOptions validation in pkg/apis/core/validation):

- ``timestamps=true`` puts the line's time first, in Go's RFC3339Nano (trailing zeros dropped);
- ``sinceSeconds`` keeps the lines written at or after now minus that many seconds (at least 1);
- ``sinceTime`` (RFC3339) keeps the lines written at or after that time;
- ``tailLines`` keeps the last N of those (0 or more);
- ``limitBytes`` stops after that many bytes (at least 1), even inside a line.

A value that is not a whole number in range is refused with 400, as the API server refuses it.

The kubelet serves a container's log only while its pod exists; the node's container runtime keeps
it in a file per container, ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``, and on
GKE the logging agent ships every line of those files to Cloud Logging, where it outlives the pod.
:class:`ContainerLogFolder` is the local clusters' copy of those files, one per container (the
container id left out: a restarted container appends), each line its time then its text; both
clusters write every container line there (the double's simulator, and the real plane's played
containers through ``controlplane.programs.PodLogs``, which writes the same format), and the Cloud
Logging stand-in (``local/cloud_logging.py``) reads it after the pods are gone.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

# The kubelet's FallbackToLogsOnError message (k8s v1.34.12 pkg/kubelet/kuberuntime/
# kuberuntime_container.go readLastStringFromContainerLogs; bounds in pkg/kubelet/container/runtime.go).
FALLBACK_POLICY = "FallbackToLogsOnError"
TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048


def fallback_termination_message(
    container: Mapping[str, object], exit_code: int, reason: str, lines: Iterable[str]
) -> str | None:
    """What a kubelet writes for ``container`` (its spec) ending so after printing ``lines``: their
    last 80, each with its newline, of which the last 2048 bytes; None for exit 0 or a container
    that could not run, or a policy other than FallbackToLogsOnError."""
    if container.get("terminationMessagePolicy") != FALLBACK_POLICY or exit_code == 0:
        return None
    if reason == "ContainerCannotRun":
        return None
    tail = "".join(f"{line}\n" for line in list(lines)[-TERMINATION_LOG_LINES:]).encode()
    return tail[-TERMINATION_LOG_BYTES:].decode(errors="replace") or None


@dataclass(frozen=True)
class LogLine:
    time: datetime
    text: str


class BadLogOptions(ValueError):
    """A log option the API server would refuse (HTTP 400)."""


def rfc3339nano(time: datetime) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: up to nine fraction digits, trailing zeros dropped."""
    utc = time.astimezone(UTC)
    fraction = f"{utc.microsecond:06d}000".rstrip("0")
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def _option(query: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadLogOptions(f"{name} must be a whole number") from None
    if value < minimum:
        raise BadLogOptions(f"{name} must be at least {minimum}")
    return value


def render(lines: Iterable[LogLine], query: Mapping[str, str], now: datetime | None = None) -> bytes:
    """The response body for ``query`` (single values: ``timestamps``, ``sinceSeconds``,
    ``tailLines``, ``limitBytes``) over ``lines``, oldest first."""
    since = _option(query, "sinceSeconds", 1)
    tail = _option(query, "tailLines", 0)
    limit = _option(query, "limitBytes", 1)
    stamped = query.get("timestamps", "").lower() in ("true", "1")
    kept = list(lines)
    if since is not None and "sinceTime" in query:
        raise BadLogOptions("at most one of sinceSeconds or sinceTime may be specified")
    if since is not None:
        cut = (now or datetime.now(UTC)) - timedelta(seconds=since)
        kept = [line for line in kept if line.time >= cut]
    if "sinceTime" in query:
        try:
            after = datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00"))
        except ValueError:
            raise BadLogOptions("sinceTime must be an RFC3339 time") from None
        kept = [line for line in kept if line.time >= after]
    if tail is not None:
        kept = kept[len(kept) - tail :] if tail < len(kept) else kept
    body = "".join(
        f"{rfc3339nano(line.time)} {line.text}\n" if stamped else f"{line.text}\n" for line in kept
    )
    data = body.encode()
    return data[:limit] if limit is not None else data


CONTAINER_LOGS = "pods"  # the folder, under the stack's log folder, both clusters keep them in
# <pod>_<namespace>_<container>.log: none of the three (DNS names) can hold an underscore.
_LOG_FILE = re.compile(r"^(?P<pod>[a-z0-9.-]+)_(?P<namespace>[a-z0-9-]+)_(?P<container>[a-z0-9-]+)\.log$")


@dataclass(frozen=True)
class ContainerLog:
    """One container's retained log file: whose it is, and where."""

    namespace: str
    pod: str
    container: str
    path: Path


class ContainerLogFolder:
    """Every container line a local cluster produced, one file per container, kept after its pod is
    gone. Lines are ``<RFC3339Nano> <text>``, the time the runtime stamped, so the copy and the
    kubelet's ``timestamps=true`` read agree to the nanosecond (a cursor taken from one is valid
    for the other)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def path(self, namespace: str, pod: str, container: str) -> Path:
        return self.directory / f"{pod}_{namespace}_{container}.log"

    def append(self, namespace: str, pod: str, container: str, lines: Iterable[str], when: datetime) -> None:
        """``lines`` as one container printed them at ``when`` (the stamp its log read serves too)."""
        stamp = rfc3339nano(when)
        text = "".join(f"{stamp} {line}\n" for line in lines)
        with self._lock, self.path(namespace, pod, container).open("a") as out:
            out.write(text)

    def logs(self) -> Iterator[ContainerLog]:
        """Every container's file, by name (a file of another name is none of ours and is skipped)."""
        for path in sorted(self.directory.glob("*.log")):
            if match := _LOG_FILE.match(path.name):
                yield ContainerLog(match["namespace"], match["pod"], match["container"], path)

    @staticmethod
    def read(log: ContainerLog) -> list[LogLine]:
        """The file's lines, oldest first; a partial last line (being written) is left for later."""
        try:
            raw = log.path.read_text()
        except FileNotFoundError:
            return []
        complete = raw.split("\n")[:-1]
        out = []
        for entry in complete:
            stamp, _, text = entry.partition(" ")
            try:
                out.append(LogLine(datetime.fromisoformat(stamp), text))
            except ValueError:
                continue  # not a line the runtime stamped
        return out
