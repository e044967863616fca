"""How the Hub double answers, route by route: each behaviour and its source (the client
``huggingface_hub`` 2.4.0, hub-docs, issue threads) is in docs/hub-double.md."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, unquote, urlparse

import yaml

from rlpipe.local.hub_double.data import (
    DATASET,
    MODEL,
    ForcedFailure,
    ForcedLimit,
    HubCommit,
    HubFile,
    HubRepo,
    Quota,
    Stall,
    repo_key,
)
from rlpipe.local.hub_double.store import BlobStore, body_chunks, drain

MAX_PAGE = 1000
STORAGE = "/lfs-storage/"  # where LFS uploads go (the Hub's S3): no Hub rate limit, no Hub auth


class HubState(Protocol):
    """What the answers read and count (``rlpipe.local.hub_double.HubDouble`` holds it)."""

    repos: dict[str, HubRepo]
    requests: list[tuple[str, str]]
    lock: Any
    limits: list[ForcedLimit]
    stalls: list[Stall]
    revoked: set[str]
    quota: Quota
    used: dict[tuple[str, str, int], int]
    commits_page_size: int
    failures: list[ForcedFailure]
    read_only: set[str]
    store: BlobStore
    secret: bytes

    @property
    def url(self) -> str: ...


@dataclass(frozen=True)
class Exchange:
    """One request being answered: the handler, whether it is a HEAD, the headers every answer gets."""

    req: BaseHTTPRequestHandler
    head: bool
    common: dict[str, str]

    def headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.req.headers.items()}

    def body(self, limit: int = 64 << 20) -> bytes:
        """The whole (small) request body; larger bodies are read with ``chunks``."""
        data = bytearray()
        for chunk in self.chunks():
            data += chunk
            if len(data) > limit:
                raise ValueError(f"request body over {limit} bytes")
        return bytes(data)

    def chunks(self) -> Any:
        return body_chunks(self.req.rfile, self.headers())

    def drain(self) -> None:
        drain(self.req.rfile, self.headers())

    def send(
        self,
        status: int,
        body: Any,
        *,
        error_code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        extra = dict(headers or {})
        if status >= 400:
            message = str(body.get("error", "")) if isinstance(body, dict) else ""
            extra["X-Error-Message"] = message
            if error_code:
                extra["X-Error-Code"] = error_code
        self.send_bytes(status, json.dumps(body).encode(), "application/json", extra)

    def send_bytes(self, status: int, data: bytes, content_type: str, headers: dict[str, str]) -> None:
        req = self.req
        req.send_response(status)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(data)))
        for name, value in {**self.common, **headers}.items():
            req.send_header(name, value)
        req.end_headers()
        if not self.head:
            req.wfile.write(data)

    def send_stream(self, size: int, chunks: Any, content_type: str, headers: dict[str, str]) -> None:
        """A body of ``size`` bytes written chunk by chunk (an uploaded file, never held in memory)."""
        req = self.req
        req.send_response(200)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(size))
        for name, value in {**self.common, **headers}.items():
            req.send_header(name, value)
        req.end_headers()
        if not self.head:
            for data in chunks:
                req.wfile.write(data)


API_KINDS = {"models": MODEL, "datasets": DATASET}  # ``/api/{kind}/…`` → repo type


def api_repo(parts: list[str]) -> tuple[str, list[str]] | None:
    """``api/{models|datasets}/{org}/{name}/…`` → (the repo's key in ``HubState.repos``, the rest)."""
    if len(parts) >= 4 and parts[0] == "api" and parts[1] in API_KINDS:
        return repo_key(f"{parts[2]}/{parts[3]}", API_KINDS[parts[1]]), parts[4:]
    return None


def answer(hub: HubState, x: Exchange, token: str, method: str) -> None:
    """The first read routes, then 404 (``rlpipe.local.hub_double.writes`` and ``.listing`` go first)."""
    url = urlparse(x.req.path)
    query = parse_qs(url.query or "")
    parts = [unquote(p) for p in url.path.strip("/").split("/")]
    found = api_repo(parts)
    if found is not None and method in ("GET", "HEAD"):
        key, rest = found
        if not rest or (rest[0] == "revision" and len(rest) == 2):
            info = _dataset_info if parts[1] == "datasets" else _model_info
            info(hub, x, token, key, rest[1] if rest else "main", "blobs" in query)
            return
        if rest == ["auth-check"]:
            with hub.lock:
                repo = lookup(hub, x, token, key, metadata=False)
            if repo is not None:
                x.send(200, {"access": "read"})
            return
        if rest[0] == "commits" and len(rest) == 2:
            _commits(hub, x, token, key, rest[1], query)
            return
    if method in ("GET", "HEAD") and len(parts) >= 6 and parts[0] == "datasets" and parts[3] == "resolve":
        key = repo_key(f"{parts[1]}/{parts[2]}", DATASET)
        _resolve(hub, x, token, key, parts[4], "/".join(parts[5:]))
        return
    if method in ("GET", "HEAD") and len(parts) >= 5 and parts[2] == "resolve":
        _resolve(hub, x, token, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
        return
    x.drain()
    x.send(404, {"error": "not found"}, error_code="EntryNotFound")


def lookup(hub: HubState, x: Exchange, token: str, key: str, *, metadata: bool) -> HubRepo | None:
    """The repository under ``key`` (``data.repo_key``: a model's id, ``datasets/{id}``), or None
    after refusing the way the Hub does. Caller holds the lock."""
    repo = hub.repos.get(key)
    if repo is None or (repo.private and not token):
        x.send(401 if not token else 404, {"error": "Repository not found"}, error_code="RepoNotFound")
        return None
    if repo.gated and token not in repo.authorized_tokens and not (metadata and repo.public_metadata):
        what = f"{repo.repo_type} {repo.repo_id}"
        x.send(
            401 if not token else 403,
            {"error": f"Access to {what} is restricted and you are not in the authorized list."},
            error_code="GatedRepo",
        )
        return None
    return repo


def revision_commit(x: Exchange, repo: HubRepo, revision: str) -> HubCommit | None:
    sha = repo.branches.get(revision) or (revision if revision in repo.commits else None)
    if sha is None:
        x.send(404, {"error": f"Invalid rev id: {revision}"}, error_code="RevisionNotFound")
        return None
    return repo.commits[sha]


def _model_info(hub: HubState, x: Exchange, token: str, repo_id: str, revision: str, blobs: bool) -> None:
    with hub.lock:
        repo = lookup(hub, x, token, repo_id, metadata=True)
        commit = revision_commit(x, repo, revision) if repo else None
        if repo is None or commit is None:
            return
        body = {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "sha": commit.sha,
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "tags": ["safetensors"],
            "siblings": [f.sibling(blobs) for f in commit.files.values()],
        }
        if not repo.hide_last_modified:
            body["lastModified"] = repo.last_modified or commit.created_at
    x.send(200, body)


def card_data(hub: HubState, commit: HubCommit) -> dict[str, Any] | None:
    """The YAML front matter of the commit's README.md, as the Hub reports it in ``cardData``
    (hub-docs datasets-cards: the metadata is "the YAML section at the top of the README"); None
    without a README or a mapping there. Caller holds the lock."""
    item = commit.files.get("README.md")
    if item is None or not item.has_bytes():
        return None
    text = file_data(hub, item).decode("utf-8", "replace")
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    try:
        meta = yaml.safe_load(text[3:end]) if end > 0 else None
    except yaml.YAMLError:
        return None
    return meta if isinstance(meta, dict) else None


def file_data(hub: HubState, item: HubFile) -> bytes:
    """A file's bytes as ``/resolve`` serves them (whole: for small files and ranges)."""
    return hub.store.read(item.blob) if item.blob is not None else item.body()


def _dataset_info(hub: HubState, x: Exchange, token: str, key: str, revision: str, blobs: bool) -> None:
    """``dataset_info``: the fields ``DatasetInfo`` reads (``hf_api.py:1013-1143``), ``cardData``
    being the README's YAML at that revision, so ``configs`` and ``dataset_info`` move with it."""
    with hub.lock:
        repo = lookup(hub, x, token, key, metadata=True)
        commit = revision_commit(x, repo, revision) if repo else None
        if repo is None or commit is None:
            return
        card = card_data(hub, commit)
        tags = ["library:datasets"]
        if any(name.endswith(".parquet") for name in commit.files):
            tags.append("format:parquet")
        if card:
            tags += [f"license:{card['license']}"] if isinstance(card.get("license"), str) else []
            tags += [f"language:{lang}" for lang in card.get("language") or [] if isinstance(lang, str)]
        first = commit
        while first.parent and first.parent in repo.commits:
            first = repo.commits[first.parent]
        body: dict[str, Any] = {
            "_id": hashlib.md5(key.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit.sha,
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": tags,
            "createdAt": first.created_at,
            "siblings": [f.sibling(blobs) for f in commit.files.values()],
        }
        if card is not None:
            body["cardData"] = card
        if not repo.hide_last_modified:
            body["lastModified"] = repo.last_modified or commit.created_at
    x.send(200, body)


def _commits(
    hub: HubState, x: Exchange, token: str, repo_id: str, revision: str, query: dict[str, list[str]]
) -> None:
    with hub.lock:
        repo = lookup(hub, x, token, repo_id, metadata=True)
        commit = revision_commit(x, repo, revision) if repo else None
        if repo is None or commit is None:
            return
        history: list[HubCommit] = []
        while commit is not None:
            history.append(commit)
            commit = repo.commits.get(commit.parent) if commit.parent else None
        history.sort(key=lambda c: c.created_at, reverse=True)  # by date; ties keep history order
        size = bounded_int(query.get("limit"), hub.commits_page_size, 1, MAX_PAGE)
        page = bounded_int(query.get("p"), 0, 0, len(history))
        items = [
            {
                "id": c.sha,
                "title": c.title,
                "message": c.message,
                "authors": [{"user": "uploader"}],
                "date": c.created_at,
            }
            for c in history[page * size : (page + 1) * size]
        ]
        headers = {}
        if (page + 1) * size < len(history):
            nxt = f"{hub.url}/api/{repo.kind}/{repo.repo_id}/commits/{quote(revision, safe='')}?p={page + 1}"
            if query.get("limit"):
                nxt += f"&limit={size}"
            headers["Link"] = f'<{nxt}>; rel="next"'
    x.send(200, items, headers=headers)


def bounded_int(values: list[str] | None, default: int, low: int, high: int) -> int:
    try:
        value = int(values[0]) if values else default
    except ValueError:
        value = default
    return min(max(value, low), high)


def byte_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """``Range: bytes=a-b`` (also ``a-`` and ``-n``) → the inclusive (first, last) byte; None when
    absent or not a single byte range (the whole file is served, as RFC 9110 §14.2 allows); False
    when unsatisfiable (416)."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes=") :].strip().partition("-")
    try:
        if not first:
            count = int(last)
            return (max(0, size - count), size - 1) if count > 0 and size else False
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
    except ValueError:
        return None
    return (start, end) if start <= end and start < size else False


def _resolve(hub: HubState, x: Exchange, token: str, key: str, revision: str, path: str) -> None:
    """A file's bytes, whole or one ``Range`` (206): ``hf_hub_download`` resumes with ``Range``
    and ``HfFileSystem`` reads with it (``hf_file_system.py:1575-1583``)."""
    with hub.lock:
        repo = lookup(hub, x, token, key, metadata=False)
        commit = revision_commit(x, repo, revision) if repo else None
        if repo is None or commit is None:
            return
        item = commit.files.get(path)
        if item is None:
            x.send(
                404,
                {"error": f"Entry not found: {path}"},
                error_code="EntryNotFound",
                headers={"X-Repo-Commit": commit.sha},
            )
            return
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{item.blob_id()}"', "Accept-Ranges": "bytes"}
        if item.sha256 and item.has_bytes():  # served bytes are the real LFS object
            headers.update({"X-Linked-Etag": f'"{item.sha256}"', "X-Linked-Size": str(item.size)})
        blob = item.blob
        size = item.size if blob is not None else len(item.body())
        wanted = None if x.head else byte_range(x.headers().get("range"), size)
        data = item.body() if blob is None else b""
    if wanted is False:
        x.send(
            416, {"error": "Requested range not satisfiable"}, headers={"Content-Range": f"bytes */{size}"}
        )
        return
    if isinstance(wanted, tuple):
        first, last = wanted
        whole = data if blob is None else hub.store.read(blob)
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        x.send_bytes(206, whole[first : last + 1], "application/octet-stream", headers)
        return
    if blob is not None:
        x.send_stream(item.size, hub.store.read_chunks(blob), "application/octet-stream", headers)
        return
    x.send_bytes(200, data, "application/octet-stream", headers)
