"""A pod's own disk: the container paths a played program writes outside GCS.

A container's emptyDir volumes and ``/tmp`` are the pod's alone and go away with it. The export
writes its model there (``base_output_directory`` is a local directory) before the script's last
step uploads it, so the simulator keeps such files in a directory of this machine, one per running
container, and removes it when the container ends.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class PodDisk:
    """Container paths (absolute, no ``.`` or ``..``) under one host directory, made at first use."""

    def __init__(self) -> None:
        self._root: tempfile.TemporaryDirectory[str] | None = None

    def path(self, container_path: str) -> Path:
        """Where ``container_path`` of this pod lies on this machine."""
        parts = [part for part in container_path.split("/") if part]
        if not container_path.startswith("/") or any(part in (".", "..") for part in parts):
            raise ValueError(f"not an absolute container path: {container_path!r}")
        if self._root is None:
            self._root = tempfile.TemporaryDirectory(prefix="rlpipe-pod-disk-")
        return Path(self._root.name, *parts)

    def write(self, container_path: str, data: bytes | str) -> None:
        target = self.path(container_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)

    def close(self) -> None:
        """The container ended: its disk goes with it."""
        if self._root is not None:
            self._root.cleanup()
            self._root = None
