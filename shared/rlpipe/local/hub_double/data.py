"""The Hub double's data: repositories, commits, files, and the knobs that make it misbehave.

Plain data, no I/O; ``rlpipe.local.hub_double`` serves it, ``rlpipe.local.hub_double.routes`` (reads) and
``rlpipe.local.hub_double.writes`` (uploads) answer requests, ``rlpipe.local.hub_double.store`` keeps uploaded bytes.
The datasets the double is seeded with are ``rlpipe.local.hub_double.datasets``'s, their parquet files
``rlpipe.local.hub_double.parquet``'s.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

INDEX = "model.safetensors.index.json"


def stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class HubFile:
    name: str
    size: int
    sha256: str | None = None  # LFS files only
    content: bytes | None = None  # served by /resolve; None = a small placeholder body
    blob: str | None = (
        None  # uploaded files: the sha256 naming their bytes in ``rlpipe.local.hub_double.store``
    )
    oid: str | None = None  # uploaded files: git's blob id, computed when the bytes were stored

    @classmethod
    def of(cls, name: str, data: bytes | str) -> HubFile:
        """A regular (non-LFS) file with real content, e.g. an index or a config."""
        raw = data.encode() if isinstance(data, str) else data
        return cls(name, len(raw), None, raw)

    def blob_id(self) -> str:
        """Git's blob id when the content is known (as the Hub reports it), else a stable stand-in."""
        if self.oid is not None:
            return self.oid
        if self.content is not None:
            return hashlib.sha1(b"blob %d\x00" % len(self.content) + self.content).hexdigest()
        return hashlib.sha1(f"{self.name}{self.size}{self.sha256}".encode()).hexdigest()

    def has_bytes(self) -> bool:
        """/resolve serves the real bytes (content in memory or uploaded), not a placeholder."""
        return self.content is not None or self.blob is not None

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
    created_at: str = field(default_factory=stamp)
    parent: str | None = None

    @property
    def title(self) -> str:
        """The summary line (``list_repo_commits`` reports it as ``title``, the whole text as ``message``)."""
        return self.message.split("\n", 1)[0]


@dataclass
class HubRepo:
    repo_id: str
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, HubCommit] = field(default_factory=dict)
    gated: bool = False
    authorized_tokens: set[str] = field(default_factory=set)
    # True is the Hub's behaviour: a gated repo's metadata (model_info, commits) is shown to
    # anyone, only its files and auth-check are refused. False refuses metadata too, with 403:
    # NOT Hub behaviour, kept only to show what a client does if the Hub ever tightened this.
    public_metadata: bool = True
    hide_last_modified: bool = False  # model_info without lastModified (clients fall back to commits)
    # What ``lastModified`` means for a revision is not documented; set this (an ISO time) to make
    # model_info report it instead of the revision's commit date, e.g. a repo-wide last change.
    last_modified: str | None = None
    private: bool = False  # created with visibility "private": anonymous callers get 401 RepoNotFound
    lfs_objects: dict[str, int] = field(default_factory=dict)  # LFS oid → size uploaded to this repo
    repo_type: str = "model"  # or "dataset" (kept under the key ``repo_key`` gives it)

    @property
    def kind(self) -> str:
        """The URL segment of its API: ``models`` or ``datasets``."""
        return f"{self.repo_type}s"


@dataclass
class ForcedLimit:
    """The next ``remaining_times`` requests under ``path_prefix`` answer 429."""

    remaining_times: int
    reset: int
    limit: int
    window: int
    path_prefix: str
    left: int = 0  # the ``r=`` the 429 reports: 0 = the rate limit is the reason for the 429
    retry_after: int | None = None


@dataclass
class ForcedFailure:
    """After ``after`` matching requests pass, the next ``times`` answer ``status`` (body drained)."""

    path_prefix: str
    status: int
    times: int
    after: int = 0
    method: str | None = None  # None = any method

    def matches(self, method: str, path: str) -> bool:
        return path.startswith(self.path_prefix) and self.method in (None, method)


@dataclass
class Stall:
    """Requests under ``path_prefix`` get no answer until ``release`` is set."""

    path_prefix: str
    release: threading.Event = field(default_factory=threading.Event)


@dataclass
class Quota:
    """Requests per fixed window and bucket; the defaults are hub-docs rate-limits.md's tiers
    (September '25, lines 62-66): free user 1,000 API / 5,000 resolvers, anonymous 500 / 3,000."""

    api: int = 1000
    resolvers: int = 5000
    pages: int = 200
    anonymous_api: int = 500
    anonymous_resolvers: int = 3000
    anonymous_pages: int = 100
    window: int = 300  # "All quotas are calculated over 5-minute fixed windows" (line 76)


# The .gitattributes of a new model repo on the Hub (the LFS patterns, abridged to the ones a
# checkpoint can contain); ``preupload`` answers "lfs" for paths it matches.
GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
        "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
        "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
        "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
    )
)  # fmt: skip


def lfs_patterns(gitattributes: str) -> list[str]:
    return [line.split()[0] for line in gitattributes.splitlines() if "filter=lfs" in line.split()[1:]]


def matches_any(path: str, patterns: list[str]) -> bool:
    """git's rule, simplified: a pattern without a slash matches the file name at any depth."""
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(path if "/" in p else name, p) for p in patterns)


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
        # A model card with the metadata header real cards carry (hub-docs model-cards.md): the
        # publish stage takes the base model's license from it.
        "README.md": HubFile.of(
            "README.md",
            "---\nlicense: gemma\nlibrary_name: transformers\npipeline_tag: image-text-to-text\n---\n\n"
            "# A model on the Hub double\n\nPlaceholder card of a simulated checkpoint.\n",
        ),
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


# ---- dataset repositories ------------------------------------------------------------------------
#
# The Hub keeps datasets apart from models: the same ``org/name`` may be both, their API lives
# under ``/api/datasets/`` and their files under ``/datasets/{repo}/resolve/`` (the client's
# ``REPO_TYPES_URL_PREFIXES``, ``constants.py:123-127``). The double keys a dataset repository
# ``datasets/org/name`` in ``HubDouble.repos`` (a model keeps its bare id), the same prefix.

DATASET = "dataset"
MODEL = "model"


def repo_key(repo_id: str, repo_type: str = MODEL) -> str:
    """Where a repository lives in ``HubDouble.repos``: models by id, datasets as ``datasets/{id}``."""
    if repo_type == MODEL:
        return repo_id
    if repo_type == DATASET:
        return f"datasets/{repo_id}"
    raise ValueError(f"the double serves model and dataset repos, not {repo_type!r}")
