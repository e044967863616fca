"""What counts as a release: pure functions over a commit's file list, no I/O.

A repo's head sha changes on every commit, model-card edits included, so a new sha alone is not
a release. A release is a change in the *trigger files* (weights, index, config, tokenizer):
added, removed, or with new content, compared by the LFS sha256 (or the git blob id for small
files) that ``model_info(files_metadata=True)`` reports. Comparing content ids rather than
names means a re-upload of identical weights is not a release, and a silent weight swap is.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

INDEX = "model.safetensors.index.json"
WEIGHT_SUFFIX = ".safetensors"

FileIds = dict[str, str]  # path in the repo → "sha256:<lfs oid>" | "blob:<git blob id>" | "size:<n>"


def file_ids(siblings: Iterable[Any]) -> FileIds:
    """The content id of every file of a commit, from ``ModelInfo.siblings`` (files_metadata=True)."""
    out: FileIds = {}
    for s in siblings:
        lfs = getattr(s, "lfs", None)
        sha256 = getattr(lfs, "sha256", None) if lfs is not None else None
        if sha256:
            out[s.rfilename] = f"sha256:{sha256}"
        elif getattr(s, "blob_id", None):
            out[s.rfilename] = f"blob:{s.blob_id}"
        else:  # no metadata: the size is the best we have, and a change of it is still a change
            out[s.rfilename] = f"size:{getattr(s, 'size', None)}"
    return out


def matcher(globs: Sequence[str]) -> Callable[[str], bool]:
    """Case-sensitive globs on the file's path in the repo (``*`` also crosses ``/``)."""
    patterns = tuple(globs)
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class Changes:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted((*self.added, *self.removed, *self.modified)))

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified)


def diff(
    old: Mapping[str, str], new: Mapping[str, str], only: Callable[[str], bool] | None = None
) -> Changes:
    keep = only or (lambda _: True)
    old_names = {n for n in old if keep(n)}
    new_names = {n for n in new if keep(n)}
    return Changes(
        added=tuple(sorted(new_names - old_names)),
        removed=tuple(sorted(old_names - new_names)),
        modified=tuple(sorted(n for n in old_names & new_names if old[n] != new[n])),
    )


def _names(names: Sequence[str], limit: int = 3) -> str:
    shown = list(names[:limit])
    more = len(names) - len(shown)
    text = ", ".join(shown)
    return f"{text} and {more} more" if more else text


def describe_release(changes: Changes) -> str:
    """'12 weight files changed', '2 weight files changed, and config.json', 'tokenizer.json changed'."""
    weights = [n for n in changes.names if n.endswith(WEIGHT_SUFFIX)]
    others = [n for n in changes.names if not n.endswith(WEIGHT_SUFFIX)]
    plural = "s" if len(weights) != 1 else ""
    if weights and others:
        return f"{len(weights)} weight file{plural} changed, and {_names(others)}"
    if weights:
        return f"{len(weights)} weight file{plural} changed"
    return f"{_names(others)} changed"


def describe_ignored(changes: Changes) -> str:
    """'only README.md changed' for a commit that touched no trigger file."""
    if not changes:
        return "no trigger file changed"
    return f"only {_names(list(changes.names))} changed"


def index_shards(index: Any) -> list[str]:
    """The shard files a ``model.safetensors.index.json`` names; ValueError when it is malformed."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{INDEX} has no weight_map")
    if any(not isinstance(v, str) or not v for v in weight_map.values()):
        raise ValueError(f"{INDEX} maps tensors to something other than file names")
    return sorted(set(weight_map.values()))


def missing_shards(index: Any, present: Iterable[str], index_path: str = INDEX) -> list[str]:
    """Shards named by the index (paths relative to the index's folder) that the commit lacks."""
    folder = index_path.rpartition("/")[0]
    have = set(present)
    return [s for s in index_shards(index) if (f"{folder}/{s}" if folder else s) not in have]


def release_key(repo: str, sha: str, template_hash: str, team: str | None = None) -> str:
    """The intake idempotency key: one run per (repo, commit, template, team), whoever sees it
    first. Without a team it is the key runs were always claimed under."""
    key = f"hf:{repo}@{sha}:{template_hash}"
    return f"{key}:{team}" if team else key


def short(sha: str | None) -> str:
    return (sha or "unknown")[:7]


def hhmm(at: datetime) -> str:
    return at.strftime("%H:%M UTC")
