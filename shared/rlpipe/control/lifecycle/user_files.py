"""A request's own files (reward functions, dataset processor, chat template): read once at intake,
checked without running them, copied under the run's prefix, pinned by sha256.

Where a file comes from (``core.request.inputs.UserFile``): beside the request in the requests
bucket (a path relative to its folder), a ``gs://`` URI the policy already allowed, or inline.
Whatever the source, the run keeps its own copy (``layout.RunLayout.user_file``) and the request
the ledger holds names that copy and its sha256, so a later change at the source cannot reach a
retry, and the head's first step refuses bytes that differ (``core.staging``).

Nothing here imports or executes the file (``core.user_code`` reads it with ``ast``): the code runs
in the training pods only, and only where the deployment allows requests to bring code.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpipe.control.adapters import blobstore
from rlpipe.core import layout, user_code
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import Request
from rlpipe.core.request.inputs import UserFile

# Role → (the request field, the copy's suffix).
ROLES: dict[str, tuple[str, str]] = {
    "rewards": ("rewards.file", ".py"),
    "processor": ("dataset.processor", ".py"),
    "chat_template": ("chat_template", ".json"),
}
# Reads a gs:// object (bucket, name) of at most max_bytes; raises blobstore.NotFound/TooLarge.
GcsReader = Callable[[str, str, int], bytes]
# Reads a path relative to the request's folder, of at most max_bytes; the same errors.
RelativeReader = Callable[[str, int], bytes]


@dataclass(frozen=True)
class Copied:
    role: str
    uri: str
    sha256: str
    size: int
    source: str  # where the bytes came from, in words

    def record(self, req: Request) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "uri": self.uri,
            "sha256": self.sha256,
            "size": self.size,
            "source": self.source,
        }
        if self.role == "rewards" and req.rewards is not None:
            entry["functions"] = list(req.rewards.functions)
        return entry


def files_of(req: Request) -> dict[str, UserFile]:
    found = {
        "rewards": req.rewards.file if req.rewards is not None else None,
        "processor": req.dataset.processor,
        "chat_template": req.chat_template,
    }
    return {role: f for role, f in found.items() if f is not None}


def _read(
    uf: UserFile, field: str, read_relative: RelativeReader | None, read_gcs: GcsReader | None
) -> tuple[bytes | None, list[Problem]]:
    limit = user_code.MAX_USER_FILE_BYTES
    if uf.inline is not None:
        return uf.inline.encode("utf-8"), []
    assert uf.path is not None
    if uf.is_gs:
        if read_gcs is None:
            return None, []  # not readable here (the CLI without GCS): intake reads it
        bucket, name = layout.parse_gs(uf.path)
        where, read = uf.path, (lambda: read_gcs(bucket, name, limit))
    else:
        if read_relative is None:
            return None, [
                Problem(
                    f"{field}.path",
                    f"{uf.path} is relative, and this request did not come from a bucket folder",
                    "use a gs:// URI or inline: for a request sent on Pub/Sub",
                )
            ]
        where, read = uf.path, (lambda: read_relative(uf.path or "", limit))
    try:
        return read(), []
    except blobstore.NotFound:
        return None, [
            Problem(f"{field}.path", f"{where} does not exist", "upload the file, then the request")
        ]
    except blobstore.TooLarge:
        return None, [Problem(f"{field}.path", f"{where} is over {limit} bytes", "keep the file small")]
    except Exception as exc:
        from google.api_core import exceptions as gexc

        if not isinstance(exc, (gexc.Forbidden, gexc.Unauthorized)):
            raise  # transient: the delivery is retried
        return None, [
            Problem(
                f"{field}.path",
                f"{where} cannot be read by intake ({type(exc).__name__})",
                "grant the intake functions' identities roles/storage.objectViewer on it, or use inline:",
            )
        ]


def bucket_neighbours(requests: blobstore.BlobStore, request_name: str) -> RelativeReader:
    """Files beside a request object in the requests bucket."""
    folder = posixpath.dirname(request_name)
    return lambda path, limit: requests.read(posixpath.join(folder, path), max_bytes=limit).data


def disk_neighbours(request_file: Path) -> RelativeReader:
    """Files beside a request file on disk (``rlpipe validate``/``plan``), as intake will find them
    beside the uploaded request."""

    def read(path: str, limit: int) -> bytes:
        target = request_file.parent / path
        if not target.is_file():
            raise blobstore.NotFound(str(target))
        if target.stat().st_size > limit:
            raise blobstore.TooLarge(str(target), target.stat().st_size, limit)
        return target.read_bytes()

    return read


def _check(role: str, text: str, req: Request, field: str) -> list[Problem]:
    if role == "rewards":
        assert req.rewards is not None
        keys = None if req.dataset.processor is not None else user_code.BUILTIN_DATASET_KEYS
        return user_code.check_reward_file(
            text, req.rewards.functions, file_field=field, names_field="rewards.functions", dataset_keys=keys
        )
    if role == "processor":
        return user_code.check_processor_file(text, file_field=field)
    return user_code.check_chat_template(text, field=field)


def gather(
    req: Request, *, read_relative: RelativeReader | None, read_gcs: GcsReader | None
) -> dict[str, bytes]:
    """Every user file's bytes, checked; ``RequestInvalid`` lists every problem of every file.

    ``read_relative`` reads a path beside the request (None: the request has no folder);
    ``read_gcs`` a ``gs://`` object (None: not readable here, so not checked)."""
    problems: list[Problem] = []
    out: dict[str, bytes] = {}
    for role, uf in files_of(req).items():
        field = ROLES[role][0]
        suffix = layout.USER_FILE_SUFFIXES[0] if role != "chat_template" else layout.USER_FILE_SUFFIXES[1]
        if uf.path is not None and not uf.is_gs and not uf.path.lower().endswith(suffix):
            problems.append(
                Problem(
                    f"{field}.path",
                    f"{uf.path} does not end in {suffix}, so intake would take it for something else",
                    f"name the file beside the request *{suffix}",
                )
            )
            continue
        data, found = _read(uf, field, read_relative, read_gcs)
        problems += found
        if data is None:
            continue
        at = f"{field}.path" if uf.path is not None else f"{field}.inline"
        size = user_code.check_size(data, field=at)
        text, undecodable = user_code.decode_utf8(data, field=at)
        problems += size + undecodable
        if size or text is None:
            continue
        digest = hashlib.sha256(data).hexdigest()
        if uf.sha256 is not None and uf.sha256 != digest:
            problems.append(
                Problem(
                    f"{field}.sha256",
                    f"the file has sha256 {digest}, not {uf.sha256}",
                    "upload the file you meant, or correct sha256",
                )
            )
            continue
        try:
            problems += _check(role, text, req, field)
        except (RecursionError, ValueError, MemoryError) as exc:  # a file no check can read
            problems.append(
                Problem(field, f"the file cannot be checked ({type(exc).__name__})", "simplify the file")
            )
            continue
        out[role] = data
    if problems:
        raise RequestInvalid(problems)
    return out


