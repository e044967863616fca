"""What the publish Job is given: the model card's facts, and the program it runs.

The control plane renders the card (``rlpipe.publisher.card``) before the Job starts, from the
ledger (lineage, results, the gate and a person's override of it) and the request, and ships it
inside the manifest together with the publisher program's source; nothing a workload can write
decides either. The base model's license comes from its own card as the convert Job pinned it
beside the checkpoint (``hf-source/README.md`` at the pinned sha); its ``pipeline_tag`` from the
same card read on the Hub at the pinned sha, the one Hub read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any
from urllib.parse import quote

from rlpipe.control.adapters import blobstore, hub_client
from rlpipe.control.adapters.redaction import mask_tokens
from rlpipe.core import layout, presets, staging
from rlpipe.core.failures import TransientFailure
from rlpipe.core.manifests import RenderContext, converted_dir
from rlpipe.core.request import Request
from rlpipe.core.runs.record import GateRecord, RunRecord
from rlpipe.core.runs.results import as_exported
from rlpipe.publisher import shipped_program

CARD_FILE = "README.md"
# What `rlpipe render` shows in place of the card: it needs the run's results and pinned sha.
UNRENDERED_CARD = "(the model card, rendered by the control plane when the publish attempt launches)"
CARD_MAX_BYTES = 1 << 20  # a model card; the program refuses a larger one too
_DEFAULT_TAG = "rlpipe's default"
# Request fields that are not hyper-parameters (identity, plumbing, outcomes).
_NOT_HYPERPARAMETERS = frozenset(
    {
        "model",
        "hf_repo",
        "hf_revision",
        "request_id",
        "preset",
        "labels",
        "notify",
        "gate",
        "publish",
        "export",
    }
    | {"hf_token_secret", "image", "cpu_job", "scratch", "pathways", "placement", "timeouts", "retry"}
)


@cache
def publisher_program() -> str:
    """The publish Job's program, exactly as shipped in its manifest (``python3 -c``)."""
    return shipped_program()


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
    """``license`` (and ``license_name``/``license_link`` for ``other``) from the base model's card
    as the convert Job pinned it: the license travels with the weights it came with."""
    from huggingface_hub import ModelCard

    name = layout.pinned_source_dir(converted_dir(req, ctx)) + CARD_FILE
    try:
        data = ModelCard(artifacts.read(name).data.decode("utf-8", "replace")).data.to_dict()
    except (blobstore.NotFound, blobstore.TooLarge, ValueError):
        data = {}
    found = {k: str(data[k]) for k in ("license", "license_name", "license_link") if data.get(k)}
    if "license" not in found:
        return {"license": "other", "license_name": f"unknown: the card of {req.hf_repo} names no license"}
    return found


def base_pipeline_tag(
    repo: str, sha: str, *, token: str | None = None, timeout: float | None = None
) -> dict[str, str]:
    """``pipeline_tag`` from the base model's card on the Hub at the pinned sha, and
    ``pipeline_tag_source``, the sentence the card says about where it came from.

    Read through the Hub as every control-plane read is (``control.adapters.hub_client``: one GET of the card's
    ``/resolve/`` URL with a timeout, the client's errors), at the pinned sha rather than the
    branch head, which may have moved since the run began. A Hub that does not answer now is a
    ``TransientFailure`` (the workflow retries the launch: a publish needs the Hub anyway); a card
    that is missing, unreadable or names no tag leaves the card's default, and says why."""
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hf

    if not hub_client.SHA.match(sha):
        return {"pipeline_tag_source": f"{_DEFAULT_TAG}: no pinned revision to read the base card at"}
    token = token or hub_client.pipeline_token()
    seconds = timeout if timeout is not None else hub_client.hub_timeout()
    url = f"{str(HfApi(token=token).endpoint).rstrip('/')}/{repo}/resolve/{quote(sha, safe='')}/{CARD_FILE}"
    try:
        answer = hub_client.hub_get(url, token=token, timeout=seconds, max_bytes=CARD_MAX_BYTES)
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status is not None and (status in (408, 429) or status >= 500):
            raise TransientFailure(f"Hugging Face answered {status} for the card of {repo}@{sha}") from exc
        return {
            "pipeline_tag_source": f"{_DEFAULT_TAG}: the base card at {sha[:12]} could not be read (HTTP {status})"
        }
    except hub_client.transport_errors() as exc:
        raise TransientFailure(f"could not reach Hugging Face for the card of {repo}@{sha}") from exc
    return _tag_of(answer.content, sha)


