"""The model card (README.md) of a published run, rendered by the control plane from plain facts.

Whoever finds the model on the Hub reads only this page, so it tells the whole story: what the
model is (base model at its pinned sha, license, task), how it was trained, what train_rl measured
and on what, whether a person shipped it past the quality gate its request set (who, when, why),
and where the run's checkpoints and export are.

``render_card(facts)`` fills ``model_card.md.j2`` with Jinja2 (undefined names are errors) and puts
the metadata header together with ``huggingface_hub.ModelCardData`` (the keys of
https://huggingface.co/docs/hub/model-cards#model-card-metadata); the text is parsed back with
``huggingface_hub.ModelCard`` and must give the same metadata, so a header the Hub would read
differently never leaves this module.

The facts, a plain dict (JSON-able; ``rlpipe.control.lifecycle.publishing.card_facts`` gathers them):

- ``base_model`` (repo id), ``base_sha`` (the pinned 40-hex commit): the header's ``base_model``
  with ``base_model_relation: finetune``, and the text's pinned revision.
- ``license``: the base model card's; with ``license: other``, ``license_name``/``license_link``.
- ``pipeline_tag``: the base model card's, and ``pipeline_tag_source``, a sentence saying where it
  came from; without one the card says ``text-generation`` (what train_rl trains a model to do)
  and that it is this default.
- ``repo``: where it is published; the title and the model-index name are its name.
- ``preset``, ``overrides`` (hyper-parameters that differ from the preset), ``image``, ``algorithm``.
- ``training_data``: ``{dataset, revision, sha, subset, split, files, bytes, num_examples}``, what
  train_rl trained on: the request's dataset and split at the commit ``plan`` pinned (``sha``),
  with the pinned files' count and total bytes and the example count the dataset's card states.
- ``rewards``: ``{"pre": {...}, "post": {...}}``, train_rl's evaluations as the ledger holds them
  (``corr``, ``total``, ``accuracy``… in percent, ``mean_reward``); ``evaluation``: the set they were
  measured on, the same fields as ``training_data`` and ``held_out`` (``rlpipe.publisher.evaluation``).
- ``inputs``: the request's own files by role (``rewards``, ``processor``, ``chat_template``), each
  ``{sha256, uri, size}`` (``uri``: the run's copy in GCS) and, for ``rewards``, ``functions``; no
  ``rewards`` means MaxText's built-in reward functions.
- ``gate``: ``{passed, reasons, thresholds: {name: value}, override: {by, at, reason, caller}}``;
  empty when the request set no gate.
- ``exported``: ``{step, reason}``, the training step these weights are and why that one
  (``export.step``: the last, the best evaluated, or the one asked for); empty before export.
- ``links``: ``{checkpoints, final_checkpoint, exported_checkpoint, export, report}``, GCS URIs of
  the run's files and of its report page (in the state bucket, ``control.lifecycle.run_report``).
- ``run_id``, ``request_id``; optional ``model_name`` and extra ``tags``.

The datasets: the header's ``datasets`` lists the training dataset and, when it is another one,
the evaluation dataset (dataset ids only: hub-docs ``modelcard.md:12-13`` at 0d37e0c,
https://github.com/huggingface/hub-docs/blob/main/modelcard.md, has no revision there); the body's
"Training data" section names each one's pinned commit (linked to its file tree at that commit),
subset, split, files, bytes and examples, and the model-index names the evaluation commit as
``dataset.revision`` (``modelcard.md:29``). The "Reward" section names what scored the rollouts:
MaxText's built-in functions, or the request's by name with the file's full sha256 and the run's
copy, and the request's dataset processor and chat template by sha256 when it brought them.

Tags always include ``rlpipe``, the algorithm and ``maxtext``, and ``promoted-past-gate`` for a
model a person promoted. No secret is ever a fact: the card is public text (the control plane masks
token-like text in the facts before they come here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2
from huggingface_hub import ModelCard, ModelCardData

from rlpipe.core.staging import BUILTIN_REWARDS, BUILTIN_REWARDS_SOURCE
from rlpipe.publisher import evaluation

TEMPLATE = "model_card.md.j2"
ALGORITHMS = {"grpo": "GRPO", "gspo": "GSPO", "ppo": "PPO", "dpo": "DPO"}
SHA = re.compile(r"[0-9a-f]{40}")
REQUIRED = ("base_model", "base_sha", "license", "preset", "image", "run_id", "request_id")
# What train_rl trains a model to do; said as such when the base model's card names no task.
DEFAULT_PIPELINE_TAG = "text-generation"
PROMOTED_TAG = "promoted-past-gate"
# What scores the rollouts when a request brings no reward functions: maxtext 0.2.4
# train_rl.py:420-424 (a request's rewards.functions replace all three, train_rl.py:402-424).
REPLACED_SOURCE = "maxtext 0.2.4 train_rl.py:402-424"
# train_rl.py: prepare_train_and_eval_dataset(test_size=0.05), seeded by data_shuffle_seed.
HELD_OUT_SOURCE = "maxtext 0.2.4 train_rl.py:306-330"
HUB_DATASETS = "https://huggingface.co/datasets/"
SHA256 = re.compile(r"[0-9a-f]{64}")
# The request's own files other than the rewards, in the card's order and words.
USER_FILES = {"processor": "Dataset processor", "chat_template": "Chat template"}
SUMMARIES: dict[bool | None, str] = {
    True: "This model passed the quality gate its request set.",
    False: "This model did **not** pass the quality gate its request set.",
    None: "The quality gate its request set could not be evaluated: a number it compares is missing.",
}
# The run's files the card links to (facts["links"]), in the card's order and words.
LINKS = {
    "checkpoints": "MaxText checkpoints (Orbax), every kept step",
    "final_checkpoint": "The final step's checkpoint",
    "exported_checkpoint": "The checkpoint this export was made from (not the final step's)",
    "export": "This export (Hugging Face format), as the run wrote it",
    "report": "The run's report (one HTML page: rounds, timeline, rewards, data, lineage, gate), kept beside its ledger",
}
# GateSpec's thresholds in the words and units of the gate's own reasons (rlpipe.core.gate).
THRESHOLDS = {
    "min_post_mean_reward": ("post-training mean reward", ""),
    "min_reward_gain": ("mean reward gain over pre-training", ""),
    "min_post_accuracy": ("post-training accuracy", "%"),
}


def render_card(facts: Mapping[str, Any]) -> str:
    """The README.md text: YAML metadata header, then the card."""
    _check(facts)
    data = _metadata(facts)
    text = _environment().get_template(TEMPLATE).render(card_data=data.to_yaml(), **_view(facts))
    card = ModelCard(text)  # parses the header back: what the Hub will read
    if card.data.to_dict() != data.to_dict():
        raise ValueError("the rendered card's metadata does not read back as written")
    return str(card)


def _check(facts: Mapping[str, Any]) -> None:
    missing = [key for key in REQUIRED if not str(facts.get(key) or "").strip()]
    if missing:
        raise ValueError(f"the model card needs {', '.join(missing)}")
    if not SHA.fullmatch(str(facts["base_sha"])):
        raise ValueError(f"base_sha must be a full 40-hex commit sha, not {facts['base_sha']!r}")


def model_name(facts: Mapping[str, Any]) -> str:
    """The repository's name (the title must match the repository), else the base model's + "-rl"."""
    repo = str(facts.get("repo") or "")
    base = str(facts["base_model"]).rsplit("/", 1)[-1]
    return str(facts.get("model_name") or (repo.rsplit("/", 1)[-1] if repo else f"{base}-rl"))


def _algorithm(facts: Mapping[str, Any]) -> str:
    return str(facts.get("algorithm") or "grpo").lower()


def _promoted(facts: Mapping[str, Any]) -> bool:
    return bool((facts.get("gate") or {}).get("override"))


def _metadata(facts: Mapping[str, Any]) -> ModelCardData:
    """The header: what the Hub indexes, filters on and renders as evaluation results."""
    license_id = str(facts["license"])
    extra: dict[str, Any] = {"base_model_relation": "finetune"}
    if license_id == "other":
        extra |= {k: str(facts[k]) for k in ("license_name", "license_link") if facts.get(k)}
    results = evaluation.eval_results(facts.get("rewards") or {}, facts.get("evaluation") or {})
    if results:  # ModelCardData needs a model name for the model-index, and only then
        extra |= {"eval_results": results, "model_name": model_name(facts)}
    tags = ["rlpipe", _algorithm(facts), "maxtext", *([PROMOTED_TAG] if _promoted(facts) else [])]
    return ModelCardData(
        base_model=str(facts["base_model"]),
        license=license_id,
        library_name="transformers",
        pipeline_tag=str(facts.get("pipeline_tag") or DEFAULT_PIPELINE_TAG),
        tags=[*tags, *[str(t) for t in facts.get("tags") or []]],
        datasets=_dataset_ids(facts) or None,
        **extra,
    )


def _view(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The template's variables, every free text made safe for markdown."""
    rewards = facts.get("rewards") or {}
    algorithm = _algorithm(facts)
    return {
        "model_name": _cell(model_name(facts)),
        "base_model": str(facts["base_model"]),
        "base_sha": str(facts["base_sha"]),
        "license_text": _license_text(facts, str(facts["license"])),
        "pipeline_tag": _cell(str(facts.get("pipeline_tag") or DEFAULT_PIPELINE_TAG)),
        "pipeline_tag_source": _prose(_pipeline_tag_source(facts)),
        "algorithm_name": ALGORITHMS.get(algorithm, algorithm.upper()),
        "preset": _cell(str(facts["preset"])),
        "image": _cell(str(facts["image"])),
        "overrides": [
            (_cell(str(k)), _cell(_value(v))) for k, v in sorted((facts.get("overrides") or {}).items())
        ],
        "data": _data(facts.get("training_data") or {}, facts.get("evaluation") or {}),
        "reward": _reward(facts.get("inputs") or {}),
        "rewards": evaluation.rows(rewards),
        "examples": evaluation.examples(rewards),
        "evaluated_on": evaluation.where(facts.get("evaluation") or {}),
        "gate": _gate(facts.get("gate") or {}),
        "exported": _exported(facts.get("exported") or {}),
        "links": _links(facts.get("links") or {}),
        "run_id": _cell(str(facts["run_id"])),
        "request_id": _cell(str(facts["request_id"])),
    }


