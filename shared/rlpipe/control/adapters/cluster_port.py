"""What the stage operations need of a cluster client (``rlpipe.cluster.ClusterClient``).

A protocol of its own so tests can pass doubles and the stage service does not depend on the
client's construction (credentials, transports)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from rlpipe.cluster.kinds import Kind
from rlpipe.cluster.log_cursor import LogCursor
from rlpipe.cluster.status import WorkloadStatus


class Cluster(Protocol):
    """What the stage operations need of ``rlpipe.cluster.ClusterClient`` (tests pass doubles)."""

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def status(
        self,
        name: str,
        *,
        kind: Kind,
        retryable_exit_codes: Collection[int] = (),
        queued_deadline_seconds: float | None = None,
    ) -> WorkloadStatus: ...
    def delete_run(self, run_id: str) -> list[str]: ...
    def delete(self, kind: Kind, name: str) -> bool: ...
    def in_namespace(self, namespace: str) -> Cluster: ...
    def read_log(self, jobset: str, cursor: LogCursor | None) -> tuple[list[str], LogCursor | None, bool]: ...
