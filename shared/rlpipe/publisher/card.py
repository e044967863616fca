"""The model card (README.md) of a published run, rendered by the control plane from plain facts.

``render_card(facts)`` fills ``model_card.md.j2`` with Jinja2 (undefined names are errors) and puts
the metadata header together with ``huggingface_hub.ModelCardData``; the result is parsed back with
``huggingface_hub.ModelCard`` so a header the Hub could not read never leaves this module.

The facts, a plain dict (JSON-able, so the control plane can keep them in the ledger):

- ``base_model`` (repo id) and ``base_sha`` (the pinned 40-hex commit): the header's ``base_model``
  (hub-docs ``model-cards.md``, "Specifying a base model") and the text's pinned revision;
  ``base_model_relation: finetune`` says what this model is to it.
- ``license``: the base model card's ``license``; with ``license: other``, its ``license_name`` and
  ``license_link`` too (optional keys of the same names).
- ``preset`` (name), ``overrides`` (hyper-parameters that differ from the preset: name → value),
  ``image`` (with its ``@sha256:`` digest), ``algorithm`` (default ``grpo``).
- ``rewards``: ``{"pre": {metric: number}, "post": {metric: number}}`` (``mean_reward``, ``accuracy``…).
- ``run_id``, ``request_id``; optional ``model_name`` (default: the published repository's name,
  so the title matches it; else the base model's name + "-rl"), ``repo`` (where it is published),
  ``pipeline_tag`` (the base model card's) and extra ``tags``.
- ``evaluation``: ``{dataset, split, subset}`` that train_rl evaluated on (MaxText 0.2.4
  ``configs/post_train/rl.yml``: ``eval_dataset_name`` ``openai/gsm8k``, ``eval_split`` ``test``,
  ``hf_subset`` ``main`` unless the request overrides them). The results go in the header's
  ``model-index`` (what the Hub shows as evaluation results:
  https://huggingface.co/docs/hub/model-cards#evaluation-results), in the names and units people
  read: accuracy in %, mean reward; ``corr``/``total`` are not metrics (the count is said once).
- ``gate``: ``{passed, reasons, override: {by, at, reason, caller}}``: a model promoted past its
  quality gate says so, with the thresholds, the measured values, who promoted it and why.
- ``artifacts_uri``, ``checkpoints_uri``: where the run's files and its MaxText checkpoints are
  (GCS); ``rlpipe report RUN`` renders the run's report.

Tags always include ``rlpipe``, the algorithm and ``maxtext``. No secret is ever a fact: the card is
public text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

TEMPLATE = "model_card.md.j2"
# train_rl's evaluation fields: (name people read, unit, metric type in model-index).
METRICS = {
    "accuracy": ("Accuracy", "%", "accuracy"),
    "partial_accuracy": ("Partial accuracy", "%", "partial_accuracy"),
    "format_accuracy": ("Format accuracy", "%", "format_accuracy"),
    "mean_reward": ("Mean reward", "", "mean_reward"),
}
DEFAULT_EVALUATION = {"dataset": "openai/gsm8k", "split": "test", "subset": "main"}
ALGORITHMS = {"grpo": "GRPO", "gspo": "GSPO", "ppo": "PPO", "dpo": "DPO"}
SHA = re.compile(r"[0-9a-f]{40}")
REQUIRED = ("base_model", "base_sha", "license", "preset", "image", "run_id", "request_id")


def render_card(facts: Mapping[str, Any]) -> str:
    """The README.md text: YAML metadata header, then the card."""
    missing = [key for key in REQUIRED if not str(facts.get(key) or "").strip()]
    if missing:
        raise ValueError(f"the model card needs {', '.join(missing)}")
    base_model, base_sha = str(facts["base_model"]), str(facts["base_sha"])
    if not SHA.fullmatch(base_sha):
        raise ValueError(f"base_sha must be a full 40-hex commit sha, not {base_sha!r}")
    algorithm = str(facts.get("algorithm") or "grpo").lower()
    license_id = str(facts["license"])
    extra: dict[str, Any] = {"base_model_relation": "finetune"}
    if license_id == "other":
        for key in ("license_name", "license_link"):
            if facts.get(key):
                extra[key] = str(facts[key])
    repo = str(facts.get("repo") or "")
    model_name = str(
        facts.get("model_name")
        or (repo.rsplit("/", 1)[-1] if repo else f"{base_model.rsplit('/', 1)[-1]}-rl")
    )
    evaluation = {**DEFAULT_EVALUATION, **{k: v for k, v in (facts.get("evaluation") or {}).items() if v}}
    post = dict((facts.get("rewards") or {}).get("post") or {})
    data = ModelCardData(
        base_model=base_model,
        license=license_id,
        library_name="transformers",
        pipeline_tag=facts.get("pipeline_tag") or None,
        tags=["rlpipe", algorithm, "maxtext", *[str(t) for t in facts.get("tags") or []]],
        model_name=model_name,
        eval_results=_eval_results(post, evaluation) or None,
        **extra,
    )
    text = (
        _environment()
        .get_template(TEMPLATE)
        .render(
            card_data=data.to_yaml(),
            model_name=_cell(model_name),
            base_model=base_model,
            base_sha=base_sha,
            license_text=_license_text(facts, license_id),
            algorithm_name=ALGORITHMS.get(algorithm, algorithm.upper()),
            preset=_cell(str(facts["preset"])),
            image=_cell(str(facts["image"])),
            overrides=[
                (_cell(str(k)), _cell(_value(v))) for k, v in sorted((facts.get("overrides") or {}).items())
            ],
            rewards=_reward_rows(facts.get("rewards") or {}),
            examples=_examples(facts.get("rewards") or {}),
            evaluation={k: _cell(str(v)) for k, v in evaluation.items()},
            promoted=_promotion(facts.get("gate") or {}),
            artifacts_uri=_cell(str(facts.get("artifacts_uri") or "")),
            checkpoints_uri=_cell(str(facts.get("checkpoints_uri") or "")),
            run_id=_cell(str(facts["run_id"])),
            request_id=_cell(str(facts["request_id"])),
        )
    )
    card = ModelCard(text)  # parses the header back: what the Hub will read
    header = card.data.to_dict()
    if header.get("base_model") != base_model or header.get("license") != license_id:
        raise ValueError("the rendered card's metadata does not read back as written")
    return str(card)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # markdown, not HTML; table cells are escaped by _cell
    )


def _load(name: str) -> str:
    return resources.files(__package__ or "rlpipe.publisher").joinpath(name).read_text(encoding="utf-8")


def _cell(text: str) -> str:
    """Safe inside a markdown table cell or inline code: one line, no pipes or backticks."""
    return " ".join(text.split()).replace("|", "\\|").replace("`", "'")


def _value(value: Any) -> str:
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    return str(value)


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _cell(str(value))
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _license_text(facts: Mapping[str, Any], license_id: str) -> str:
    if license_id == "other" and facts.get("license_name"):
        name = _cell(str(facts["license_name"]))
        return f"[{name}]({facts['license_link']})" if facts.get("license_link") else name
    return f"`{_cell(license_id)}`"


def _reward_rows(rewards: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per metric people read (``METRICS``, in that order), with its unit; the raw
    ``corr``/``total`` counts are not metrics."""
    pre, post = dict(rewards.get("pre") or {}), dict(rewards.get("post") or {})
    rows = []
    for key, (name, unit, _) in METRICS.items():
        before, after = pre.get(key), post.get(key)
        if before is None and after is None:
            continue
        change = "—"
        if isinstance(before, int | float) and isinstance(after, int | float) and not isinstance(after, bool):
            change = f"{after - before:+.4g}{unit}"
        rows.append(
            {
                "name": name,
                "before": "—" if before is None else f"{_number(before)}{unit}",
                "after": "—" if after is None else f"{_number(after)}{unit}",
                "change": change,
            }
        )
    return rows


