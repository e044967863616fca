"""What train_rl measured, as the model card shows it: a table people read, a model-index the Hub renders.

MaxText 0.2.4's ``train_rl`` evaluates the model itself, before and after training, on its
evaluation set (``evaluate_rl.evaluate``: ``corr``, ``total`` and three accuracies in percent, plus
the mean reward; ``rlpipe.core.train_log`` reads them from its log). ``corr`` and ``total`` are
counts, not metrics: the card says how many examples were evaluated once, and shows the accuracies
in % and the mean reward.

The ``model-index`` block (spec: https://github.com/huggingface/hub-docs/blob/main/modelcard.md,
rendered as "Evaluation results": https://huggingface.co/docs/hub/model-cards#evaluation-results)
holds the post-training values only: they describe this model, the pre-training ones its base.
Each entry names the task, the dataset at its config and split, and the metric.

The evaluation set, a plain dict (``rlpipe.control.lifecycle.publishing.evaluation_set`` derives it from the
request): ``dataset`` (a Hub dataset id), ``subset``, ``split``, ``sha`` (the commit plan pinned it
to); ``held_out`` when train_rl split the evaluation examples off the training split itself;
``data_files`` when they came from parquet files instead of a Hub dataset. The pinned commit is the
model-index's ``dataset.revision`` (``EvalResult.dataset_revision``; hub-docs ``modelcard.md``:
"revision: {dataset_revision}  # Optional. Example: 5503434d…"), so the Hub's evaluation results
name the exact bytes train_rl evaluated on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from huggingface_hub import EvalResult

# train_rl answers questions in text (GSM8K-style prompts), whatever else the model can do: the
# evaluation's task is text generation even for an image-text-to-text base model.
TASK_TYPE, TASK_NAME = "text-generation", "Text Generation"
# The evaluation fields people read, in the card's order: key → (name, unit).
METRICS: dict[str, tuple[str, str]] = {
    "accuracy": ("Accuracy", "%"),
    "partial_accuracy": ("Partial accuracy", "%"),
    "format_accuracy": ("Format accuracy", "%"),
    "mean_reward": ("Mean reward", ""),
}
HELD_OUT_SHARE = "5%"  # train_rl.py: prepare_train_and_eval_dataset(test_size=0.05)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def number(value: float) -> str:
    """Four significant digits, as train_rl's own mean_reward: 33.33333333333333 → 33.33."""
    return f"{value:.4g}"


def examples(rewards: Mapping[str, Any]) -> int | None:
    """How many examples the post-training evaluation scored (the pre-training one's without it)."""
    for when in ("post", "pre"):
        total = (rewards.get(when) or {}).get("total")
        if isinstance(total, int) and not isinstance(total, bool):
            return total
    return None


def rows(rewards: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per metric train_rl printed: before, after, and the change (in percentage points
    for a percentage, so +25 pp is never read as a relative 25%)."""
    pre, post = rewards.get("pre") or {}, rewards.get("post") or {}
    out = []
    for key, (name, unit) in METRICS.items():
        before, after = _finite(pre.get(key)), _finite(post.get(key))
        if before is None and after is None:
            continue
        change = "—"
        if before is not None and after is not None:
            change = f"{after - before:+.4g}{' pp' if unit else ''}"
        out.append(
            {
                "name": name,
                "before": "—" if before is None else f"{number(before)}{unit}",
                "after": "—" if after is None else f"{number(after)}{unit}",
                "change": change,
            }
        )
    return out


def where(evaluation: Mapping[str, Any]) -> str:
    """The evaluation set in words (markdown), or "" when the facts do not name one."""
    split, dataset, files = evaluation.get("split"), evaluation.get("dataset"), evaluation.get("data_files")
    if files:
        return f"the `{split}` split of the parquet files `{files}`"
    if not dataset or not split:
        return ""
    link = f"[{dataset}](https://huggingface.co/datasets/{dataset})"
    subset = f" (subset `{evaluation['subset']}`)" if evaluation.get("subset") else ""
    if evaluation.get("held_out"):
        return f"the {HELD_OUT_SHARE} of the `{split}` split of {link}{subset} that train_rl held out of training"
    return f"the `{split}` split of {link}{subset}"


def _dataset(evaluation: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model-index ``dataset`` of the evaluation set (as EvalResult's fields), or None."""
    split, dataset, files = evaluation.get("split"), evaluation.get("dataset"), evaluation.get("data_files")
    if not split or not (dataset or files):
        return None
    if files:  # datasets.load_dataset("parquet", data_files=...): no Hub id to name
        return {"dataset_type": "parquet", "dataset_name": str(files), "dataset_split": str(split)}
    held_out = f" ({HELD_OUT_SHARE} held out of training by train_rl)" if evaluation.get("held_out") else ""
    return {
        "dataset_type": str(dataset),
        "dataset_name": str(dataset).rsplit("/", 1)[-1],
        "dataset_config": str(evaluation.get("subset") or "") or None,
        "dataset_split": f"{split}{held_out}",
        "dataset_revision": str(evaluation.get("sha") or "") or None,
    }


def eval_results(rewards: Mapping[str, Any], evaluation: Mapping[str, Any]) -> list[EvalResult]:
    """The post-training values as model-index entries; none when no example was evaluated (train_rl
    prints 0% for an empty evaluation, which is no measurement) or the set is unknown."""
    dataset = _dataset(evaluation)
    post = rewards.get("post") or {}
    if dataset is None or not examples(rewards):
        return []
    results = []
    for key, (name, unit) in METRICS.items():
        value = _finite(post.get(key))
        if value is not None:
            results.append(
                EvalResult(
                    task_type=TASK_TYPE,
                    task_name=TASK_NAME,
                    metric_type=key,
                    metric_name=f"{name} ({unit})" if unit else name,
                    metric_value=round(value, 4),
                    **dataset,
                )
            )
    return results
