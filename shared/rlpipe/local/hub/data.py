"""The Hub double's data: repositories, commits, files, and the knobs that make it misbehave.

Plain data, no I/O; ``rlpipe.local.hub`` serves it, ``rlpipe.local.hub.routes`` (reads) and
``rlpipe.local.hub.writes`` (uploads) answer requests, ``rlpipe.local.hub.store`` keeps uploaded bytes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml

INDEX = "model.safetensors.index.json"


def stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class HubFile:
    name: str
    size: int
    sha256: str | None = None  # LFS files only
    content: bytes | None = None  # served by /resolve; None = a small placeholder body
    blob: str | None = None  # uploaded files: the sha256 naming their bytes in ``rlpipe.local.hub.store``
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

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None

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


# ---- parquet, written by hand ---------------------------------------------------------------------
#
# pyarrow is not a dependency of the project, so the double writes parquet itself: one row group,
# one uncompressed PLAIN data page (v1) per column, every column REQUIRED (so no definition or
# repetition levels), the footer in Thrift's compact protocol. Field ids and enum values are those
# of the format's parquet.thrift (https://github.com/apache/parquet-format/blob/master/src/main/
# thrift/parquet.thrift): FileMetaData 1 version, 2 schema, 3 num_rows, 4 row_groups, 6 created_by;
# SchemaElement 1 type, 3 repetition_type, 4 name, 5 num_children, 6 converted_type, 10 logicalType;
# RowGroup 1 columns, 2 total_byte_size, 3 num_rows; ColumnChunk 2 file_offset, 3 meta_data;
# ColumnMetaData 1 type, 2 encodings, 3 path_in_schema, 4 codec, 5 num_values, 6/7 sizes,
# 9 data_page_offset; PageHeader 1 type, 2/3 sizes, 5 data_page_header (num_values, encoding,
# definition/repetition level encodings). Types BOOLEAN 0, INT64 2, BYTE_ARRAY 6; REQUIRED 0;
# ConvertedType UTF8 0; Encoding PLAIN 0, RLE 3; codec UNCOMPRESSED 0; page DATA_PAGE 0. The compact
# protocol (https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md):
# field header (id delta << 4 | type), zigzag varints, list header (size << 4 | element type),
# struct stop byte 0. Checked by reading the files back with pyarrow 26.0.1 (not installed here).

_T_I32, _T_I64, _T_BINARY, _T_LIST, _T_STRUCT = 5, 6, 8, 9, 12
_PARQUET_BOOLEAN, _PARQUET_INT64, _PARQUET_BYTE_ARRAY = 0, 2, 6
_MAGIC = b"PAR1"

Cell = str | int | bool


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _thrift_value(kind: int, value: Any) -> bytes:
    if kind in (_T_I32, _T_I64):
        return _varint((value << 1) ^ (value >> 63))  # zigzag
    if kind == _T_BINARY:
        raw = value.encode() if isinstance(value, str) else value
        return _varint(len(raw)) + raw
    if kind == _T_STRUCT:
        return _thrift_struct(value)
    if kind == _T_LIST:
        element, items = value
        head = (
            bytes([len(items) << 4 | element])
            if len(items) < 15
            else bytes([0xF0 | element]) + _varint(len(items))
        )
        return head + b"".join(_thrift_value(element, item) for item in items)
    raise ValueError(f"thrift type {kind} is not written here")


def _thrift_struct(fields: list[tuple[int, int, Any]]) -> bytes:
    """A struct from (field id, compact type, value) in ascending id order; None values are left out."""
    out, last = bytearray(), 0
    for fid, kind, value in fields:
        if value is None:
            continue
        if not 0 < fid - last <= 15:
            raise ValueError("field ids must ascend by at most 15")
        out.append((fid - last) << 4 | kind)
        out += _thrift_value(kind, value)
        last = fid
    out.append(0)
    return bytes(out)


DTYPES = {"bool": _PARQUET_BOOLEAN, "int64": _PARQUET_INT64, "string": _PARQUET_BYTE_ARRAY}


def dtype_of(values: list[Cell]) -> str:
    """The ``datasets`` dtype of a column's values: "bool", "int64" or "string" (empty: "string")."""
    if values and all(isinstance(v, bool) for v in values):
        return "bool"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int64"
    if all(isinstance(v, str) for v in values):
        return "string"
    raise ValueError("a column holds str, int or bool values, one type per column")


