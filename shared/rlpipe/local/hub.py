"""A small Hugging Face Hub double: the routes ``huggingface_hub`` calls, reached through HF_ENDPOINT.

The client library stays real; only the server is ours. Repositories live in memory: each has
branches pointing at commits, and each commit has files (LFS files carry a sha256). Errors use
the Hub's ``X-Error-Code`` header, which is what the client turns into ``RepositoryNotFoundError``,
``RevisionNotFoundError``, ``EntryNotFoundError`` and ``GatedRepoError``.

Routes (what ``huggingface_hub`` 2.x requests):

- ``GET /api/models/{repo}[/revision/{rev}]``  ``model_info`` (``?blobs=true`` adds sizes, blob ids, LFS)
- ``GET /api/models/{repo}/auth-check``        ``auth_check`` (200, or 403 ``GatedRepo`` / 404)
- ``GET /api/models/{repo}/commits/{rev}``     ``list_repo_commits`` (newest first, one page)
- ``HEAD|GET /{repo}/resolve/{rev}/{path}``    ``hf_hub_download``: ``X-Repo-Commit``, ``ETag``
  (``X-Linked-Etag``/``X-Linked-Size`` for LFS files), ``Content-Length``

Any route can be made to answer 429 with the Hub's ``RateLimit``/``RateLimit-Policy`` headers
(``rate_limit``), the format ``huggingface_hub.utils.parse_ratelimit_headers`` reads.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

INDEX = "model.safetensors.index.json"


def _stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class HubFile:
    name: str
    size: int
    sha256: str | None = None  # LFS files only
    content: bytes | None = None  # served by /resolve; None = a small placeholder body

    @classmethod
    def of(cls, name: str, data: bytes | str) -> HubFile:
        """A regular (non-LFS) file with real content, e.g. an index or a config."""
        raw = data.encode() if isinstance(data, str) else data
        return cls(name, len(raw), None, raw)

    def blob_id(self) -> str:
        """Git's blob id when the content is known (as the Hub reports it), else a stable stand-in."""
        if self.content is not None:
            return hashlib.sha1(b"blob %d\x00" % len(self.content) + self.content).hexdigest()
        return hashlib.sha1(f"{self.name}{self.size}{self.sha256}".encode()).hexdigest()

    def body(self) -> bytes:
        if self.content is not None:
            return self.content
        return f"rlpipe hub double: placeholder for {self.name}\n".encode()

    def sibling(self, with_blobs: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"rfilename": self.name}
        if with_blobs:
            out["size"] = self.size
            out["blobId"] = self.blob_id()
            if self.sha256:
                out["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": 134}
        return out


@dataclass
class HubCommit:
    sha: str
    files: dict[str, HubFile]
    message: str = ""
    created_at: str = field(default_factory=_stamp)
    parent: str | None = None


@dataclass
class HubRepo:
    repo_id: str
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, HubCommit] = field(default_factory=dict)
    gated: bool = False
    authorized_tokens: set[str] = field(default_factory=set)
    # The real Hub shows a gated repo's metadata (model_info, commits) to anyone and refuses only
    # files and auth-check; False keeps this double's older, stricter behaviour (403 everywhere).
    public_metadata: bool = False
    hide_last_modified: bool = False  # model_info without lastModified (clients fall back to commits)


@dataclass
class _RateLimit:
    remaining: int
    reset: int
    limit: int
    window: int
    path_prefix: str


