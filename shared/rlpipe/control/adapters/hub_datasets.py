"""Pin a training dataset on the Hugging Face Hub before any TPU is held.

:func:`resolve_dataset` turns a request's dataset (repo, revision, subset, splits) into a
:class:`PinnedDataset`: the commit sha the revision points at now, and the exact data files of each
split at that sha (path, size, and sha256 for LFS files), so staging can later copy them byte for
byte and check them. It checks, with the pipeline's token, that the dataset exists and is readable
(gated datasets included), that the subset exists and that each split has data files.

Requests, each one bounded by the timeout and none retried here (as ``rlpipe.control.adapters.hub_client``):

- ``GET {endpoint}/api/datasets/{repo}/revision/{rev}?blobs=True``: ``HfApi.dataset_info(…,
  files_metadata=True)`` (``hf_api.py:3273-3284`` in huggingface_hub 2.4.0), which gives the sha,
  every file with its size and LFS sha256 (``hf_api.py:1115-1135``) and the card's YAML as
  ``card_data`` (``hf_api.py:1111-1114``): ``configs`` and ``dataset_info``.
- ``GET {endpoint}/api/datasets/{repo}/auth-check`` (``rlpipe.control.adapters.hub_client.check_access``): the Hub
  shows a gated repo's metadata to anyone; only this says whether the token may read its files.

Which files make a split follows ``datasets`` (https://github.com/huggingface/datasets/blob/main/
src/datasets/data_files.py, and https://huggingface.co/docs/hub/datasets-manual-configuration,
https://huggingface.co/docs/hub/datasets-file-names-and-splits):

- The card's ``configs`` (one entry per subset, ``config_name``): ``data_files`` as a path or glob,
  a list of them (both: all in ``train``), or ``[{split, path}]`` with ``path`` one pattern or a
  list; an optional ``data_dir`` that patterns are relative to. No subset asked: the config marked
  ``default: true``, else the one named ``default``, else the only one.
- Globs as ``datasets`` resolves them (fsspec's glob): ``*`` and ``?`` stay within one path
  segment, ``[…]`` is a character class, a whole ``**`` segment spans any number of directories.
  Hidden files and directories (``.x``) and ``__x`` directories are skipped unless the pattern
  names them so; README.md, config.json, dataset_info(s).json, dataset_dict.json and
  dummy_data.zip are skipped unless the pattern names them. A literal path that matches nothing is
  an error; a glob that matches nothing adds nothing.
- No ``configs`` (or a config without ``data_files``): the Hub's default layout, a single subset
  ``default``, tried in order until one gives files: ``data/{split}-NNNNN-of-NNNNN*.*`` (what
  ``push_to_hub`` writes; any split name); a directory named after a split keyword; a file name
  with a split keyword (keywords train/training → train, validation/valid/dev/val → validation,
  test/testing/eval/evaluation → test, set off by ``-._ `` or digits); else every data file is
  ``train``. Only files with a data extension (below) take part.

Data files are parquet, jsonl, json or csv; other files a pattern matches are left out, as
``datasets`` leaves out files not of the format it loads. Only parquet can be *staged*: MaxText
loads staged files with ``datasets.load_dataset("parquet", data_files={split: data_files})``
(maxtext ``trainers/post_train/rl/train_rl.py:179-186``), so a split held as jsonl, json or csv is
refused, permanently, with the fix (convert it to parquet and pin that revision).

Every refusal of the request's content is a ``PermanentFailure`` whose message starts with the
request field to fix (:class:`DatasetFields`; a split's field comes with the split); the Hub's
own trouble (408, 429, 5xx, no answer) is a ``TransientFailure``, through the same mapping as the
model look-up (``rlpipe.control.adapters.hub_client.classified_errors``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from rlpipe.control.adapters.hub_client import (
    SHA,
    check_access,
    classified_errors,
    hub_timeout,
    pipeline_token,
)
from rlpipe.core.failures import PermanentFailure, TransientFailure

DATA_EXTENSIONS = (".parquet", ".jsonl", ".json", ".csv")
STAGEABLE = ".parquet"
DEFAULT_SUBSET = "default"
# Names ``datasets`` never takes as data unless a pattern names them (``FILES_TO_IGNORE``).
IGNORED_NAMES = frozenset(
    {
        "README.md",
        "config.json",
        "dataset_info.json",
        "dataset_infos.json",
        "dummy_data.zip",
        "dataset_dict.json",
    }
)
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_SEP = "[-._ 0-9]"  # what may set a split keyword off in a name
_SHARDED = re.compile(r"data/(?P<split>\w+(?:\.\w+)*)-[0-9]{5}-of-[0-9]{5}[^/]*\.[^/]*")


@dataclass(frozen=True)
class DataFile:
    """One file of a split at the pinned sha: its path in the repo, its size, its LFS sha256 (None
    for a file kept in git itself, which the Hub lists by size and git blob id only)."""

    path: str
    size: int
    sha256: str | None


@dataclass(frozen=True)
class DatasetFields:
    """The request fields a refusal names: the dataset's repo, its revision, the subset. A split's
    field is given with the split (``splits={"dataset.train_split": "train"}``)."""

    repo: str = "dataset.repo"
    revision: str = "dataset.revision"
    subset: str = "dataset.subset"


EVAL_FIELDS = DatasetFields(
    repo="dataset.eval_repo", revision="dataset.eval_revision", subset="dataset.eval_subset"
)


@dataclass(frozen=True)
class PinnedDataset:
    """A dataset revision pinned to its commit, with each asked-for split's files at that commit."""

    repo: str
    revision: str
    sha: str
    subset: str
    files: dict[str, tuple[DataFile, ...]]
    num_examples: dict[str, int | None]  # from the card's dataset_info, None where it says nothing
    features: dict[str, Any] | None  # column → dtype (or its spec), from the card; None without one
    gated: bool

    def as_record(self) -> dict[str, Any]:
        """A JSON-safe dict for the ledger; :meth:`from_record` reads it back."""
        return {
            "repo": self.repo,
            "revision": self.revision,
            "sha": self.sha,
            "subset": self.subset,
            "files": {
                split: [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files]
                for split, files in self.files.items()
            },
            "num_examples": dict(self.num_examples),
            "features": self.features,
            "gated": self.gated,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PinnedDataset:
        return cls(
            repo=str(record["repo"]),
            revision=str(record["revision"]),
            sha=str(record["sha"]),
            subset=str(record["subset"]),
            files={
                str(split): tuple(DataFile(str(f["path"]), int(f["size"]), f.get("sha256")) for f in files)
                for split, files in record["files"].items()
            },
            num_examples={str(k): (None if v is None else int(v)) for k, v in record["num_examples"].items()},
            features=record.get("features"),
            gated=bool(record["gated"]),
        )

    def total_bytes(self) -> int:
        return sum(f.size for files in self.files.values() for f in files)


@dataclass(frozen=True)
class _Subset:
    """One subset's splits → data-file patterns (None: the default layout), under ``base``."""

    name: str
    patterns: dict[str, list[str]] | None
    base: str = ""
    card_info: dict[str, Any] = field(default_factory=dict)


def resolve_dataset(
    repo: str,
    revision: str,
    *,
    subset: str | None,
    splits: Mapping[str, str] | Sequence[str],
    token: str | bool | None = None,
    timeout: float | None = None,
    fields: DatasetFields = DatasetFields(),  # frozen: one shared default is safe
) -> PinnedDataset:
    """Pin ``repo`` at ``revision`` (a branch or tag → its commit sha now; a full sha is kept) and
    list the data files of each split of ``subset`` (MaxText's ``hf_subset``; None or "" picks the
    default subset).

    ``splits``: ``{request field: split}``, e.g. ``{"dataset.train_split": "train",
    "dataset.eval_split": "test"}``, so a missing split's message names its field; a plain sequence
    of split names is named ``dataset.split``. ``fields`` names the repo, revision and subset
    fields (:data:`EVAL_FIELDS` for a separate eval dataset).

    Two requests, each bounded by ``timeout`` (default: the ``hub_timeout_seconds`` setting).
    Raises ``PermanentFailure`` (naming the field) or ``TransientFailure``."""
    from huggingface_hub import HfApi

    if isinstance(splits, str):
        raise TypeError("splits is a sequence or a mapping of split names, not one name")
    asked = list(splits.items()) if isinstance(splits, Mapping) else [("dataset.split", s) for s in splits]
    token = pipeline_token() if token is None else token  # False: anonymous (hub_client.plan_token)
    seconds = timeout if timeout is not None else hub_timeout()
    api = HfApi(token=token)
    with classified_errors(repo, revision, seconds, repo_field=fields.repo, revision_field=fields.revision):
        info = api.dataset_info(repo, revision=revision, files_metadata=True, timeout=seconds)
        # Like models: the metadata of a gated dataset is public, its files are not.
        check_access(str(api.endpoint), repo, token=token, timeout=seconds, repo_type="dataset")
    sha = revision if SHA.match(revision) else info.sha
    if not sha or not SHA.match(sha):
        raise TransientFailure(f"Hugging Face returned no commit sha for dataset {repo}@{revision}")
    where = f"{repo}@{sha[:12]}"
    siblings = {s.rfilename: s for s in info.siblings or []}
    card = _card(info.card_data)
    chosen = _subset(card, subset, fields.subset, where)
    split_files = _split_files(chosen, sorted(siblings), where, fields.subset)
    files: dict[str, tuple[DataFile, ...]] = {}
    for split_field, split in asked:
        if split in files:
            continue
        if split not in split_files:
            available = ", ".join(split_files) or "none"
            raise PermanentFailure(
                f"{split_field}: subset {chosen.name!r} of {where} has no split {split!r}; its splits: {available}"
            )
        paths = _stageable(split_files[split], split_field, split, chosen.name, where, fields.revision)
        files[split] = tuple(_data_file(siblings[p], where) for p in paths)
    return PinnedDataset(
        repo=repo,
        revision=revision,
        sha=sha,
        subset=chosen.name,
        files=files,
        num_examples={split: _num_examples(chosen.card_info, split) for split in files},
        features=_features(chosen.card_info),
        gated=bool(info.gated),
    )


# ---- the card ----------------------------------------------------------------------------------


def _card(card_data: Any) -> dict[str, Any]:
    if card_data is None:
        return {}
    raw = card_data.to_dict() if hasattr(card_data, "to_dict") else card_data
    return raw if isinstance(raw, dict) else {}


def _card_info(card: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The ``dataset_info`` entry of subset ``name``: a list with ``config_name`` per entry, or one
    mapping (whose ``config_name``, if absent, is "default")."""
    raw = card.get("dataset_info")
    entries = raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("config_name", DEFAULT_SUBSET) == name:
            return entry
    if isinstance(raw, dict) and "config_name" not in raw and len(entries) == 1:
        return raw
    return {}


def _num_examples(info: Mapping[str, Any], split: str) -> int | None:
    for entry in info.get("splits") or []:
        if (
            isinstance(entry, dict)
            and entry.get("name") == split
            and isinstance(entry.get("num_examples"), int)
        ):
            return int(entry["num_examples"])
    return None


def _features(info: Mapping[str, Any]) -> dict[str, Any] | None:
    """Column → its ``dtype`` (a plain type), or the rest of its spec (``sequence``, ``list``, …)."""
    raw = info.get("features")
    if isinstance(raw, dict):
        return dict(raw)
    if not isinstance(raw, list):
        return None
    out: dict[str, Any] = {}
    for entry in raw:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            rest = {k: v for k, v in entry.items() if k != "name"}
            out[entry["name"]] = rest["dtype"] if set(rest) == {"dtype"} else rest
    return out


def _patterns(data_files: Any) -> dict[str, list[str]] | None:
    """A config's ``data_files`` → split → patterns, in the shapes ``datasets`` takes."""
    if data_files is None:
        return None
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, Mapping):
        return {str(k): [str(p) for p in (v if isinstance(v, list) else [v])] for k, v in data_files.items()}
    if isinstance(data_files, list) and all(isinstance(p, str) for p in data_files):
        return {"train": list(data_files)}
    if isinstance(data_files, list):
        out: dict[str, list[str]] = {}
        for entry in data_files:
            if isinstance(entry, Mapping) and "split" in entry and isinstance(entry.get("path"), str | list):
                path = entry["path"]
                out.setdefault(str(entry["split"]), []).extend(
                    str(p) for p in (path if isinstance(path, list) else [path])
                )
        return out
    return {}


def _subset(card: Mapping[str, Any], asked: str | None, subset_field: str, where: str) -> _Subset:
    raw = card.get("configs")
    configs = {
        str(entry["config_name"]): entry
        for entry in (raw if isinstance(raw, list) else [])
        if isinstance(entry, Mapping) and entry.get("config_name") is not None
    }
    if not configs:  # the default layout only
        if asked and asked != DEFAULT_SUBSET:
            raise PermanentFailure(
                f"{subset_field}: {where} has no subset {asked!r}; its card defines no configs, so its "
                f"only subset is {DEFAULT_SUBSET!r}"
            )
        return _Subset(DEFAULT_SUBSET, None, "", _card_info(card, DEFAULT_SUBSET))
    if asked:
        if asked not in configs:
            raise PermanentFailure(
                f"{subset_field}: {where} has no subset {asked!r}; its subsets: {', '.join(configs)}"
            )
        name = asked
    else:
        marked = [n for n, entry in configs.items() if entry.get("default") is True]
        candidates = marked or ([DEFAULT_SUBSET] if DEFAULT_SUBSET in configs else list(configs))
        if len(candidates) != 1:
            raise PermanentFailure(
                f"{subset_field}: {where} has several subsets and none is the default; name one of: "
                f"{', '.join(configs)}"
            )
        name = candidates[0]
    entry = configs[name]
    base = str(entry.get("data_dir") or "").strip("/")
    return _Subset(name, _patterns(entry.get("data_files")), base, _card_info(card, name))


# ---- files -------------------------------------------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """fsspec's glob as ``datasets`` uses it: ``*``/``?`` within a segment, ``[…]`` a class, a
    whole ``**`` segment any number of directories (at the end: anything below)."""
    segments = pattern.strip("/").split("/")
    out = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(out))


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1  # ``**`` inside a segment is ``*`` (fsspec ≥ 2023.12)
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[" and segment.find("]", i + 1) > i + 1:
            end = segment.find("]", i + 1)
            body = segment[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^/" if negate else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _hidden(parts: Iterable[str]) -> int:
    return sum(1 for p in parts if p.startswith(".") and set(p) != {"."})


def _requested(path: str, pattern: str) -> bool:
    """``datasets`` skips hidden parts and ``__`` directories unless the pattern has as many."""
    p, q = PurePosixPath(path), PurePosixPath(pattern)
    if _hidden(p.parts) != _hidden(q.parts):
        return False
    special = sum(1 for part in p.parent.parts if part.startswith("__"))
    if special != sum(1 for part in q.parent.parts if part.startswith("__")):
        return False
    return p.name not in IGNORED_NAMES or p.name == q.name


def _glob(pattern: str, paths: Sequence[str]) -> list[str]:
    regex = _glob_regex(pattern)
    return [p for p in paths if regex.fullmatch(p) and _requested(p, pattern)]


def _is_data(path: str) -> bool:
    return path.lower().endswith(DATA_EXTENSIONS)


def _default_layout(paths: Sequence[str]) -> dict[str, list[str]]:
    candidates = [p for p in _glob("**", paths) if _is_data(p)]
    sharded: dict[str, list[str]] = {}
    for path in candidates:
        found = _SHARDED.fullmatch(path)
        if found:
            sharded.setdefault(found["split"], []).append(path)
    if sharded:
        return sharded
    in_dir = (
        "**/{k}/**",
        "**/{k}" + _SEP + "*/**",
        "**/*" + _SEP + "{k}/**",
        "**/*" + _SEP + "{k}" + _SEP + "*/**",
    )
    in_name = ("**/{k}" + _SEP + "*", "**/*" + _SEP + "{k}" + _SEP + "*")
    for level in (in_dir, in_name):
        found_splits = {}
        for split, keywords in SPLIT_KEYWORDS.items():
            matched = {
                p for k in keywords for pattern in level for p in _glob(pattern.format(k=k), candidates)
            }
            if matched:
                found_splits[split] = sorted(matched)
        if found_splits:
            return found_splits
    return {"train": candidates} if candidates else {}


def _split_files(
    chosen: _Subset, paths: Sequence[str], where: str, subset_field: str
) -> dict[str, list[str]]:
    """Split → the repo paths of its files (data files only, sorted), for the chosen subset."""
    prefix = chosen.base + "/" if chosen.base else ""
    inside = [p[len(prefix) :] for p in paths if p.startswith(prefix)]
    if chosen.patterns is None:
        relative = _default_layout(inside)
    else:
        relative = {}
        for split, patterns in chosen.patterns.items():
            matched: set[str] = set()
            for pattern in patterns:
                found = _glob(pattern.removeprefix("./"), inside)
                if not found and not re.search(r"[*?\[]", pattern):
                    raise PermanentFailure(
                        f"{subset_field}: the card of {where} puts {pattern!r} in split {split!r} of subset "
                        f"{chosen.name!r}, and there is no such file: the dataset's card is broken at this revision"
                    )
                matched.update(found)
            relative[split] = sorted(matched)
    return {split: [prefix + p for p in found] for split, found in relative.items()}


def _stageable(
    paths: list[str], split_field: str, split: str, subset: str, where: str, revision_field: str
) -> list[str]:
    data = [p for p in paths if _is_data(p)]
    if not data:
        seen = f"; it matches only {', '.join(paths[:5])}" if paths else ""
        raise PermanentFailure(
            f"{split_field}: split {split!r} of subset {subset!r} in {where} has no data files "
            f"(parquet, jsonl, json or csv){seen}"
        )
    other = sorted({PurePosixPath(p).suffix.lower() for p in data if not p.lower().endswith(STAGEABLE)})
    if other:
        raise PermanentFailure(
            f"{split_field}: split {split!r} of subset {subset!r} in {where} is stored as {', '.join(other)}, "
            f"and MaxText reads staged files as parquet only: convert the split to parquet (datasets' "
            f"push_to_hub writes parquet) and set {revision_field} to that commit"
        )
    return data


def _data_file(sibling: Any, where: str) -> DataFile:
    if sibling.size is None:
        raise TransientFailure(f"Hugging Face listed {sibling.rfilename} of {where} without its size")
    lfs = sibling.lfs
    return DataFile(sibling.rfilename, int(sibling.size), lfs.sha256 if lfs is not None else None)
