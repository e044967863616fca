"""``plan`` pins the run's datasets as it pins the model: each revision to a commit, each split to
its files at that commit, checked readable with the pipeline's token, before any workload exists.

What is recorded (``lineage.data``) is what the head's first step stages and checks
(``core.staging``): ``{"train": …, "eval": …}``, each one split of one dataset at one commit with
every file's size and sha256. The evaluation entry is absent when train_rl splits its evaluation
examples off the training split itself (``staging.splits_itself``).

A dataset MaxText's built-in ``process_data`` cannot read is refused here too, when the card says
what its columns are: that function takes the question from the first of ``problem``, ``prompt``,
``question`` and the answer from the first of ``answer``, ``solution``, ``expected_answer``
(maxtext 0.2.4 ``utils_rl.py:738-746``), and a dataset with neither fails inside the training pod
with an ``UnboundLocalError`` hours after the TPUs were held.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rlpipe.control.adapters import hub_datasets
from rlpipe.core import staging
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.request import Request

QUESTION_COLUMNS = ("problem", "prompt", "question")
ANSWER_COLUMNS = ("answer", "solution", "expected_answer")

Resolve = Callable[..., hub_datasets.PinnedDataset]


def _entry(pinned: hub_datasets.PinnedDataset, split: str) -> dict[str, Any]:
    record = pinned.as_record()
    return {
        "repo": record["repo"],
        "revision": record["revision"],
        "sha": record["sha"],
        "subset": record["subset"],
        "split": split,
        "files": record["files"][split],
        "num_examples": record["num_examples"].get(split),
        "features": record["features"],
        "gated": record["gated"],
    }


def _builtin_problems(pinned: hub_datasets.PinnedDataset, repo_field: str) -> None:
    columns = set(pinned.features or {})
    if not columns:
        return  # the card does not say; train_rl will
    missing = [
        f"one of {', '.join(names)}"
        for names in (QUESTION_COLUMNS, ANSWER_COLUMNS)
        if not columns.intersection(names)
    ]
    if missing:
        raise PermanentFailure(
            f"{repo_field}: {pinned.repo}@{pinned.sha[:12]} has columns {', '.join(sorted(columns))}, and "
            f"MaxText's built-in processor needs {' and '.join(missing)}: add dataset.processor (a "
            "process_data of yours; the deployment must allow user code), or pick a dataset with "
            "question and answer columns"
        )


def pin(req: Request, resolve: Resolve = hub_datasets.resolve_dataset, **hub: Any) -> dict[str, Any]:
    """The run's datasets at their commits (``lineage.data``). Raises ``PermanentFailure`` naming
    the field (a missing subset or split, no access, a dataset the built-in processor cannot read)
    or ``TransientFailure`` (the Hub did not answer)."""
    d = req.dataset
    evaluates = not staging.splits_itself(d.repo, d.evaluated_repo)
    same = (
        d.evaluated_repo == d.repo and d.evaluated_revision == d.revision and d.evaluated_subset == d.subset
    )
    splits: dict[str, str] = {"dataset.train_split": d.train_split}
    if evaluates and same:
        splits["dataset.eval_split"] = d.eval_split
    train = resolve(d.repo, d.revision, subset=d.subset, splits=splits, **hub)
    out: dict[str, Any] = {"train": _entry(train, d.train_split)}
    if d.processor is None:
        _builtin_problems(train, "dataset.repo")
    if not evaluates:
        return out
    if same:
        out["eval"] = _entry(train, d.eval_split)
        return out
    evaluated = resolve(
        d.evaluated_repo,
        d.evaluated_revision,
        subset=d.evaluated_subset,
        splits={"dataset.eval_split": d.eval_split},
        fields=hub_datasets.EVAL_FIELDS,
        **hub,
    )
    if d.processor is None:
        _builtin_problems(evaluated, "dataset.eval_repo")
    out["eval"] = _entry(evaluated, d.eval_split)
    return out


def summary(data: Mapping[str, Any] | None) -> list[str]:
    """One line per pinned split, for ``status`` and ``plan``: repo@commit, subset, split, files."""
    lines = []
    for role in staging.ROLES:
        e = (data or {}).get(role)
        if not e:
            continue
        size = sum(int(f["size"]) for f in e.get("files") or [])
        examples = e.get("num_examples")
        count = f", {examples} examples" if isinstance(examples, int) else ""
        lines.append(
            f"{role}: {e['repo']}@{str(e['sha'])[:12]} ({e['revision']}) subset {e['subset']} split "
            f"{e['split']}: {len(e.get('files') or [])} files, {size} bytes{count}"
        )
    return lines
