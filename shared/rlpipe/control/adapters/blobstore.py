"""A thin layer over google-cloud-storage for what the pipeline needs: small objects, preconditions.

Every write the ledger makes is a single-request upload with a generation precondition, because
that is what GCS (and fake-gcs-server) enforce atomically. Reads are bounded so a huge object in
the requests bucket is rejected by its size, before a byte of it is downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import google.cloud.storage as storage

# Single-request (multipart) uploads only: resumable uploads ignore preconditions in fake-gcs-server.
MAX_SMALL_OBJECT = 4 * 1024 * 1024
# One request's timeout, and the deadline of a call with the client's retries. Shorter than the
# start lease (docs/timeouts.md), so a lease holder never outlives its lease waiting on storage.
REQUEST_TIMEOUT_SECONDS = 15.0
CALL_DEADLINE_SECONDS = 45.0


class PreconditionFailed(Exception):
    """The object changed (or exists) since the generation we based the write on."""


class NotFound(Exception):
    pass


class TooLarge(Exception):
    def __init__(self, name: str, size: int | None, limit: int):
        what = f"{size} bytes" if size is not None else f"over {limit} bytes"
        super().__init__(f"{name} is {what}; the limit is {limit}")
        self.size, self.limit = size, limit


@dataclass(frozen=True)
class Blob:
    name: str
    data: bytes
    generation: int

    def json(self) -> Any:
        return json.loads(self.data)


def make_client(project: str) -> storage.Client:
    """Real client; anonymous against an emulator named by STORAGE_EMULATOR_HOST."""
    import google.cloud.storage as storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=project, credentials=AnonymousCredentials())
    return storage.Client(project=project)


class BlobStore:
    """One bucket, seen as small JSON/bytes objects with generation-checked writes."""

    def __init__(self, client: storage.Client, bucket: str):
        self.client = client
        self.bucket_name = bucket
        self._bucket = client.bucket(bucket)

    def read(self, name: str, *, max_bytes: int = MAX_SMALL_OBJECT, generation: int | None = None) -> Blob:
        """One ranged download: the bytes and the generation they belong to, from the same response.

        Why not metadata first and then the media: real GCS serves a ``mediaLink`` pinned to the
        generation it named, and the bucket keeps no old versions, so a write between the two
        requests turns a healthy object into a 404 (a ledger that "does not exist"). One request
        cannot tear. The range (``max_bytes`` + 1 bytes) bounds what a huge object costs us.
        """
        from google.api_core import exceptions as gexc

        blob = self._bucket.blob(name, generation=generation)
        try:
            data = blob.download_as_bytes(
                start=0, end=max_bytes, timeout=REQUEST_TIMEOUT_SECONDS, retry=_retry()
            )
        except gexc.NotFound:
            raise NotFound(name) from None
        except gexc.RequestRangeNotSatisfiable:  # GCS answers 416 to a range on an empty object
            return self._read_empty(name, generation)
        if len(data) > max_bytes:
            raise TooLarge(name, blob.size, max_bytes)
        if blob.generation is None:  # every GCS media response carries x-goog-generation
            raise NotFound(name)
        return Blob(name, data, int(blob.generation))

    def _read_empty(self, name: str, generation: int | None) -> Blob:
        from google.api_core import exceptions as gexc

        try:
            meta = self._bucket.get_blob(name, generation=generation)
        except gexc.NotFound:
            meta = None
        if meta is None or meta.generation is None:
            raise NotFound(name)
        if meta.size:  # not empty after all: it was replaced between the two requests; read it again
            return self.read(name, generation=generation)
        return Blob(name, b"", int(meta.generation))

    def read_json(self, name: str) -> tuple[Any, int]:
        blob = self.read(name)
        return blob.json(), blob.generation

    def create(self, name: str, data: bytes, content_type: str = "application/json") -> int | None:
        """Create only if absent; the new generation, or None when the object already exists."""
        try:
            return self._write(name, data, content_type, if_generation_match=0)
        except PreconditionFailed:
            return None

    def replace(self, name: str, data: bytes, generation: int, content_type: str = "application/json") -> int:
        """Compare-and-swap on ``generation``; raises PreconditionFailed if someone wrote first."""
        return self._write(name, data, content_type, if_generation_match=generation)

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> int:
        return self._write(name, data, content_type, if_generation_match=None)

    def _write(self, name: str, data: bytes, content_type: str, if_generation_match: int | None) -> int:
        from google.api_core import exceptions as gexc

        if len(data) > MAX_SMALL_OBJECT:
            raise TooLarge(name, len(data), MAX_SMALL_OBJECT)
        blob = self._bucket.blob(name)
        try:
            blob.upload_from_string(
                data,
                content_type=content_type,
                if_generation_match=if_generation_match,
                timeout=REQUEST_TIMEOUT_SECONDS,
                retry=_retry() if if_generation_match is not None else None,  # retried only when conditional
            )
        except gexc.PreconditionFailed:
            raise PreconditionFailed(name) from None
        return int(blob.generation)

    def list(self, prefix: str) -> Iterator[str]:
        for blob in self.client.list_blobs(self.bucket_name, prefix=prefix):
            yield blob.name

    def sizes(self, prefix: str) -> dict[str, int]:
        """Every object under ``prefix`` with its size in bytes (one listing)."""
        return {b.name: int(b.size or 0) for b in self.client.list_blobs(self.bucket_name, prefix=prefix)}

    def exists(self, name: str) -> bool:
        return bool(self._bucket.blob(name).exists())

    def download(self, name: str) -> bytes | None:
        """The object's bytes in one GET (no metadata request, so no generation and no size
        check): for scans that only decide whether to act. None: no such object."""
        from google.api_core import exceptions as gexc

        try:
            return bytes(self._bucket.blob(name).download_as_bytes())
        except gexc.NotFound:
            return None

    def prefixes_page(self, prefix: str, *, after: str, limit: int) -> tuple[set[str], bool]:
        """The "folders" directly under ``prefix`` (a delimiter listing: one entry per folder, none
        of its objects), starting at the name ``after``; at least ``limit`` of them when there are
        that many (some servers ignore page_size with a delimiter), and whether more remain."""
        listing = self.client.list_blobs(
            self.bucket_name, prefix=prefix, delimiter="/", start_offset=after, page_size=limit
        )
        found: set[str] = set()
        for page in listing.pages:
            found.update(page.prefixes)
            if len(found) > limit:
                break
        return found, bool(listing.next_page_token)

    def delete(self, name: str) -> None:
        from google.api_core import exceptions as gexc

        with contextlib.suppress(gexc.NotFound):
            self._bucket.blob(name).delete()


def _retry() -> Any:
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_timeout(CALL_DEADLINE_SECONDS)


def dumps(obj: Any) -> bytes:
    """The JSON the pipeline stores, with every token-like text masked (keys and values)."""
    from rlpipe.control.adapters.redaction import mask_tokens

    return json.dumps(mask_tokens(obj), indent=2, sort_keys=True, default=str).encode()