def _tag_of(content: bytes, sha: str) -> dict[str, str]:
    from huggingface_hub import ModelCard

    if len(content) > CARD_MAX_BYTES:
        return {
            "pipeline_tag_source": f"{_DEFAULT_TAG}: the base card at {sha[:12]} is over {CARD_MAX_BYTES} bytes"
        }
    try:
        tag = ModelCard(content.decode("utf-8", "replace")).data.to_dict().get("pipeline_tag")
    except ValueError:  # a header that is not YAML
        return {
            "pipeline_tag_source": f"{_DEFAULT_TAG}: the base card's metadata at {sha[:12]} is not readable"
        }
    if not isinstance(tag, str) or not tag.strip():
        return {"pipeline_tag_source": f"{_DEFAULT_TAG}: the base card at {sha[:12]} names no pipeline_tag"}
    return {"pipeline_tag": tag.strip(), "pipeline_tag_source": f"the base model's card at {sha[:12]}"}


def _pinned(record: RunRecord, which: str) -> dict[str, Any]:
    """The split ``plan`` pinned for ``which`` (``train``/``eval``, ``lineage.data``), or {}."""
    entry = (record.lineage.data or {}).get(which)
    return entry if isinstance(entry, dict) else {}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dataset_facts(
    entry: Mapping[str, Any], repo: str, revision: str, subset: str | None, split: str
) -> dict[str, Any]:
    """One dataset split as the card tells it: the request's names, and what plan pinned of it
    (``control.lifecycle.data_pins``: the commit, every file with its size, the card's example count)."""
    files = entry.get("files")
    listed = [f for f in files if isinstance(f, dict)] if isinstance(files, list) else None
    sha = entry.get("sha") or (revision if hub_client.SHA.fullmatch(revision) else None)
    return {
        "dataset": str(entry.get("repo") or repo),
        "revision": revision,  # what the request named (a branch, or the commit itself)
        "sha": str(sha) if sha else None,  # the commit train_rl read: plan's pin
        "subset": entry.get("subset") or subset,
        "split": split,
        "files": len(listed) if listed is not None else None,
        "bytes": sum(_count(f.get("size")) or 0 for f in listed) if listed is not None else None,
        "num_examples": _count(entry.get("num_examples")),
    }


def training_data(req: Request, record: RunRecord) -> dict[str, Any]:
    """What train_rl trained on: the request's dataset at the commit plan pinned, the split it
    named (``dataset_name``, ``hf_subset``, ``train_split``; ``train_rl.prepare_datasets``), with
    the pinned files' count and bytes and the example count the dataset's card gives."""
    d = req.dataset
    return _dataset_facts(_pinned(record, "train"), d.repo, d.revision, d.subset, d.train_split)


def evaluation_set(req: Request, record: RunRecord) -> dict[str, Any]:
    """What train_rl evaluated on, before and after training (``train_rl.prepare_datasets``):
    ``eval_split`` of the evaluation dataset; for the datasets in ``HELD_OUT_DATASETS`` evaluated
    on themselves, the examples train_rl held out of the training split."""
    d = req.dataset
    if staging.splits_itself(d.repo, d.evaluated_repo):
        return {**training_data(req, record), "held_out": True}
    entry = _pinned(record, "eval")
    facts = _dataset_facts(entry, d.evaluated_repo, d.evaluated_revision, d.evaluated_subset, d.eval_split)
    return {**facts, "held_out": False}


def user_inputs(req: Request, record: RunRecord) -> dict[str, dict[str, Any]]:
    """The request's own files (``rewards``, ``processor``, ``chat_template``) as the card names
    them: the run's copy (``uri``) and its ``sha256``, from what intake recorded
    (``lineage.inputs``, ``control.lifecycle.user_files.Copied.record``), else from the ledger's request,
    which intake rewrote to name the same copy and hash (``user_files.pinned_request``); and, for
    the rewards, the functions train_rl takes from the file. A role the request does not use is
    absent: MaxText's built-in rewards, processor and the preset's template apply."""
    from rlpipe.control.lifecycle.user_files import files_of

    recorded = record.lineage.inputs or {}
    out: dict[str, dict[str, Any]] = {}
    for role, uf in files_of(req).items():
        found = recorded.get(role)
        entry: dict[str, Any] = found if isinstance(found, dict) else {}
        fact: dict[str, Any] = {
            "sha256": entry.get("sha256") or uf.sha256,
            "uri": entry.get("uri") or (uf.path if uf.is_gs else None),
            "size": _count(entry.get("size")),
        }
        if role == "rewards" and req.rewards is not None:
            fact["functions"] = list(req.rewards.functions)
        out[role] = fact
    return out