def _examples(rewards: Mapping[str, Any]) -> str:
    totals = {(rewards.get(k) or {}).get("total") for k in ("pre", "post")} - {None}
    return ", ".join(_number(t) for t in sorted(totals, key=str)) if totals else ""


def _eval_results(post: Mapping[str, Any], evaluation: Mapping[str, str]) -> list[EvalResult]:
    """The post-training values as model-index entries: task, dataset (at its split) and metric."""
    results = []
    for key, (name, unit, metric_type) in METRICS.items():
        value = post.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            results.append(
                EvalResult(
                    task_type="text-generation",
                    dataset_type=str(evaluation["dataset"]),
                    dataset_name=str(evaluation["dataset"]).rsplit("/", 1)[-1],
                    dataset_config=str(evaluation.get("subset") or "") or None,
                    dataset_split=str(evaluation["split"]),
                    metric_type=metric_type,
                    metric_name=f"{name} ({unit})" if unit else name,
                    metric_value=round(float(value), 4),
                )
            )
    return results


def _promotion(gate: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a promoted model must say about the gate it did not pass."""
    override = gate.get("override") or {}
    if not override:
        return None
    return {
        "by": _cell(str(override.get("by") or "?")),
        "caller": _cell(str(override.get("caller") or "")),
        "at": _cell(str(override.get("at") or "?")),
        "reason": _cell(str(override.get("reason") or "")),
        "reasons": [_cell(str(r)) for r in gate.get("reasons") or []],
    }
