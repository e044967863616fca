"""Any container's log of any stage's pod, for a person (``rlpipe logs``), read as the kubelet serves it.

:meth:`ClusterClient.read_log` reads only the training head's ``workload-container`` for the stage
function. A person also wants a convert, export or publish Job's pod, a sidecar, or a worker:
:class:`PodLogs` finds a workload's pods by the labels the Job and JobSet controllers put on them
(``kinds.JOBSET_NAME_LABEL``, ``kinds.JOB_NAME_LABELS``) and reads one container's log with the same
cursor (``cluster/log_cursor.py``), so a follow that polls never prints a line twice. The lines keep
their timestamps, as ``kubectl logs --timestamps`` prints them.
"""

from __future__ import annotations

from typing import Any

from rlpipe.cluster import log_cursor
from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.kinds import JOB_NAME_LABELS, JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL, Obj
from rlpipe.cluster.log_cursor import LogCursor

READABLE_PHASES = ("Running", "Succeeded", "Failed")  # a Pending pod has no log yet


def containers_of(pod: Obj) -> list[str]:
    """The pod's container names: init containers (the native sidecars) first, then the others."""
    spec = pod.get("spec") or {}
    return [c.get("name", "") for key in ("initContainers", "containers") for c in spec.get(key) or []]


def pick(pods: list[Obj], container: str, *, prefer: str = "pathways-head") -> Obj | None:
    """The pod to read ``container`` of: among the pods that have it, a JobSet's head first (the
    ``prefer`` replicated job), then the newest, then by name."""
    having = [p for p in pods if container in containers_of(p)]
    if not having:
        return None

    def key(pod: Obj) -> tuple[bool, str, str]:
        meta = pod.get("metadata") or {}
        head = (meta.get("labels") or {}).get(REPLICATED_JOB_LABEL) == prefer
        return head, str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")

    return max(having, key=key)


def container_exit(pod: Obj, container: str) -> dict[str, Any] | None:
    """The container's ``terminated`` state (``exitCode``, ``reason``), or None while it runs."""
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") == container:
                terminated = (cs.get("state") or {}).get("terminated")
                return terminated if isinstance(terminated, dict) else None
    return None


def _keep_stamps(body: str) -> str:
    """Each stamped line with its stamp also in its text, so ``take_new`` (which strips it) hands
    back the lines as ``--timestamps`` prints them; the newline structure (a partial last line) is kept."""
    return "\n".join(f"{piece.split(' ', 1)[0]} {piece}" if piece else piece for piece in body.split("\n"))


class PodLogs(ClusterClient):
    """``ClusterClient`` with the reads ``rlpipe logs`` needs (``PodLogs.from_settings(settings)``)."""

    def workload_pods(self, workload: str) -> list[Obj]:
        """The pods of a JobSet or Job named ``workload`` (a JobSet's by its name label; a Job's by
        the Job controller's), oldest first; [] once they are gone."""
        for label in (JOBSET_NAME_LABEL, *JOB_NAME_LABELS):
            pods = self._list_pods(f"{label}={workload}")
            if pods:
                return sorted(
                    pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or "")
                )
        return []

    def read_container(
        self,
        pod: str,
        pod_uid: str,
        container: str,
        cursor: LogCursor | None,
        *,
        limit_bytes: int = log_cursor.READ_LIMIT_BYTES,
    ) -> tuple[list[str], LogCursor | None, bool]:
        """The container's timestamped lines newer than ``cursor``, the cursor after them, and
        whether the read was cut short by ``limit_bytes`` (read again at once for the rest).
        API errors propagate (a Pending pod's log is refused)."""
        query: list[tuple[str, Any]] = [("container", container), ("timestamps", "true")]
        since = log_cursor.since_time(cursor, pod_uid)
        if since is not None:
            query.append(("sinceTime", since))
        while True:
            data = self._pod_log(pod, [*query, ("limitBytes", limit_bytes)])
            cut_short = len(data) >= limit_bytes
            body = _keep_stamps(data.decode("utf-8", "replace"))
            lines, moved = log_cursor.take_new(body, cursor, pod_uid, cut_short=cut_short)
            if lines or not cut_short or limit_bytes >= log_cursor.MAX_READ_LIMIT_BYTES:
                return lines, moved, cut_short and bool(lines)
            limit_bytes *= 4  # one second held more than the limit: ask for more of it