def _exported(exported: Mapping[str, Any]) -> dict[str, str] | None:
    """Which training step these weights are, and why that one (``export.step``)."""
    step = exported.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return {"step": str(step), "reason": _prose(str(exported.get("reason") or ""))}


def _dataset_ids(facts: Mapping[str, Any]) -> list[str]:
    """The header's ``datasets``: the training dataset, then the evaluation dataset if another."""
    ids: list[str] = []
    for which in ("training_data", "evaluation"):
        found = (facts.get(which) or {}).get("dataset")
        if found and str(found) not in ids:
            ids.append(str(found))
    return ids


def _data(train: Mapping[str, Any], evaluated: Mapping[str, Any]) -> dict[str, Any] | None:
    """The "Training data" table: one column for the training split and, unless train_rl held its
    evaluation examples out of that split, one for the evaluation split; a row per fact."""
    if not train.get("dataset"):
        return None
    held_out = bool(evaluated.get("held_out"))
    sets = [train] if held_out or not evaluated.get("dataset") else [train, evaluated]
    header = ["", "Training", "Evaluation"][: len(sets) + 1]
    rows = [
        ["Dataset", *(_dataset_link(s) for s in sets)],
        ["Commit (pinned)", *(f"`{_cell(str(s['sha']))}`" if s.get("sha") else "not pinned" for s in sets)],
        ["Requested revision", *(f"`{_cell(str(s.get('revision') or '-'))}`" for s in sets)],
        [
            "Subset",
            *(f"`{_cell(str(s['subset']))}`" if s.get("subset") else "the default config" for s in sets),
        ],
        ["Split", *(f"`{_cell(str(s.get('split') or '-'))}`" for s in sets)],
        ["Files", *(_files(s) for s in sets)],
    ]
    if any(isinstance(s.get("num_examples"), int) for s in sets):
        rows.append(["Examples", *(_examples(s.get("num_examples")) for s in sets)])
    held = None
    if held_out:
        held = (
            f"Evaluation: {evaluation.HELD_OUT_SHARE} held out of the training split by train_rl "
            f"({HELD_OUT_SOURCE}), so the evaluation examples come from the files above and were "
            "not trained on."
        )
    return {"header": header, "rows": rows, "held_out": held, "pinned": all(s.get("sha") for s in sets)}


