"""A Hugging Face Hub double: the routes ``huggingface_hub`` calls, reached through HF_ENDPOINT.

The client library stays real; only the server is ours. Repositories live in memory: each has
branches pointing at commits, and each commit has files (LFS files carry a sha256); uploaded bytes
live on disk, in a temporary directory of the double (``rlpipe.local.hub_double.store``). How each route
answers, and where that behaviour is documented, is in ``rlpipe.local.hub_double.gate`` (what every request
goes through first), ``rlpipe.local.hub_double.routes`` (reads), ``rlpipe.local.hub_double.listing`` (tree,
paths-info, refs) and ``rlpipe.local.hub_double.writes`` (uploads). In short:

- ``GET /api/models/{repo}[/revision/{rev}]``  ``model_info`` (``?blobs=true`` adds sizes, blob ids, LFS)
- ``GET /api/models/{repo}/auth-check``        ``auth_check``
- ``GET /api/datasets/{repo}[/revision/{rev}]``, ``…/auth-check``, ``…/commits/{rev}``, the listings,
  ``HEAD|GET /datasets/{repo}/resolve/{rev}/{path}``: the same for dataset repos (``dataset_info``
  adds ``cardData``, the README's YAML: ``configs``, ``dataset_info``)
- ``GET /api/models/{repo}/commits/{rev}``     ``list_repo_commits``: newest first, in pages
  linked by ``Link: <…>; rel="next"``
- ``HEAD|GET /{repo}/resolve/{rev}/{path}``    files (``X-Repo-Commit``, ``ETag``, ``X-Linked-*``)
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``, ``POST …/paths-info/{rev}``, ``GET …/refs``  listings
- ``POST /api/repos/create``, ``…/branch/{name}``, ``…/preupload/{rev}``, ``/{repo}.git/info/lfs/
  objects/batch`` (+ a signed PUT URL and ``verify``), ``…/commit/{rev}`` (NDJSON),
  ``/api/validate-yaml``: ``create_repo``, ``create_branch``, ``preupload_lfs_files``,
  ``create_commit`` over the LFS basic transfer (not Xet: run the client with HF_HUB_DISABLE_XET=1)

Behaviours, each the Hub's unless labelled otherwise:

- A gated repo's metadata, file list and commits are public; only its files (``/resolve``) and
  ``auth-check`` refuse an account that has not accepted the license (401 anonymous, 403 with a
  token). ``public_metadata=False`` is a stricter mode that is **not Hub behaviour**.
- A token revoked with :meth:`HubDouble.revoke` gets 401 "Invalid credentials in Authorization
  header" everywhere; an anonymous request for a missing repo gets 401, with a token 404.
- Every answer carries ``RateLimit``/``RateLimit-Policy`` for its bucket (``api``, or
  ``resolvers`` for ``/resolve/``), counted per caller over a fixed window; an exhausted bucket
  answers 429 with ``r=0``. :meth:`HubDouble.rate_limit` forces 429s; :meth:`HubDouble.stall`
  makes requests hang without an answer, for timeout tests; :meth:`HubDouble.fail` answers a status
  (e.g. 500 to the 2nd LFS PUT) to chosen requests.
- Writes need a token with write access: none is 401, one named with :meth:`HubDouble.read_only_token` 403.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlpipe.local.hub_double import gate, listing, routes, writes
from rlpipe.local.hub_double.data import (
    DATASET,
    INDEX,
    MODEL,
    ForcedFailure,
    ForcedLimit,
    HubCommit,
    HubFile,
    HubRepo,
    Quota,
    Stall,
    commit_sha,
    model_files,
    repo_key,
    safetensors_index,
    shard_file,
    shard_names,
    stamp,
)
from rlpipe.local.hub_double.datasets import (
    GATED_DATASET,
    KNOWN_DATASETS,
    dataset_files,
    gated_math_files,
    gsm8k_files,
    openr1_math_files,
)
from rlpipe.local.hub_double.parquet import parquet_bytes
from rlpipe.local.hub_double.store import BlobStore

__all__ = [
    "DATASET",
    "GATED_DATASET",
    "INDEX",
    "KNOWN_DATASETS",
    "MODEL",
    "HubCommit",
    "HubDouble",
    "HubFile",
    "HubRepo",
    "commit_sha",
    "dataset_files",
    "gated_math_files",
    "gsm8k_files",
    "model_files",
    "openr1_math_files",
    "parquet_bytes",
    "safetensors_index",
    "shard_file",
    "shard_names",
]


def handle(hub: HubDouble, req: BaseHTTPRequestHandler, method: str) -> None:
    started = gate.prelude(hub, req, method)
    if started is None:
        return
    x, token = started
    for answer in (writes.answer, listing.answer):
        if answer(hub, x, token, method):
            return
    routes.answer(hub, x, token, method)


class HubDouble:
    """In-memory repositories (uploaded bytes on disk) served over HTTP on a loopback port."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        commits_page_size: int = 50,
        store_dir: Path | None = None,
    ):
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.limits: list[ForcedLimit] = []
        self.stalls: list[Stall] = []
        self.revoked: set[str] = set()
        self.quota = Quota()
        self.used: dict[tuple[str, str, int], int] = {}  # (caller, bucket, window start) → requests
        self.commits_page_size = commits_page_size
        self.failures: list[ForcedFailure] = []
        self.read_only: set[str] = set()
        self.secret = secrets.token_bytes(32)  # signs the LFS upload URLs
        self._own_store = store_dir is None
        self.store = BlobStore(store_dir or Path(tempfile.mkdtemp(prefix="rlpipe-hub-double-")))
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                handle(hub, self, "GET")

            def do_HEAD(self) -> None:
                handle(hub, self, "HEAD")

            def do_POST(self) -> None:
                handle(hub, self, "POST")

            def do_PUT(self) -> None:
                handle(hub, self, "PUT")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-double", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

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
        self.release_stalls()  # a held request would keep its handler thread (and socket) alive
        self._server.shutdown()
        self._server.server_close()
        if self._own_store:
            shutil.rmtree(self.store.root, ignore_errors=True)

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
        public_metadata: bool = True,
        repo_type: str = MODEL,
        private: bool = False,
    ) -> str:
        """A commit on ``branch`` holding ``files`` (default: a model checkpoint), creating the repo
        if needed; returns the commit sha. ``add_dataset`` is this for dataset repos."""
        if files is None and repo_type != MODEL:
            raise ValueError(
                "name the files of a dataset repo (rlpipe.local.hub_double.datasets.dataset_files)"
            )
        with self.lock:
            repo = self.repos.setdefault(
                repo_key(repo_id, repo_type),
                HubRepo(
                    repo_id,
                    gated=gated,
                    public_metadata=public_metadata,
                    repo_type=repo_type,
                    private=private,
                ),
            )
            sha = commit_sha(repo_id, branch, str(len(repo.commits)), message)
            repo.commits[sha] = HubCommit(
                sha,
                dict(files if files is not None else model_files()),
                message,
                stamp(at),
                repo.branches.get(branch),
            )
            repo.branches[branch] = sha
            return sha

    def add_dataset(
        self,
        repo_id: str,
        files: dict[str, HubFile] | None = None,
        *,
        branch: str = "main",
        gated: bool = False,
        private: bool = False,
        message: str = "initial commit",
        at: datetime | None = None,
    ) -> str:
        """A dataset repo (or a new commit on its ``branch``) holding ``files``: by default openai/gsm8k's
        layout with its default row counts (``data.gsm8k_files``); build others with
        ``data.dataset_files`` or the named seeds. Returns the commit sha."""
        return self.add_repo(
            repo_id,
            gsm8k_files() if files is None else files,
            branch=branch,
            gated=gated,
            message=message,
            at=at,
            repo_type=DATASET,
            private=private,
        )

    def add_known_datasets(self, rows: dict[str, dict[str, int]] | None = None) -> dict[str, str]:
        """Seed the datasets of ``data.KNOWN_DATASETS`` (openai/gsm8k, open-r1/OpenR1-Math-220k and
        the gated ``data.GATED_DATASET``); ``rows[repo]`` sets row counts, as that seed takes them
        (per split for gsm8k and the gated one, per config for OpenR1). Returns repo → commit sha."""
        shas = {}
        for repo_id, make in KNOWN_DATASETS.items():
            files = make((rows or {}).get(repo_id))
            shas[repo_id] = self.add_dataset(repo_id, files, gated=repo_id == GATED_DATASET)
        return shas

    def push(
        self,
        repo_id: str,
        changes: dict[str, HubFile | None],
        *,
        branch: str = "main",
        message: str = "update",
        at: datetime | None = None,
        repo_type: str = MODEL,
    ) -> str:
        """A new commit on ``branch``: files set (or deleted with None) relative to its head."""
        with self.lock:
            repo = self.repos[repo_key(repo_id, repo_type)]
            parent = repo.branches[branch]
            files = dict(repo.commits[parent].files)
            for name, item in changes.items():
                if item is None:
                    files.pop(name, None)
                else:
                    files[name] = item
            sha = commit_sha(repo_id, branch, str(len(repo.commits)), message)
            repo.commits[sha] = HubCommit(sha, files, message, stamp(at), parent)
            repo.branches[branch] = sha
            return sha

    def grant(self, repo_id: str, token: str, *, repo_type: str = MODEL) -> None:
        """The token's account accepted the gated repo's license."""
        with self.lock:
            self.repos[repo_key(repo_id, repo_type)].authorized_tokens.add(token)

    def revoke(self, token: str) -> None:
        """The token is no longer valid: every request carrying it answers 401."""
        with self.lock:
            self.revoked.add(token)

    def set_quota(self, **limits: int) -> None:
        """Change the per-window quotas (fields of ``Quota``) and start counting afresh."""
        with self.lock:
            for name, value in limits.items():
                if not hasattr(self.quota, name):
                    raise ValueError(f"no quota named {name!r}")
                setattr(self.quota, name, value)
            self.used.clear()

    def rate_limit(
        self,
        times: int = 1,
        *,
        reset: int = 30,
        limit: int = 1000,
        window: int = 300,
        path_prefix: str = "/api/",
        remaining: int = 0,
        retry_after: int | None = None,
    ) -> None:
        """The next ``times`` requests under ``path_prefix`` answer 429 with ``reset`` seconds to wait.

        ``remaining`` > 0 makes a 429 whose ``RateLimit`` header is *not* the reason (requests are
        left in the window); ``retry_after`` adds a ``Retry-After`` header (seconds)."""
        if times < 1:
            raise ValueError("times must be 1 or more")
        with self.lock:
            self.limits.append(ForcedLimit(times, reset, limit, window, path_prefix, remaining, retry_after))

    def stall(self, path_prefix: str = "/") -> None:
        """Requests under ``path_prefix`` are accepted and never answered, until ``release_stalls``
        (or ``stop``) closes them without an answer."""
        with self.lock:
            self.stalls.append(Stall(path_prefix))

    def fail(
        self,
        path_prefix: str,
        status: int = 500,
        *,
        times: int = 1,
        after: int = 0,
        method: str | None = None,
    ) -> None:
        """After ``after`` requests under ``path_prefix`` (of ``method``, or any) pass, the next
        ``times`` answer ``status``. LFS uploads go to ``/lfs-storage/``: ``fail("/lfs-storage/",
        after=1, times=6)`` fails the 2nd PUT through all of the client's 5 retries."""
        with self.lock:
            self.failures.append(ForcedFailure(path_prefix, status, times, after, method))

    def read_only_token(self, token: str) -> None:
        """The token may read but not write: uploads answer 403."""
        with self.lock:
            self.read_only.add(token)

    def file_bytes(self, repo_id: str, path: str, revision: str = "main", *, repo_type: str = MODEL) -> bytes:
        """The bytes of a file at a revision, as ``/resolve`` serves them (for assertions)."""
        with self.lock:
            repo = self.repos[repo_key(repo_id, repo_type)]
            item = repo.commits[repo.branches.get(revision, revision)].files[path]
        return self.store.read(item.blob) if item.blob is not None else item.body()

    def release_stalls(self) -> None:
        with self.lock:
            stalls, self.stalls = self.stalls, []
        for item in stalls:
            item.release.set()

    def paths(self, prefix: str = "") -> list[str]:
        """Paths requested so far (both methods), for assertions on what the client called."""
        with self.lock:
            return [p for _, p in self.requests if p.startswith(prefix)]