def _plain(values: list[Cell], dtype: str) -> tuple[int, bytes]:
    """A column's parquet physical type and its PLAIN-encoded values."""
    if dtype == "bool":
        bits = bytearray((len(values) + 7) // 8)
        for i, v in enumerate(values):
            if v:
                bits[i // 8] |= 1 << (i % 8)
        return _PARQUET_BOOLEAN, bytes(bits)
    if dtype == "int64":
        return _PARQUET_INT64, b"".join(int(v).to_bytes(8, "little", signed=True) for v in values)
    if dtype == "string":
        raws = [str(v).encode() for v in values]
        return _PARQUET_BYTE_ARRAY, b"".join(len(r).to_bytes(4, "little") + r for r in raws)
    raise ValueError(f"the double writes {sorted(DTYPES)} columns, not {dtype!r}")


def parquet_bytes(columns: dict[str, list[Cell]], dtypes: dict[str, str] | None = None) -> bytes:
    """A parquet file of these columns (all the same length): strings, int64s or booleans, no nulls.

    ``dtypes`` (``datasets`` names: "string", "int64", "bool") types a column; by default its values
    do, and an empty column is a string column."""
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        raise ValueError("every column needs the same number of rows")
    rows = lengths.pop()
    out = bytearray(_MAGIC)
    chunks, schema = [], [[(4, _T_BINARY, "schema"), (5, _T_I32, len(columns))]]
    for name, values in columns.items():
        physical, data = _plain(values, (dtypes or {}).get(name) or dtype_of(values))
        page_header = _thrift_struct(
            [
                (1, _T_I32, 0),
                (2, _T_I32, len(data)),
                (3, _T_I32, len(data)),
                (5, _T_STRUCT, [(1, _T_I32, rows), (2, _T_I32, 0), (3, _T_I32, 3), (4, _T_I32, 3)]),
            ]
        )
        offset, size = len(out), len(page_header) + len(data)
        out += page_header + data
        meta = [
            (1, _T_I32, physical),
            (2, _T_LIST, (_T_I32, [0, 3])),
            (3, _T_LIST, (_T_BINARY, [name])),
            (4, _T_I32, 0),
            (5, _T_I64, rows),
            (6, _T_I64, size),
            (7, _T_I64, size),
            (9, _T_I64, offset),
        ]
        chunks.append([(2, _T_I64, offset), (3, _T_STRUCT, meta)])
        text = physical == _PARQUET_BYTE_ARRAY
        schema.append(
            [
                (1, _T_I32, physical),
                (3, _T_I32, 0),
                (4, _T_BINARY, name),
                (6, _T_I32, 0 if text else None),
                (10, _T_STRUCT, [(1, _T_STRUCT, [])] if text else None),  # LogicalType STRING
            ]
        )
    row_group = [(1, _T_LIST, (_T_STRUCT, chunks)), (2, _T_I64, len(out) - 4), (3, _T_I64, rows)]
    footer = _thrift_struct(
        [
            (1, _T_I32, 1),
            (2, _T_LIST, (_T_STRUCT, schema)),
            (3, _T_I64, rows),
            (4, _T_LIST, (_T_STRUCT, [row_group])),
            (6, _T_BINARY, "rlpipe hub double"),
        ]
    )
    return bytes(out + footer + len(footer).to_bytes(4, "little") + _MAGIC)


# ---- dataset repositories as ``datasets.push_to_hub`` lays them out ------------------------------
#
# ``push_to_hub`` writes ``{dir}/{split}-NNNNN-of-NNNNN.parquet`` (``dir`` is ``data`` for the
# "default" config, else the config's name) and a card whose YAML has ``configs`` (hub-docs
# datasets-manual-configuration: ``config_name``, ``data_files: [{split, path}]``, an optional
# ``default: true``) and ``dataset_info`` (features, splits with ``num_examples``), as the real
# openai/gsm8k card has since its parquet conversion (commits 2c868b8 and 60b4b82 on the Hub:
# configs main and socratic, paths ``main/train-*``, ``main/test-*``, ``socratic/…``).

Rows = list[dict[str, Cell]]


def _columns(rows: Rows, names: list[str]) -> dict[str, list[Cell]]:
    return {name: [row[name] for row in rows] for name in names}


def _num_bytes(columns: dict[str, list[Cell]], dtypes: dict[str, str]) -> int:
    """The double's stand-in for ``num_bytes`` (Arrow's in-memory size): string bytes plus a 4-byte
    offset per value, 8 bytes per int64, 1 per bool."""
    total = 0
    for name, values in columns.items():
        kind = dtypes[name]
        total += (
            sum(len(str(v).encode()) + 4 for v in values)
            if kind == "string"
            else len(values) * (8 if kind == "int64" else 1)
        )
    return total


def config_dir(config: str) -> str:
    """The directory ``push_to_hub`` gives a config's files."""
    return "data" if config == "default" else config


def dataset_files(
    tables: dict[str, dict[str, Rows]],
    *,
    columns: list[str] | None = None,
    dtypes: dict[str, str] | None = None,
    shards: int = 1,
    configs_in_card: bool = True,
    default_config: str | None = None,
    card_meta: dict[str, Any] | None = None,
    title: str = "A dataset on the Hub double",
) -> dict[str, HubFile]:
    """A dataset repository's files: per config and split, ``shards`` parquet files (LFS, with their
    sha256) holding ``tables[config][split]``'s rows; a README whose YAML has ``configs`` and
    ``dataset_info`` (or, with ``configs_in_card=False``, neither: the files then follow only the
    default layout ``data/{split}-NNNNN-of-NNNNN.parquet``); and ``.gitattributes``.

    ``columns`` orders the columns (default: the first row's keys); ``dtypes`` types them ("string",
    "int64", "bool"; default: from the values, which an empty split needs)."""
    names = columns or next(
        (list(rows[0]) for splits in tables.values() for rows in splits.values() if rows), []
    )
    if not names:
        raise ValueError("name the columns of a dataset without rows")
    files: dict[str, HubFile] = {".gitattributes": HubFile.of(".gitattributes", GITATTRIBUTES)}
    infos, configs = [], []
    for config, splits in tables.items():
        folder = config_dir(config)
        split_infos, data_files = [], []
        kinds: dict[str, str] = {}
        download = 0
        for split, rows in splits.items():
            table = _columns(rows, names)
            kinds = {n: (dtypes or {}).get(n) or dtype_of(table[n]) for n in names}
            per = -(-len(rows) // shards) if rows else 0
            for i in range(shards):
                part = {n: values[i * per : (i + 1) * per] for n, values in table.items()}
                raw = parquet_bytes(part, kinds)
                name = f"{folder}/{split}-{i:05d}-of-{shards:05d}.parquet"
                files[name] = HubFile(name, len(raw), hashlib.sha256(raw).hexdigest(), raw)
                download += len(raw)
            split_infos.append(
                {"name": split, "num_bytes": _num_bytes(table, kinds), "num_examples": len(rows)}
            )
            data_files.append({"split": split, "path": f"{folder}/{split}-*"})
        info: dict[str, Any] = {
            "config_name": config,
            "features": [{"name": n, "dtype": kinds.get(n, "string")} for n in names],
            "splits": split_infos,
            "download_size": download,
            "dataset_size": sum(s["num_bytes"] for s in split_infos),
        }
        infos.append(info)
        entry: dict[str, Any] = {"config_name": config, "data_files": data_files}
        if config == default_config:
            entry["default"] = True
        configs.append(entry)
    meta: dict[str, Any] = dict(card_meta or {})
    if configs_in_card:
        meta["configs"] = configs
        meta["dataset_info"] = infos
    header = f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n\n" if meta else ""
    body = f"# {title}\n\nSynthetic rows in the real dataset's columns, made by the rlpipe Hub double.\n"
    files["README.md"] = HubFile.of("README.md", header + body)
    return files


_NAMES = ("Mara", "Tomas", "Ines", "Kofi", "Lena", "Ravi", "Yuki", "Omar")


def _numbers(split: str, i: int, count: int) -> list[int]:
    digest = hashlib.sha256(f"{split}/{i}".encode()).digest()
    return [2 + digest[k] % 23 for k in range(count)]


def gsm8k_row(split: str, i: int, *, socratic: bool = False) -> dict[str, Cell]:
    """One grade-school word problem in GSM8K's shape: ``question``, and an ``answer`` whose steps
    carry ``<<expr=value>>`` calculator notes and end with ``#### <number>``; the socratic subset puts
    a sub-question before each step (``question ** step``). Made up here, deterministic in (split, i)."""
    name = _NAMES[i % len(_NAMES)]
    a, b, c = _numbers(split, i, 3)
    kind = i % 3
    if kind == 0:
        total, left = a * b, a * b - c
        question = (
            f"{name} picks {a} apples every morning for {b} days, then gives {c} apples to a neighbour. "
            f"How many apples does {name} have left?"
        )
        steps = [
            (
                f"How many apples does {name} pick?",
                f"{name} picks {a}*{b} = <<{a}*{b}={total}>>{total} apples.",
            ),
            (
                "How many apples are left?",
                f"After the gift {total}-{c} = <<{total}-{c}={left}>>{left} apples are left.",
            ),
        ]
        result = left
    elif kind == 1:
        cost, bill = a * b, (a * b // 10 + 1) * 10 + c
        result = bill - cost
        question = (
            f"Pencils cost ${a} each. {name} buys {b} pencils and pays with ${bill}. "
            f"How much change does {name} get back?"
        )
        steps = [
            (
                "How much do the pencils cost?",
                f"The pencils cost {a}*{b} = <<{a}*{b}={cost}>>{cost} dollars.",
            ),
            (
                "How much is the change?",
                f"The change is {bill}-{cost} = <<{bill}-{cost}={result}>>{result} dollars.",
            ),
        ]
    else:
        tuesday, read = 2 * a, 3 * a
        pages = read + b * c
        result = pages - read
        question = (
            f"{name} reads {a} pages on Monday and twice as many on Tuesday. The book has {pages} pages. "
            f"How many pages are still to read?"
        )
        steps = [
            (
                f"How many pages does {name} read on Tuesday?",
                f"On Tuesday {name} reads 2*{a} = <<2*{a}={tuesday}>>{tuesday} pages.",
            ),
            (
                "How many pages are read so far?",
                f"So far {a}+{tuesday} = <<{a}+{tuesday}={read}>>{read} pages are read.",
            ),
            (
                "How many pages are left?",
                f"That leaves {pages}-{read} = <<{pages}-{read}={result}>>{result} pages.",
            ),
        ]
    lines = [f"{q} ** {s}" if socratic else s for q, s in steps]
    return {"question": question, "answer": "\n".join(lines) + f"\n#### {result}"}


def gsm8k_files(
    rows: dict[str, int] | None = None, *, configs: tuple[str, ...] = ("main", "socratic")
) -> dict[str, HubFile]:
    """``openai/gsm8k`` as the Hub has it: configs main and socratic, splits train and test
    (``rows`` per split, default 64 and 24), columns question and answer, both strings."""
    counts = {"train": 64, "test": 24, **(rows or {})}
    tables = {
        config: {
            split: [gsm8k_row(split, i, socratic=config == "socratic") for i in range(n)]
            for split, n in counts.items()
        }
        for config in configs
    }
    meta = {"license": "mit", "language": ["en"], "pretty_name": "Grade School Math 8K"}
    return dataset_files(tables, columns=["question", "answer"], card_meta=meta, title="GSM8K (double)")


OPENR1_COLUMNS = [
    "problem",
    "solution",
    "answer",
    "problem_type",
    "question_type",
    "source",
    "uuid",
    "correctness_count",
]


def openr1_math_row(split: str, i: int) -> dict[str, Cell]:
    """A competition-style problem with a worked solution ending in ``\\boxed{}``, in the string
    columns of open-r1/OpenR1-Math-220k's card (problem, solution, answer, problem_type,
    question_type, source, uuid) plus its int64 ``correctness_count``; its list columns
    (generations, messages, …) are left out. Made up here, deterministic in (split, i)."""
    a, b, c = _numbers(f"r1/{split}", i, 3)
    if i % 2 == 0:
        answer = a * a
        problem = f"Find the sum of the first {a} positive odd integers."
        solution = (
            f"The first {a} odd integers are 1, 3, ..., {2 * a - 1}. Adding the k-th smallest to the k-th largest "
            f"gives {2 * a} each time, and there are {a} such sums counted twice, so the total is "
            f"{a}*{2 * a}/2 = {answer}. Hence the answer is $\\boxed{{{answer}}}$."
        )
        kind = "Algebra"
    else:
        answer = (a * b) % c
        problem = f"What is the remainder when {a} times {b} is divided by {c}?"
        solution = f"We have {a}*{b} = {a * b}, and {a * b} = {c}*{a * b // c} + {answer}. So the remainder is $\\boxed{{{answer}}}$."
        kind = "Number Theory"
    return {
        "problem": problem,
        "solution": solution,
        "answer": str(answer),
        "problem_type": kind,
        "question_type": "math-word-problem",
        "source": "olympiads" if i % 3 else "amc_aime",
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"rlpipe-double/openr1/{split}/{i}")),
        "correctness_count": 1 + i % 4,
    }


def openr1_math_files(rows: dict[str, int] | None = None, *, shards: int = 2) -> dict[str, HubFile]:
    """``open-r1/OpenR1-Math-220k`` as its card has it: configs ``default`` (``data/train-*``) and
    ``extended`` (``extended/train-*``), a ``train`` split only, in ``shards`` parquet files each.
    ``rows`` counts the split per config: ``{"default": 48, "extended": 32}`` by default (the real
    config "all", with splits named default and extended, is left out)."""
    counts = {"default": 48, "extended": 32, **(rows or {})}
    tables = {
        config: {"train": [openr1_math_row(config, i) for i in range(n)]} for config, n in counts.items()
    }
    dtypes = {name: "string" for name in OPENR1_COLUMNS} | {"correctness_count": "int64"}
    meta = {"license": "apache-2.0", "language": ["en"]}
    return dataset_files(
        tables,
        columns=OPENR1_COLUMNS,
        dtypes=dtypes,
        shards=shards,
        card_meta=meta,
        title="OpenR1-Math-220k (double)",
    )


GATED_DATASET = "rlpipe-double/gated-math"


def gated_math_files(rows: dict[str, int] | None = None) -> dict[str, HubFile]:
    """A gated dataset with no ``configs`` in its card: only the default layout places its files
    (``data/train-00000-of-00001.parquet``, ``data/test-…``), in GSM8K's columns."""
    counts = {"train": 32, "test": 16, **(rows or {})}
    tables = {
        "default": {split: [gsm8k_row(f"gated/{split}", i) for i in range(n)] for split, n in counts.items()}
    }
    meta = {"license": "other", "extra_gated_prompt": "Accept the terms to read these files."}
    return dataset_files(
        tables,
        columns=["question", "answer"],
        configs_in_card=False,
        card_meta=meta,
        title="Gated math (double)",
    )


KNOWN_DATASETS = {
    "openai/gsm8k": gsm8k_files,
    "open-r1/OpenR1-Math-220k": openr1_math_files,
    GATED_DATASET: gated_math_files,
}