def _dataset_link(data: Mapping[str, Any]) -> str:
    """The dataset linked to its file tree at the pinned commit (the repo page when unpinned)."""
    repo = _cell(str(data["dataset"]))
    sha = str(data.get("sha") or "")
    return (
        f"[{repo}]({HUB_DATASETS}{repo}/tree/{sha})"
        if SHA.fullmatch(sha)
        else f"[{repo}]({HUB_DATASETS}{repo})"
    )


def _files(data: Mapping[str, Any]) -> str:
    count, size = data.get("files"), data.get("bytes")
    if not isinstance(count, int):
        return "not recorded"
    return f"{count} {'file' if count == 1 else 'files'}, {size or 0:,} bytes"


def _examples(value: Any) -> str:
    return (
        f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "not stated by its card"
    )


def _reward(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The "Reward" section: the built-in functions, or the request's by name with the file's
    sha256 and the run's copy; then the request's processor and chat template, when it has them."""
    rewards = inputs.get("rewards") or {}
    rows: list[tuple[str, str]] = []
    if rewards:
        names = ", ".join(f"`{_cell(str(n))}`" for n in rewards.get("functions") or []) or "none named"
        summary = (
            f"The request's own reward functions scored the rollouts: {names}. They replace MaxText's "
            f"built-in ones ({REPLACED_SOURCE})."
        )
        rows += [
            ("Reward functions", names),
            ("Reward file sha256", _hash(rewards.get("sha256"))),
            ("Reward file (the run's copy)", _uri(rewards.get("uri"))),
        ]
    else:
        builtin = ", ".join(f"`{n}`" for n in BUILTIN_REWARDS)
        summary = f"MaxText's built-in rewards scored the rollouts: {builtin} ({BUILTIN_REWARDS_SOURCE})."
    for role, label in USER_FILES.items():
        found = inputs.get(role) or {}
        if found:
            rows.append((f"{label} sha256", f"{_hash(found.get('sha256'))}, {_uri(found.get('uri'))}"))
    return {"summary": summary, "rows": rows}


def _hash(value: Any) -> str:
    return f"`{value}`" if isinstance(value, str) and SHA256.fullmatch(value) else "not recorded"


def _uri(value: Any) -> str:
    return f"`{_cell(str(value))}`" if value else "not recorded"


def _pipeline_tag_source(facts: Mapping[str, Any]) -> str:
    if facts.get("pipeline_tag_source"):
        return str(facts["pipeline_tag_source"])
    if facts.get("pipeline_tag"):
        return "the base model's card"
    return (
        f"rlpipe's default ({DEFAULT_PIPELINE_TAG}, what train_rl trains): the base model's card was not read"
    )


def _gate(gate: Mapping[str, Any]) -> dict[str, Any] | None:
    """The quality gate as the card tells it: the verdict, each threshold with the measured value,
    and, for a promoted model, who promoted it, when, as which verified identity, and why."""
    if not gate:
        return None
    override = gate.get("override") or {}
    return {
        "summary": SUMMARIES.get(gate.get("passed"), SUMMARIES[None]),
        "thresholds": [_threshold(name, value) for name, value in (gate.get("thresholds") or {}).items()],
        "reasons": [_prose(str(r)) for r in gate.get("reasons") or []],
        "promoted": bool(override),
        "by": _prose(str(override.get("by") or "someone unnamed")),
        "caller": _cell(str(override.get("caller") or "")),
        "at": _cell(str(override.get("at") or "an unrecorded time")),
        "reason": _prose(str(override.get("reason") or "no reason recorded")),
    }


def _links(links: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(label, _cell(str(links[key]))) for key, label in LINKS.items() if links.get(key)]


def _threshold(name: str, value: Any) -> str:
    what, unit = THRESHOLDS.get(name, (name, ""))
    shown = evaluation.number(float(value)) if isinstance(value, int | float) else _cell(str(value))
    return f"`{_cell(name)}`: {what} at least {shown}{unit}"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # markdown, not HTML; free text is escaped by _cell and _prose
    )


def _load(name: str) -> str:
    return resources.files(__package__ or "rlpipe.publisher").joinpath(name).read_text(encoding="utf-8")


def _cell(text: str) -> str:
    """Safe inside a markdown table cell or inline code: one line, no pipes or backticks."""
    return " ".join(text.split()).replace("|", "\\|").replace("`", "'")


def _prose(text: str) -> str:
    """A person's words (a promote reason, a name) as plain text: one line, and no HTML, so an
    ``<!--`` in a reason cannot hide the rest of the card."""
    return _cell(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _value(value: Any) -> str:
    if isinstance(value, float):
        return evaluation.number(value)
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    return str(value)


def _license_text(facts: Mapping[str, Any], license_id: str) -> str:
    if license_id == "other" and facts.get("license_name"):
        name = _cell(str(facts["license_name"]))
        return f"[{name}]({facts['license_link']})" if facts.get("license_link") else name
    return f"`{_cell(license_id)}`"
