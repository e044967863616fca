"""Where the Hub double keeps uploaded bytes: files on disk, named by their sha256, never in memory.

An upload streams through in chunks (``CHUNK``) into a temporary file while it is hashed, and is
renamed into place only when its sha256 and size are the ones announced, so a broken or lying
upload leaves nothing behind. Request bodies arrive with ``Content-Length`` or, from a client
streaming an iterator, ``Transfer-Encoding: chunked`` (RFC 9112 section 7.1); both are read here.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

CHUNK = 1 << 20


class Reader(Protocol):
    """A request's input stream (``BaseHTTPRequestHandler.rfile``)."""

    def read(self, size: int = -1, /) -> bytes: ...
    def readline(self, size: int = -1, /) -> bytes: ...


class BadUpload(ValueError):
    """The bytes are not the ones announced (size or sha256)."""


def body_chunks(rfile: Reader, headers: dict[str, str]) -> Iterator[bytes]:
    """The request body, in chunks of at most ``CHUNK`` bytes."""
    if "chunked" in (headers.get("transfer-encoding") or "").lower():
        while True:
            size = int(rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return
            while size:
                data = rfile.read(min(size, CHUNK))
                if not data:
                    return
                size -= len(data)
                yield data
            rfile.readline()  # the CRLF after each chunk
    left = int(headers.get("content-length") or 0)
    while left > 0:
        data = rfile.read(min(left, CHUNK))
        if not data:
            return
        left -= len(data)
        yield data


def drain(rfile: Reader, headers: dict[str, str]) -> None:
    """Read and drop the body, so a refusal reaches a client still sending (not a reset socket)."""
    for _ in body_chunks(rfile, headers):
        pass


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


class BlobStore:
    """Content-addressed files under ``root``: ``root/<sha256>``."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        return self.root / sha256

    def size(self, sha256: str) -> int | None:
        try:
            return self.path(sha256).stat().st_size
        except OSError:
            return None

    def put_stream(
        self, chunks: Iterator[bytes], *, sha256: str | None = None, size: int | None = None
    ) -> str:
        """Store a stream; check it against ``sha256``/``size`` when given. Returns its sha256."""
        digest, written = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as out:
                for data in chunks:
                    digest.update(data)
                    written += len(data)
                    out.write(data)
            actual = digest.hexdigest()
            if size is not None and written != size:
                raise BadUpload(f"received {written} bytes, expected {size}")
            if sha256 is not None and actual != sha256:
                raise BadUpload(f"content has sha256 {actual}, expected {sha256}")
            os.replace(tmp, self.path(actual))
            return actual
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def put_bytes(self, data: bytes) -> str:
        return self.put_stream(iter([data]))

    def read_chunks(self, sha256: str) -> Iterator[bytes]:
        with self.path(sha256).open("rb") as handle:
            while data := handle.read(CHUNK):
                yield data

    def read(self, sha256: str) -> bytes:
        return self.path(sha256).read_bytes()
