"""The datasets the Hub double is seeded with, laid out as ``datasets.push_to_hub`` lays them out.

Synthetic rows in the real datasets' columns (openai/gsm8k, open-r1/OpenR1-Math-220k, a gated one),
deterministic in split and index, so a run on the local stack trains on data shaped like the real
thing. ``rlpipe.local.hub_double.parquet`` writes the files, ``rlpipe.local.hub_double.data`` holds the repos.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any

import yaml

from rlpipe.local.hub_double.data import GITATTRIBUTES, HubFile
from rlpipe.local.hub_double.parquet import Cell, dtype_of, parquet_bytes

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


KNOWN_DATASETS: dict[str, Callable[[dict[str, int] | None], dict[str, HubFile]]] = {
    "openai/gsm8k": gsm8k_files,
    "open-r1/OpenR1-Math-220k": openr1_math_files,
    GATED_DATASET: gated_math_files,
}
