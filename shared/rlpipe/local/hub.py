"""A small Hugging Face Hub double: the routes ``huggingface_hub`` calls, reached through HF_ENDPOINT.

The client library stays real; only the server is ours. Repositories live in memory: each has
branches pointing at commits, and each commit has files (LFS files carry a sha256). Errors use
the Hub's ``X-Error-Code`` header, which is what the client turns into ``RepositoryNotFoundError``,
``RevisionNotFoundError`` and ``GatedRepoError``.
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


@dataclass
class HubFile:
    name: str
    size: int
    sha256: str | None = None  # LFS files only

    def sibling(self, with_blobs: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"rfilename": self.name}
        if with_blobs:
            out["size"] = self.size
            out["blobId"] = hashlib.sha1(f"{self.name}{self.size}{self.sha256}".encode()).hexdigest()
            if self.sha256:
                out["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": 134}
        return out


@dataclass
class HubCommit:
    sha: str
    files: dict[str, HubFile]
    message: str = ""
    created_at: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"))


@dataclass
class HubRepo:
    repo_id: str
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, HubCommit] = field(default_factory=dict)
    gated: bool = False
    authorized_tokens: set[str] = field(default_factory=set)


def commit_sha(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()


def model_files(shards: int = 2, seed: str = "v1") -> dict[str, HubFile]:
    """A plausible safetensors checkpoint: index, shards, config, tokenizer, README."""
    files = {
        "README.md": HubFile("README.md", 1200),
        "config.json": HubFile("config.json", 900),
        "generation_config.json": HubFile("generation_config.json", 200),
        "tokenizer.json": HubFile("tokenizer.json", 33_000_000, hashlib.sha256(f"tok{seed}".encode()).hexdigest()),
        "tokenizer_config.json": HubFile("tokenizer_config.json", 1500),
        "model.safetensors.index.json": HubFile("model.safetensors.index.json", 90_000),
    }
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        files[name] = HubFile(name, 4_900_000_000, hashlib.sha256(f"{name}{seed}".encode()).hexdigest())
    return files


class HubDouble:
    """In-memory repositories served over HTTP on a loopback port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub._handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-double", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- state ----------------------------------------------------------------------------------

    def add_repo(self, repo_id: str, files: dict[str, HubFile] | None = None, *, branch: str = "main",
                 gated: bool = False, message: str = "initial commit") -> str:
        with self.lock:
            repo = self.repos.setdefault(repo_id, HubRepo(repo_id, gated=gated))
            sha = commit_sha(repo_id, branch, str(len(repo.commits)), message)
            repo.commits[sha] = HubCommit(sha, dict(files if files is not None else model_files()), message)
            repo.branches[branch] = sha
            return sha

    def push(self, repo_id: str, changes: dict[str, HubFile | None], *, branch: str = "main",
             message: str = "update") -> str:
        """A new commit on ``branch``: files set (or deleted with None) relative to its head."""
        with self.lock:
            repo = self.repos[repo_id]
            files = dict(repo.commits[repo.branches[branch]].files)
            for name, item in changes.items():
                if item is None:
                    files.pop(name, None)
                else:
                    files[name] = item
            sha = commit_sha(repo_id, branch, str(len(repo.commits)), message)
            repo.commits[sha] = HubCommit(sha, files, message)
            repo.branches[branch] = sha
            return sha

    # ---- HTTP -----------------------------------------------------------------------------------

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlparse(req.path)
        with self.lock:
            self.requests.append(("GET", url.path))
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) >= 4 and parts[:2] == ["api", "models"]:
            repo_id = f"{parts[2]}/{parts[3]}"
            revision = parts[5] if len(parts) >= 6 and parts[4] == "revision" else "main"
            self._model_info(req, repo_id, revision, "blobs=" in (url.query or ""))
            return
        self._send(req, 404, {"error": "not found"}, error_code="EntryNotFound")

    def _model_info(self, req: BaseHTTPRequestHandler, repo_id: str, revision: str, blobs: bool) -> None:
        with self.lock:
            repo = self.repos.get(repo_id)
            if repo is None:
                self._send(req, 404, {"error": "Repository not found"}, error_code="RepoNotFound")
                return
            token = (req.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            if repo.gated and token not in repo.authorized_tokens:
                self._send(req, 403, {"error": f"Access to model {repo_id} is restricted."}, error_code="GatedRepo")
                return
            sha = repo.branches.get(revision) or (revision if revision in repo.commits else None)
            if sha is None:
                self._send(req, 404, {"error": f"Invalid rev id: {revision}"}, error_code="RevisionNotFound")
                return
            commit = repo.commits[sha]
            body = {
                "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "sha": sha,
                "lastModified": commit.created_at,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "tags": ["safetensors"],
                "siblings": [f.sibling(blobs) for f in commit.files.values()],
            }
        self._send(req, 200, body)

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, status: int, body: dict[str, Any], *, error_code: str | None = None) -> None:
        data = json.dumps(body).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        if error_code:
            req.send_header("X-Error-Code", error_code)
            req.send_header("X-Error-Message", str(body.get("error", "")))
        req.end_headers()
        req.wfile.write(data)
