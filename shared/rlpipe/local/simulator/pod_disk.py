"""A pod's own disk: the container paths a program writes outside GCS.

A container's emptyDir volumes and ``/tmp`` are the pod's alone and go away with it. The export
writes its model there (``base_output_directory`` is a local directory) before the script's last
step uploads it, so the simulator keeps such files in a directory of this machine, one per running
container, and removes it when the container ends.

The directory is laid out as ``testbed`` lays out a real program's work folder (container paths
under ``fs/``), so a program run for real (``.real_programs``) reads and writes the same files as
the steps the simulator plays around it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rlpipe.local.simulator import testbed


class PodDisk:
    """Container paths (absolute, no ``.`` or ``..``) under one host directory, made at first use."""

    def __init__(self) -> None:
        self._root: tempfile.TemporaryDirectory[str] | None = None

    def work(self) -> Path:
        """The host directory: ``testbed``'s work folder for a program run for real in this pod."""
        if self._root is None:
            self._root = tempfile.TemporaryDirectory(prefix="rlpipe-pod-disk-")
        return Path(self._root.name)

    def path(self, container_path: str) -> Path:
        """Where ``container_path`` of this pod lies on this machine."""
        parts = [part for part in container_path.split("/") if part]
        if not container_path.startswith("/") or any(part in (".", "..") for part in parts):
            raise ValueError(f"not an absolute container path: {container_path!r}")
        return Path(self.work(), testbed.FS_DIR, *parts)

    def write(self, container_path: str, data: bytes | str) -> None:
        target = self.path(container_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)

    def close(self) -> None:
        """The container ended: its disk goes with it."""
        if self._root is not None:
            self._root.cleanup()
            self._root = None
