"""What the publish Job is given: the model card's facts, and the program it runs.

The control plane renders the card (``rlpipe.publisher.card``) before the Job starts, from the
ledger (lineage, results) and the request, and ships it inside the manifest together with the
publisher program's source; nothing a workload can write decides either. The base model's license
comes from its own card, which the convert Job pinned beside the checkpoint (``hf-source/README.md``
at the pinned sha), so no Hub call is needed here.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from rlpipe.control import blobstore
from rlpipe.control.ledger import RunRecord
from rlpipe.core import layout, presets
from rlpipe.core.manifests import RenderContext, converted_dir
from rlpipe.core.request import Request

CARD_FILE = "README.md"
# What `rlpipe render` shows in place of the card: it needs the run's results and pinned sha.
UNRENDERED_CARD = "(the model card, rendered by the control plane when the publish attempt launches)"
# Request fields that are not hyper-parameters (identity, plumbing, outcomes).
_NOT_HYPERPARAMETERS = frozenset(
    {"model", "hf_repo", "hf_revision", "request_id", "preset", "labels", "notify", "gate", "publish"}
    | {"hf_token_secret", "image", "cpu_job", "scratch", "pathways", "placement", "timeouts", "retry"}
)


@cache
def publisher_program() -> str:
    """The publish Job's program, exactly as shipped in its manifest (``python3 -c``)."""
    return resources.files("rlpipe.publisher").joinpath("program.py").read_text(encoding="utf-8")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def changed_hyperparameters(request: dict[str, Any]) -> dict[str, Any]:
    """Every hyper-parameter whose value differs from the request's preset (dotted names)."""
    preset = presets.preset_defaults(str(request.get("preset") or presets.DEFAULT_PRESET))
    mine = _flatten({k: v for k, v in request.items() if k not in _NOT_HYPERPARAMETERS})
    base = _flatten({k: v for k, v in preset.items() if k not in _NOT_HYPERPARAMETERS})
    return {k: v for k, v in sorted(mine.items()) if base.get(k, object()) != v and v is not None}


def base_license(artifacts: blobstore.BlobStore, req: Request, ctx: RenderContext) -> dict[str, str]:
    """``license`` (and ``license_name``/``license_link`` for ``other``) and ``pipeline_tag`` from
    the base model's card, as pinned with its weights: the trained model does what the base does."""
    from huggingface_hub import ModelCard

    name = layout.pinned_source_dir(converted_dir(req, ctx)) + CARD_FILE
    try:
        data = ModelCard(artifacts.read(name).data.decode("utf-8", "replace")).data.to_dict()
    except (blobstore.NotFound, blobstore.TooLarge, ValueError):
        data = {}
    found = {
        k: str(data[k]) for k in ("license", "license_name", "license_link", "pipeline_tag") if data.get(k)
    }
    if "license" not in found:
        found.update(license="other", license_name=f"unknown: the card of {req.hf_repo} names no license")
        found.pop("license_link", None)
    return found


def card_facts(
    record: RunRecord, req: Request, license_facts: dict[str, str], artifacts_bucket: str = ""
) -> dict[str, Any]:
    results = record.results or {}
    overrides = req.maxtext_overrides or {}
    facts: dict[str, Any] = {
        "base_model": req.hf_repo,
        "base_sha": record.lineage.hf_sha or "",
        **license_facts,
        "preset": req.preset,
        "overrides": changed_hyperparameters(record.request),
        "image": req.image,
        "rewards": {k: results.get(k) or {} for k in ("pre", "post")},
        "run_id": record.run_id,
        "request_id": req.request_id or record.run_id,
        # train_rl's evaluation set: the request's overrides, else rl.yml's (the card's defaults)
        "evaluation": {
            "dataset": overrides.get("eval_dataset_name"),
            "split": overrides.get("eval_split"),
            "subset": overrides.get("hf_subset"),
        },
        "gate": record.gate.model_dump() if record.gate else {},
        "checkpoints_uri": record.lineage.checkpoint_uri or "",
    }
    if req.publish is not None:
        facts["repo"] = req.publish.repo
    if artifacts_bucket:
        facts["artifacts_uri"] = layout.gs(
            artifacts_bucket, layout.RunLayout(artifacts_bucket, record.run_id).prefix
        )
    return facts


def publish_context(
    artifacts: blobstore.BlobStore, record: RunRecord, req: Request, ctx: RenderContext
) -> RenderContext:
    """The render context of a publish attempt: the card and the program, in the manifest."""
    from dataclasses import replace

    from rlpipe.publisher.card import render_card

    card = render_card(card_facts(record, req, base_license(artifacts, req, ctx), artifacts.bucket_name))
    return replace(ctx, model_card=card, publisher_program=publisher_program())