def copy_to_run(
    artifacts: blobstore.BlobStore,
    run_id: str,
    files: dict[str, bytes],
    req: Request,
    *,
    scope: str = "",
    replace: bool = False,
) -> dict[str, Copied]:
    """The run's own copies, written once (a redelivery finds the same bytes and writes nothing).

    ``replace``: no run exists yet (an earlier delivery stopped before its claim), so a copy left
    by it is replaced. Otherwise raises ``RequestInvalid`` if the run already holds another file
    under that name: the run exists with other inputs, which intake reports as a conflict.
    ``scope``: the run's team's, where teams are declared (``layout.RunLayout.scope``)."""
    run = layout.RunLayout(artifacts.bucket_name, run_id, scope=scope)
    copied: dict[str, Copied] = {}
    sources = files_of(req)
    for role, data in files.items():
        name = run.user_file(role, ROLES[role][1])
        digest = hashlib.sha256(data).hexdigest()
        if replace:
            artifacts.put(name, data, content_type="text/plain; charset=utf-8")
        elif artifacts.create(name, data, content_type="text/plain; charset=utf-8") is None:
            existing = artifacts.read(name, max_bytes=user_code.MAX_USER_FILE_BYTES).data
            if hashlib.sha256(existing).hexdigest() != digest:
                raise RequestInvalid(
                    [
                        Problem(
                            ROLES[role][0],
                            f"run {run_id} already holds another {role} file",
                            "use a new request_id",
                        )
                    ]
                )
        uf = sources[role]
        source = "inline in the request" if uf.inline is not None else str(uf.path)
        copied[role] = Copied(role, run.uri(name), digest, len(data), source)
    return copied


def pinned_request(req: Request, copied: dict[str, Copied]) -> Request:
    """The request as the ledger keeps it: each user file named by the run's copy and its sha256."""
    doc = req.model_dump(mode="python")

    def pin(entry: dict[str, Any], role: str) -> dict[str, Any]:
        c = copied[role]
        return {"path": c.uri, "inline": None, "sha256": c.sha256}

    if "rewards" in copied:
        doc["rewards"]["file"] = pin(doc["rewards"]["file"], "rewards")
    if "processor" in copied:
        doc["dataset"]["processor"] = pin(doc["dataset"]["processor"], "processor")
    if "chat_template" in copied:
        doc["chat_template"] = pin(doc["chat_template"], "chat_template")
    return Request.model_validate(doc)
