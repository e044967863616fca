"""What the publish Job may push: exactly the files the export manifest lists, each as export wrote it.

The export Job's last step writes ``rlpipe-export.json`` after uploading what to_huggingface wrote:
every file with its size and sha256 (``rlpipe.core.export_manifest``). Every workload writes the
bucket as one identity, so the export's prefix may also hold objects export never wrote, and the
manifest itself is read as untrusted input. The publish program (``program.py``) asks this module
which files (:func:`read_manifest`), whether the prefix holds exactly those at their sizes
(:func:`check_listing`), whether each downloaded file has the sha256 export wrote
(:func:`check_sha256`), and whether a Hub commit holds them (:func:`commit_problems`). A "no" from
the first three is :class:`NotExported`: permanent, the message naming what.

Standard library only; it reads the manifest through the storage object it is given and a
downloaded file from local disk. The publish Job runs ``program.py`` with this module's text in
place of its import (``rlpipe.publisher.shipped_program``).
"""

from __future__ import annotations

# ---- shipped inside the publish Job's program from here (rlpipe.publisher.shipped_program) ----
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

MANIFEST_MAX_BYTES = 16 << 20
# The names an export manifest may list: rlpipe.core.layout.EXPORTED_PATH_PATTERN (this module is
# shipped without rlpipe; tests/publisher/test_publisher.py holds the two equal).
EXPORTED_PATH = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")
SHA256 = re.compile(r"[0-9a-f]{64}")
NAMED_AT_MOST = 20  # objects named in one failure line; the rest are counted
HASH_CHUNK = 8 << 20


class NotExported(Exception):
    """The export is not what the export Job wrote (or there is no manifest saying what it wrote)."""


def read_manifest(blob: Any, uri: str, expected_sha256: str | None = None) -> dict[str, tuple[int, str]]:
    """path → (size, sha256) of every file the manifest (``blob``: its storage object, or None when
    there is none) lists: names from the allowlist only (no ``.`` or ``..`` part), each once, sizes
    as byte counts, sha256 as 64 lower-case hex digits.

    ``expected_sha256``: the sha256 of the manifest's bytes as the control plane read them when
    the export's stage ended (``--manifest-sha256``). The manifest lies where every workload can
    write, so without it a container that plants a file and rewrites the manifest to list it (with
    its true size and sha256) passes every other check; with it, the bytes read here are the ones
    recorded, or nothing is pushed."""
    if blob is None:
        raise NotExported(f"no export manifest at {uri}: the export did not finish; export again")
    if int(blob.size or 0) > MANIFEST_MAX_BYTES:
        raise NotExported(f"the export manifest {uri} is over {MANIFEST_MAX_BYTES} bytes")
    data = blob.download_as_bytes()
    if expected_sha256 is not None and (found := hashlib.sha256(data).hexdigest()) != expected_sha256:
        raise NotExported(
            f"the export manifest {uri} has sha256 {found}, the one export wrote has {expected_sha256}: "
            "it was rewritten after export; nothing was pushed. Find out who wrote it and export again"
        )
    try:
        entries = json.loads(data)["files"]
        if not isinstance(entries, list) or not entries:
            raise ValueError("it lists no files")
        files: dict[str, tuple[int, str]] = {}
        for entry in entries:
            path, size, digest = entry["path"], entry["size"], entry["sha256"]
            if not isinstance(path, str) or not EXPORTED_PATH.fullmatch(path):
                raise ValueError(f"{str(path)[:200]!r} is not a file name export writes")
            if any(part in (".", "..") for part in path.split("/")) or path in files:
                raise ValueError(f"{path!r} is not a file name export writes, or is listed twice")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ValueError(f"{path}: the size is not a byte count")
            if not isinstance(digest, str) or not SHA256.fullmatch(digest):
                raise ValueError(f"{path}: the sha256 is not 64 hex digits")
            files[path] = (size, digest)
    except (ValueError, KeyError, TypeError) as exc:
        raise NotExported(f"the export manifest {uri} is not one export writes ({exc})") from None
    return files


def _named(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED_AT_MOST])
    return shown + (f" and {len(names) - NAMED_AT_MOST} more" if len(names) > NAMED_AT_MOST else "")


def check_listing(files: Mapping[str, tuple[int, str]], objects: Mapping[str, int], source: str) -> None:
    """``objects`` (path under ``source`` → size; the manifest itself left out) must be exactly the
    manifest's files at their sizes. An object it does not list is named first: export did not
    write it, whoever did."""
    foreign = sorted(source + path for path in objects if path not in files)
    if foreign:
        raise NotExported(
            f"{len(foreign)} object(s) under {source} are not in the export manifest, so the export "
            f"did not write them: {_named(foreign)}; nothing was pushed. Find out who wrote them, "
            "delete them and publish again"
        )
    changed = [
        f"{path} is gone" if path not in objects else f"{path} is {objects[path]} bytes, export wrote {size}"
        for path, (size, _) in sorted(files.items())
        if objects.get(path) != size
    ]
    if changed:
        raise NotExported(
            f"the export under {source} is not what export wrote: {_named(changed)}; export again"
        )


def check_sha256(local: str, path: str, expected: str) -> None:
    """The downloaded copy of ``path`` at ``local`` has the sha256 export wrote."""
    digest = hashlib.sha256()
    with open(local, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK), b""):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        raise NotExported(
            f"{path} has sha256 {digest.hexdigest()}, export wrote {expected}: it changed after export; "
            "nothing was committed. Export again"
        )


def commit_problems(
    remote: Mapping[str, tuple[int, str | None]], expected: Mapping[str, int], digests: Mapping[str, str]
) -> list[str]:
    """What a Hub commit (path → size and, for an LFS file, its sha256) lacks of ``expected`` (path
    → size: the export's files and the card) and of ``digests`` (path → the sha256 export wrote)."""
    missing = sorted(path for path in expected if path not in remote)
    wrong = sorted(
        f"{p} is {remote[p][0]} bytes, not {n}"
        for p, n in expected.items()
        if p in remote and remote[p][0] != n
    )
    wrong += sorted(
        f"{p} has sha256 {remote[p][1]}, export wrote {d}"
        for p, d in digests.items()
        if p in remote and remote[p][1] not in (None, d)
    )
    return ([f"missing {', '.join(missing)}"] if missing else []) + wrong