def commit_sha(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()


def safetensors_index(shards: list[str], shard_size: int = 4_900_000_000) -> HubFile:
    """``model.safetensors.index.json`` naming ``shards`` (two tensors per shard)."""
    weight_map = {
        f"model.layers.{i}.{part}.weight": shard
        for i, shard in enumerate(shards)
        for part in ("mlp", "self_attn")
    }
    body = {"metadata": {"total_size": shard_size * len(shards)}, "weight_map": weight_map}
    return HubFile.of(INDEX, json.dumps(body, indent=2, sort_keys=True))


def shard_file(name: str, seed: str = "v1", size: int = 4_900_000_000) -> HubFile:
    return HubFile(name, size, hashlib.sha256(f"{name}{seed}".encode()).hexdigest())


def shard_names(shards: int) -> list[str]:
    return [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]


def model_files(shards: int = 2, seed: str = "v1") -> dict[str, HubFile]:
    """A plausible safetensors checkpoint: index, shards, config, tokenizer, README."""
    names = shard_names(shards)
    files = {
        "README.md": HubFile("README.md", 1200),
        "config.json": HubFile("config.json", 900),
        "generation_config.json": HubFile("generation_config.json", 200),
        "tokenizer.json": HubFile(
            "tokenizer.json", 33_000_000, hashlib.sha256(f"tok{seed}".encode()).hexdigest()
        ),
        "tokenizer_config.json": HubFile("tokenizer_config.json", 1500),
        INDEX: safetensors_index(names),
    }
    for name in names:
        files[name] = shard_file(name, seed)
    return files


class HubDouble:
    """In-memory repositories served over HTTP on a loopback port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._limits: list[_RateLimit] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub._handle(self, "GET")

            def do_HEAD(self) -> None:
                hub._handle(self, "HEAD")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-double", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def client_constants(self) -> dict[str, str]:
        """``huggingface_hub.constants`` to patch in-process so the real client talks to this double.

        ``HF_ENDPOINT`` in the environment does this for a fresh process; in-process, both names are
        needed: ``hf_hub_url`` (downloads) formats the template computed at import, not ``ENDPOINT``.
        """
        return {
            "ENDPOINT": self.url,
            "HUGGINGFACE_CO_URL_TEMPLATE": self.url + "/{repo_id}/resolve/{revision}/{filename}",
        }

    def start(self) -> HubDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- state ----------------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, HubFile] | None = None,
        *,
        branch: str = "main",
        gated: bool = False,
        message: str = "initial commit",
        at: datetime | None = None,
        public_metadata: bool = False,
    ) -> str:
        with self.lock:
            repo = self.repos.setdefault(
                repo_id, HubRepo(repo_id, gated=gated, public_metadata=public_metadata)
            )
            sha = commit_sha(repo_id, branch, str(len(repo.commits)), message)
            repo.commits[sha] = HubCommit(
                sha,
                dict(files if files is not None else model_files()),
                message,
                _stamp(at),
                repo.branches.get(branch),
            )
            repo.branches[branch] = sha
            return sha

    def push(
        self,
        repo_id: str,
        changes: dict[str, HubFile | None],
        *,
        branch: str = "main",
        message: str = "update",
        at: datetime | None = None,
    ) -> str:
        """A new commit on ``branch``: files set (or deleted with None) relative to its head."""
        with self.lock:
            repo = self.repos[repo_id]
            parent = repo.branches[branch]
            files = dict(repo.commits[parent].files)
            for name, item in changes.items():
                if item is None:
                    files.pop(name, None)
                else:
                    files[name] = item
            sha = commit_sha(repo_id, branch, str(len(repo.commits)), message)
            repo.commits[sha] = HubCommit(sha, files, message, _stamp(at), parent)
            repo.branches[branch] = sha
            return sha

    def grant(self, repo_id: str, token: str) -> None:
        """The token's account accepted the gated repo's license."""
        with self.lock:
            self.repos[repo_id].authorized_tokens.add(token)

    def rate_limit(
        self,
        times: int = 1,
        *,
        reset: int = 30,
        limit: int = 1000,
        window: int = 300,
        path_prefix: str = "/api/",
    ) -> None:
        """The next ``times`` requests under ``path_prefix`` answer 429 with ``reset`` seconds to wait."""
        if times < 1:
            raise ValueError("times must be 1 or more")
        with self.lock:
            self._limits.append(_RateLimit(times, reset, limit, window, path_prefix))

    def paths(self, prefix: str = "") -> list[str]:
        """Paths requested so far (both methods), for assertions on what the client called."""
        with self.lock:
            return [p for _, p in self.requests if p.startswith(prefix)]

    # ---- HTTP -----------------------------------------------------------------------------------

    def _handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(req.path)
        with self.lock:
            self.requests.append((method, url.path))
            limited = next((lim for lim in self._limits if url.path.startswith(lim.path_prefix)), None)
            if limited is not None:
                limited.remaining -= 1
                if limited.remaining <= 0:
                    self._limits.remove(limited)
        if limited is not None:
            self._send(
                req,
                429,
                {"error": "You have exceeded our rate limit"},
                headers={
                    "RateLimit": f'"api";r=0;t={limited.reset}',
                    "RateLimit-Policy": f'"fixed window";"api";q={limited.limit};w={limited.window}',
                },
                head=method == "HEAD",
            )
            return
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) >= 4 and parts[:2] == ["api", "models"]:
            repo_id, rest = f"{parts[2]}/{parts[3]}", parts[4:]
            if not rest or (rest[0] == "revision" and len(rest) == 2):
                self._model_info(req, repo_id, rest[1] if rest else "main", "blobs=" in (url.query or ""))
                return
            if rest[0] == "auth-check":
                self._auth_check(req, repo_id)
                return
            if rest[0] == "commits" and len(rest) == 2:
                self._commits(req, repo_id, rest[1])
                return
        if len(parts) >= 5 and parts[2] == "resolve":
            self._resolve(req, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head=method == "HEAD")
            return
        self._send(req, 404, {"error": "not found"}, error_code="EntryNotFound", head=method == "HEAD")

    def _lookup(
        self, req: BaseHTTPRequestHandler, repo_id: str, *, metadata: bool, head: bool = False
    ) -> HubRepo | None:
        """The repository, or None after answering 404 / 403 the way the Hub does. Caller holds the lock."""
        repo = self.repos.get(repo_id)
        if repo is None:
            self._send(req, 404, {"error": "Repository not found"}, error_code="RepoNotFound", head=head)
            return None
        token = (req.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if repo.gated and token not in repo.authorized_tokens and not (metadata and repo.public_metadata):
            self._send(
                req,
                403,
                {"error": f"Access to model {repo_id} is restricted and you are not in the authorized list."},
                error_code="GatedRepo",
                head=head,
            )
            return None
        return repo

    def _commit(
        self, req: BaseHTTPRequestHandler, repo: HubRepo, revision: str, head: bool = False
    ) -> HubCommit | None:
        sha = repo.branches.get(revision) or (revision if revision in repo.commits else None)
        if sha is None:
            self._send(
                req, 404, {"error": f"Invalid rev id: {revision}"}, error_code="RevisionNotFound", head=head
            )
            return None
        return repo.commits[sha]

    def _model_info(self, req: BaseHTTPRequestHandler, repo_id: str, revision: str, blobs: bool) -> None:
        with self.lock:
            repo = self._lookup(req, repo_id, metadata=True)
            commit = self._commit(req, repo, revision) if repo else None
            if repo is None or commit is None:
                return
            body = {
                "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "sha": commit.sha,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "tags": ["safetensors"],
                "siblings": [f.sibling(blobs) for f in commit.files.values()],
            }
            if not repo.hide_last_modified:
                body["lastModified"] = commit.created_at
        self._send(req, 200, body)

    def _auth_check(self, req: BaseHTTPRequestHandler, repo_id: str) -> None:
        with self.lock:
            if self._lookup(req, repo_id, metadata=False) is None:
                return
        self._send(req, 200, {"access": "read"})

    def _commits(self, req: BaseHTTPRequestHandler, repo_id: str, revision: str) -> None:
        with self.lock:
            repo = self._lookup(req, repo_id, metadata=True)
            commit = self._commit(req, repo, revision) if repo else None
            if repo is None or commit is None:
                return
            items = []
            while commit is not None:
                items.append(
                    {
                        "id": commit.sha,
                        "title": commit.message,
                        "message": commit.message,
                        "authors": [{"user": "uploader"}],
                        "date": commit.created_at,
                    }
                )
                commit = repo.commits.get(commit.parent) if commit.parent else None
        self._send(req, 200, items)

    def _resolve(
        self, req: BaseHTTPRequestHandler, repo_id: str, revision: str, path: str, *, head: bool
    ) -> None:
        with self.lock:
            repo = self._lookup(req, repo_id, metadata=False, head=head)
            commit = self._commit(req, repo, revision, head=head) if repo else None
            if repo is None or commit is None:
                return
            item = commit.files.get(path)
            if item is None:
                self._send(
                    req,
                    404,
                    {"error": f"Entry not found: {path}"},
                    error_code="EntryNotFound",
                    headers={"X-Repo-Commit": commit.sha},
                    head=head,
                )
                return
            data = item.body()
            headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{item.blob_id()}"'}
            if item.sha256 and item.content is not None:  # served bytes are the real LFS object
                headers.update({"X-Linked-Etag": f'"{item.sha256}"', "X-Linked-Size": str(len(data))})
        self._send_bytes(req, 200, data, "application/octet-stream", headers, head=head)

    @classmethod
    def _send(
        cls,
        req: BaseHTTPRequestHandler,
        status: int,
        body: Any,
        *,
        error_code: str | None = None,
        headers: dict[str, str] | None = None,
        head: bool = False,
    ) -> None:
        extra = dict(headers or {})
        if error_code:
            extra["X-Error-Code"] = error_code
            extra["X-Error-Message"] = str(body.get("error", "")) if isinstance(body, dict) else ""
        cls._send_bytes(req, status, json.dumps(body).encode(), "application/json", extra, head=head)

    @staticmethod
    def _send_bytes(
        req: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        content_type: str,
        headers: dict[str, str],
        *,
        head: bool = False,
    ) -> None:
        req.send_response(status)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            req.send_header(name, value)
        req.end_headers()
        if not head:
            req.wfile.write(data)
