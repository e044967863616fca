"""The simulated programs' view of Cloud Storage: gs:// URIs over the real storage client.

Programs address objects the way MaxText does, by ``gs://bucket/path`` URIs taken from their
own arguments; this module turns those into calls on the real ``google-cloud-storage`` client
(against fake-gcs-server locally) and reports every write and delete, so the simulator can keep
a history and the event shim can tell which stage wrote an object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

WriteListener = Callable[[str, str], None]  # (action "write" | "delete", gs:// uri)


def split_uri(uri: str) -> tuple[str, str]:
    """``gs://b/x/y`` → ``("b", "x/y")``; refuses anything that is not a gs:// URI."""
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri!r}")
    bucket, _, name = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}")
    return bucket, name


def join(base: str, *parts: str) -> str:
    """Join URI parts with exactly one slash, whatever trailing slashes the arguments carry."""
    out = base.rstrip("/")
    for part in parts:
        out += "/" + part.strip("/")
    return out


class GcsIO:
    """Write, list and delete objects by URI; tiny objects only (single-request uploads)."""

    def __init__(self, client: Any, on_change: WriteListener | None = None) -> None:
        self.client = client
        self.on_change = on_change

    def write(self, uri: str, data: bytes | str, content_type: str = "application/octet-stream") -> None:
        bucket, name = split_uri(uri)
        payload = data.encode() if isinstance(data, str) else data
        self.client.bucket(bucket).blob(name).upload_from_string(payload, content_type=content_type)
        if self.on_change:
            self.on_change("write", uri)

    def list(self, prefix_uri: str, *, limit: int | None = None) -> list[str]:
        """Object URIs under ``prefix_uri`` (a directory-like prefix; a slash is added)."""
        bucket, name = split_uri(prefix_uri)
        prefix = name.rstrip("/") + "/" if name else ""
        blobs = self.client.list_blobs(bucket, prefix=prefix, max_results=limit)
        return [f"gs://{bucket}/{blob.name}" for blob in blobs]

    def exists_under(self, prefix_uri: str) -> bool:
        """Does any object live under this prefix (what "the path has objects" means on GCS)?"""
        return bool(self.list(prefix_uri, limit=1))

    def exists(self, uri: str) -> bool:
        bucket, name = split_uri(uri)
        return bool(self.client.bucket(bucket).blob(name).exists())

    def read(self, uri: str) -> bytes | None:
        """An object's bytes, or None when there is none."""
        from google.api_core import exceptions

        bucket, name = split_uri(uri)
        try:
            return bytes(self.client.bucket(bucket).blob(name).download_as_bytes())
        except exceptions.NotFound:
            return None

    def copy(self, source_uri: str, dest_uri: str) -> None:
        """A server-side copy of one object (what a copy within GCS costs: no bytes through here)."""
        source_bucket, source_name = split_uri(source_uri)
        dest_bucket, dest_name = split_uri(dest_uri)
        bucket = self.client.bucket(source_bucket)
        bucket.copy_blob(bucket.blob(source_name), self.client.bucket(dest_bucket), dest_name)
        if self.on_change:
            self.on_change("write", dest_uri)

    def delete(self, uri: str) -> None:
        bucket, name = split_uri(uri)
        self.client.bucket(bucket).blob(name).delete()
        if self.on_change:
            self.on_change("delete", uri)