def gate_facts(record: RunRecord, req: Request) -> dict[str, Any]:
    """The gate as the card tells it: the request's thresholds, the recorded verdict and reasons,
    and a person's override (the gate's, else the lineage's); empty when no gate was asked for."""
    if req.gate is None:
        return {}
    gate = record.gate or GateRecord()
    override = gate.override or record.lineage.promoted
    return {
        "passed": gate.passed,
        "reasons": list(gate.reasons),
        "thresholds": req.gate.model_dump(exclude_none=True),
        "override": override.model_dump() if override else None,
    }


def run_links(bucket: str, record: RunRecord, report: str | None = None, scope: str = "") -> dict[str, str]:
    """GCS URIs of the run's checkpoints and export (artifacts bucket), named by ``core.layout``,
    and of its report page (``report``: the state bucket's copy, ``control.lifecycle.run_report``).
    ``scope``: the run's team's (``layout.RunLayout.scope``)."""
    run = layout.RunLayout(bucket, record.run_id, scope=scope)
    links = {"checkpoints": run.uri(run.checkpoints), "export": run.uri(run.hf_dir)}
    if report:
        links["report"] = report
    if record.lineage.final_step:
        links["final_checkpoint"] = run.uri(run.step_dir(record.lineage.final_step))
    exported = record.lineage.exported_step
    if exported is not None and exported != record.lineage.final_step:
        links["exported_checkpoint"] = run.uri(run.step_dir(exported))
    return links


def card_facts(
    record: RunRecord,
    req: Request,
    base_facts: Mapping[str, str],
    artifacts_bucket: str,
    report: str | None = None,
    scope: str = "",
) -> dict[str, Any]:
    """Everything the card says, from the ledger, the request and the base model's card; token-like
    text masked (``control.adapters.redaction``), since a promote reason is free text and the card public."""
    results = record.results or {}
    judged = as_exported(results, record.lineage.exported_step, record.lineage.final_step)
    facts: dict[str, Any] = {
        "base_model": req.hf_repo,
        "base_sha": record.lineage.hf_sha or "",
        **base_facts,
        "repo": req.publish.repo if req.publish is not None else None,
        "preset": req.preset,
        "overrides": changed_hyperparameters(record.request),
        "image": req.image,
        "training_data": training_data(req, record),
        # After training: the exported step's evaluation (core.runs.results.as_exported), which is
        # the final one unless export.step chose another step, and none when none was printed there.
        "rewards": {k: judged.get(k) or {} for k in ("pre", "post")},
        "evaluation": evaluation_set(req, record),
        "inputs": user_inputs(req, record),
        "gate": gate_facts(record, req),
        # Which step this export is, and why (export.step; control/stage/exported_step.py).
        "exported": {"step": record.lineage.exported_step, "reason": record.lineage.export_reason}
        if record.lineage.exported_step is not None
        else {},
        "links": run_links(artifacts_bucket, record, report, scope),
        "run_id": record.run_id,
        "request_id": req.request_id or record.run_id,
    }
    masked: dict[str, Any] = mask_tokens(facts)
    return masked


def publish_context(
    artifacts: blobstore.BlobStore,
    record: RunRecord,
    req: Request,
    ctx: RenderContext,
    *,
    report: str | None = None,
) -> RenderContext:
    """The render context of a publish attempt: the card and the program, in the manifest.
    ``report``: where the run's page is kept (``control.lifecycle.run_report``), for the card to link."""
    from dataclasses import replace

    from rlpipe.publisher.card import render_card

    base = {
        **base_license(artifacts, req, ctx),
        **base_pipeline_tag(req.hf_repo, record.lineage.hf_sha or ""),
    }
    card = render_card(card_facts(record, req, base, artifacts.bucket_name, report, ctx.cache_scope))
    return replace(ctx, model_card=card, publisher_program=publisher_program())
