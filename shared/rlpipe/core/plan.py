"""What the pipeline will do for a request, worked out without a cluster or a bucket.

``rlpipe plan FILE [--json]`` prints this: the stages and their workloads, every GCS path, each
stage's done rule (training's final step from the effective config), the checkpoints expected,
the conversion cache key, what is pinned, and the budgets and deadlines. The JSON form is
versioned (``PLAN_VERSION``) and documented in ``docs/plan.md``; fields are only ever added
within a version. Pure: a request and names in, a JSON-ready dict out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlpipe.core import (
    commands,
    cost,
    identity,
    layout,
    presets,
    staging,
    step_counts,
    steps,
    tpu,
)
from rlpipe.core.manifests import (
    RenderContext,
    conversion_cache,
    pinned_source_uri,
    pinning_lineage,
    request_stages,
    stage_paths,
)
from rlpipe.core.maxtext import model_names
from rlpipe.core.request import Request, export_checks, provisioning

PLAN_VERSION = 1
# The largest chip-hour estimate a plan states (a million steps on the largest request's 16,384
# chips at one step a second is about 4.6 million); beyond it, or not finite, none is stated.
MAX_CHIP_HOURS = 10_000_000
_SHA = re.compile(r"^[0-9a-f]{40}$")
KINDS = {"convert": "Job", "train": "JobSet", "export": "Job"}


@dataclass(frozen=True)
class Quota:
    """The TPU chips a deployment's Kueue admits at once through one LocalQueue, and where the
    deployment says so. A request asking for more is never admitted: it waits past
    ``timeouts.queued`` and ends ``capacity`` every attempt, so ``plan`` says it before it runs."""

    queue: str  # the LocalQueue a request names (tpu.queue)
    chips: int
    source: str  # where the number comes from, e.g. "TPU_CHIPS in infra/cluster/k8s/params.env"
    fix: str  # how the deployment raises it


def quota_warning(req: Request, chips: int, quota: Quota | None) -> str | None:
    """Why this request would never be admitted under ``quota``, with both ways out; None when it
    fits or when the deployment's quota is not known here."""
    if quota is None or chips <= quota.chips:
        return None
    slices = f"{req.tpu.slices} × {req.tpu.type}" if req.tpu.slices > 1 else f"one {req.tpu.type}"
    return (
        f"the request asks for {chips} TPU chips ({slices}) but queue {quota.queue} admits at most "
        f"{quota.chips} ({quota.source}): Kueue never admits it, and each attempt ends `capacity` after "
        f"timeouts.queued ({req.timeouts.queued} s). {quota.fix}, if the cluster has those chips; "
        "else ask for fewer (preset, tpu.type, tpu.slices)"
    )


def pinned_sha(req: Request, hf_sha: str | None = None) -> str | None:
    """The commit every read of the repo uses, if known before run time."""
    if hf_sha:
        return hf_sha
    return req.hf_revision if _SHA.match(req.hf_revision) else None


def build_plan(
    req: Request,
    *,
    run_id: str,
    bucket: str,
    state_bucket: str = "STATE_BUCKET",
    hf_sha: str | None = None,
    namespace: str = "rlpipe",
    step_seconds: float | None = None,
    prices: dict[str, Any] | None = None,
    quotas: Mapping[str, Quota] | None = None,
    data: Mapping[str, Any] | None = None,
    cache_scope: str = "",
) -> dict[str, Any]:
    """The plan of a first attempt of every stage (raises ``steps.ConfigProblem`` only for a
    request that skipped validation: validation refuses those). ``bucket`` is the artifacts
    bucket (what the workloads write), ``state_bucket`` the control plane's (ledger, READY.json).
    ``quotas``: the deployment's TPU quota by LocalQueue, where it is known. ``data``: the datasets
    pinned now (``control.lifecycle.data_pins``, ``rlpipe plan --hub``), whose split sizes fix the end.
    ``cache_scope``: the team whose conversion cache the run reads (``Teams.cache_scope``)."""
    sha = pinned_sha(req, hf_sha)
    ctx = RenderContext(
        run_id=run_id, bucket=bucket, namespace=namespace, hf_revision=sha, cache_scope=cache_scope
    )
    run = ctx.run
    state = layout.RunLayout(state_bucket, run_id)
    training = steps.training_steps(req)
    rows = ((data or {}).get("train") or {}).get("num_examples")
    examples = staging.training_examples(req.dataset.repo, req.dataset.evaluated_repo, rows)
    final = training.final_with_examples(examples) if isinstance(examples, int) else training.final_step
    saved = step_counts.checkpoint_schedule(final, training.checkpoint_period)  # where the data ends it
    kept = export_checks.retention(req) or training.max_to_keep
    cache = conversion_cache(req, ctx) if sha else None  # the key hashes the sha
    convert_out = stage_paths(req, ctx, "convert", 1).output
    train_paths = stage_paths(req, ctx, "train", 1)
    export_paths = stage_paths(req, ctx, "export", 1)
    attempt_dir = layout.parse_gs(convert_out)[1]

    def workload(stage: identity.Stage) -> dict[str, Any]:
        return {
            "name": identity.workload_name(run_id, stage, 1),
            "kind": KINDS[stage],
            "namespace": namespace,
            "queue": req.tpu.queue,
            "deadline_seconds": getattr(req.timeouts, stage),
        }

    stages = [
        {
            "stage": "convert",
            **workload("convert"),
            "runs_on": _placement(req, "convert"),
            "inputs": f"hf://{req.hf_repo}@{sha or req.hf_revision}",
            "output": convert_out,
            "done_when": f"Job Complete and {layout.gs(bucket, layout.converted_step_commit(attempt_dir))} exists",
            "skipped_when": "the conversion cache already has READY.json for the key (a cache hit)",
        },
        {
            "stage": "train",
            **workload("train"),
            "runs_on": f"Pathways head on {req.pathways.head_node_pool}; {req.tpu.slices} × "
            f"{req.tpu.type} ({req.tpu.topology}) workers",
            "inputs": train_paths.inputs,
            "output": train_paths.output,
            "final_step": final,
            "done_when": f"JobSet Completed, train_rl's log ends with 'RL Training Completed Successfully!', "
            f"and the newest step-level commit is the last step it reported: {run.uri(run.step_commit(final))} "
            f"(final step {final}; a split with fewer examples ends it earlier, cleanly)",
        },
        {
            "stage": "export",
            **workload("export"),
            "runs_on": _placement(req, "export"),
            "inputs": export_paths.inputs,
            "output": export_paths.output,
            "done_when": f"Job Complete, {layout.EXPORT_MANIFEST} (written last) lists every file "
            f"to_huggingface wrote and each is in the bucket at its size, among them {layout.HF_INDEX} "
            f"and every shard of its weight_map (or {layout.HF_SINGLE} and {layout.HF_CONFIG})",
        },
    ]
    plan: dict[str, Any] = {
        "plan_version": PLAN_VERSION,
        "run_id": run_id,
        "request": {
            "model": req.model,
            "hf_repo": req.hf_repo,
            "hf_revision": req.hf_revision,
            "preset": req.preset,
            "image": req.image,
            "placement": req.placement,
        },
        "pinned_sha": sha,
        "pinned_sha_note": None if sha else f"resolved at run time from {req.hf_revision!r} by plan",
        "pinning": pinning_lineage(req, ctx),
        "conversion": {
            "cache_key": cache.key if cache else None,
            "cache_key_note": None if cache else "resolved at run time (the key hashes the commit sha)",
            "recipe": commands.CONVERSION_RECIPE,
            "converter": converter_plan(req.model),
            "ready": layout.gs(state_bucket, cache.ready) if cache else None,
            "attempt_dir": convert_out,
            "pinned_source": pinned_source_uri(req, ctx, "convert", 1),
        },
        "stages": stages,
        "data": data_plan(req, run, data),
        "training": {  # (kept: what train_rl is given, export.step's retention included)
            "num_batches": training.num_batches,
            "rl.num_iterations": training.num_iterations,
            "train_fraction": training.train_fraction,
            "num_epoch": training.num_epoch,
            "final_step": final,
            "final_step_formula": "min(batches, ceil(max_steps / rl.num_iterations)) × rl.num_iterations, "
            "batches = int(num_batches × batch_size × train_fraction) examples × num_epoch ÷ batch_size "
            "(fewer if the split is shorter)",
            "max_steps": training.max_steps,
            "batch_size": training.batch_size,
            "final_step_explained": training.explain(examples if isinstance(examples, int) else None),
            "final_step_depends_on_data": True,
            "checkpoint_period": training.checkpoint_period,
            "checkpoints": saved,
            "checkpoints_kept": saved[-kept:],
            "max_num_checkpoints_to_keep": kept,
            # Which step export loads (docs/outcomes.md, "The exported step"): export.step, the
            # steps it may choose from, and whether rlpipe raised the retention to keep them.
            "export": export_plan(req, training, final),
            "eval_interval": training.eval_interval,
            "evaluations": {
                "pre_and_post": training.evaluates,
                "intermediate_steps": training.eval_steps(final),
            },
        },
        "capacity": capacity_plan(
            req, final, step_seconds=step_seconds, prices=prices, quota=(quotas or {}).get(req.tpu.queue)
        ),
        "paths": {
            "ledger": state.uri(state.ledger),
            "events": state.uri(state.events_prefix),
            "error": state.uri(state.error),
            "trained": run.uri(run.trained_base),
            "checkpoints": run.uri(run.checkpoints),
            "final_step_commit": run.uri(run.step_commit(final)),
            "export": run.uri(run.hf_dir),
            "pathways_scratch": ctx.pathways_scratch_uri,
        },
        "budgets": {
            **req.retry.budgets.model_dump(),
            "max_retries": req.retry.max_retries,
            "backoff": req.retry.backoff.model_dump(),
            "retryable_exit_codes": list(req.retry.retryable_exit_codes),
        },
        "deadlines": {
            **{stage: getattr(req.timeouts, stage) for stage in request_stages(req)},
            "queued": req.timeouts.queued,
        },
    }
    if sha is None:  # paths under the cache depend on the sha: show where the key goes
        plan = _replace_text(plan, conversion_cache(req, ctx).key, UNRESOLVED_KEY)
    return plan


UNRESOLVED_KEY = "<conv-key>"


def _file_source(f: Any) -> str | None:
    if f is None:
        return None
    return str(f.path) if f.path is not None else f"inline ({len(f.inline or '')} characters)"


def data_plan(req: Request, run: layout.RunLayout, pinned: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What train_rl trains and evaluates on and how it is rewarded (docs/datasets.md): each split,
    where the head stages it, and the request's own files; ``pinned`` when plan already pinned."""
    d = req.dataset

    def split(role: str, repo: str, revision: str, name: str) -> dict[str, Any]:
        entry = dict((pinned or {}).get(role) or {})
        return {
            "dataset": repo,
            "revision": revision,
            "subset": entry.get("subset") or (d.subset if role == "train" else d.evaluated_subset),
            "split": name,
            "pinned_sha": entry.get("sha"),
            "files": len(entry["files"]) if entry.get("files") is not None else None,
            "num_examples": entry.get("num_examples"),
            "staged_at": staging.data_files_pattern(run, role),
        }

    held_out = staging.splits_itself(d.repo, d.evaluated_repo)
    rewards = req.rewards
    return {
        "train": split("train", d.repo, d.revision, d.train_split),
        "eval": None if held_out else split("eval", d.evaluated_repo, d.evaluated_revision, d.eval_split),
        "eval_held_out": "5% of the training split, held out by train_rl" if held_out else None,
        "pinned_note": None
        if pinned
        else "each revision is pinned to its commit by plan (rlpipe plan --hub does it now)",
        "processor": _file_source(d.processor),
        "rewards": {
            "functions": list(rewards.functions) if rewards else list(staging.BUILTIN_REWARDS),
            "file": _file_source(rewards.file) if rewards else None,
            "builtin": rewards is None,
        },
        "chat_template": _file_source(req.chat_template) or req.training.data_template_path,
    }


def _replace_text(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {k: _replace_text(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_text(v, old, new) for v in value]
    return value


def _placement(req: Request, stage: str) -> str:
    disk = req.scratch.convert if stage == "convert" else req.scratch.export
    if req.placement == "cpu":
        return (
            f"one pod on {req.cpu_job.node_pool} ({req.cpu_job.cpu} CPU, {req.cpu_job.memory}, disk {disk})"
        )
    return f"the {req.tpu.type} slice, completion index 0 only (disk {disk})"


def converter_plan(model: str) -> dict[str, Any]:
    """Which MaxText converter mapping both conversions use for ``model`` (core.maxtext.model_names)."""
    known = model_names.models().get(model)
    return {
        "decoder_block": known.decoder_block if known else None,
        "param_mapping": known.param_mapping if known else None,
        "hf_id": known.hf_id if known else None,
        "source": model_names.source(),
    }


def render_text(plan: dict[str, Any]) -> str:
    """The plan for a person: one block per stage, then training, paths, budgets."""
    converter = plan["conversion"]["converter"]
    lines = [
        f"run {plan['run_id']}: {plan['request']['model']} from {plan['request']['hf_repo']}",
        f"  pinned sha: {plan['pinned_sha'] or plan['pinned_sha_note']}",
        f"  conversion cache key: {plan['conversion']['cache_key'] or plan['conversion']['cache_key_note']}",
        f"  converters: {converter['param_mapping']} ({converter['decoder_block']} architecture; "
        f"MaxText knows it as {converter['hf_id']}), from {converter['source']}",
    ]
    for stage in plan["stages"]:
        lines.append(f"{stage['stage']}: {stage['kind']} {stage['name']} on {stage['runs_on']}")
        lines.append(f"  in:  {stage['inputs']}")
        lines.append(f"  out: {stage['output']}")
        lines.append(f"  done when: {stage['done_when']}")
        lines.append(f"  deadline: {stage['deadline_seconds']} s")
    data = plan["data"]
    for role in ("train", "eval"):
        e = data[role]
        if e is None:
            lines.append(f"{role}: {data['eval_held_out']}")
            continue
        at = e["pinned_sha"] or e["revision"]
        count = f", {e['num_examples']} examples" if e["num_examples"] is not None else ""
        lines.append(f"{role}: {e['dataset']}@{at} subset {e['subset']} split {e['split']}{count}")
        lines.append(f"  staged at: {e['staged_at']}")
    if data["pinned_note"]:
        lines.append(f"  pinned: {data['pinned_note']}")
    r = data["rewards"]
    lines.append(
        f"rewards: {'built-in ' if r['builtin'] else ''}{', '.join(r['functions'])}"
        + (f" from {r['file']}" if r["file"] else "")
    )
    if data["processor"]:
        lines.append(f"processor: {data['processor']}")
    t = plan["training"]
    lines.append(
        f"training: ends at {t['final_step_explained']}; checkpoints at {t['checkpoints']} "
        f"(kept: {t['checkpoints_kept']})"
    )
    mid = t["evaluations"]["intermediate_steps"]
    lines.append(
        f"  rewards: {'Pre/Post RL Training lines' if t['evaluations']['pre_and_post'] else 'none (num_test_batches 0)'}"
        f"; intermediate evals at outer steps {mid or 'none'}"
    )
    lines.append("paths:")
    lines += [f"  {name}: {uri}" for name, uri in plan["paths"].items()]
    lines.append(f"  pinned source files: {plan['conversion']['pinned_source']}")
    b = plan["budgets"]
    lines.append(
        f"budgets: preempted {b['preempted']}, capacity {b['capacity']}, resources {b['resources']}, "
        f"transient {b['transient']}; at most {b['max_retries']} retries per stage"
    )
    c = plan["capacity"]
    lines.append(
        f"capacity: {c['provisioning']}, {c['chips']} chips; a preemption loses at most "
        f"{c['steps_at_risk_per_preemption']} of {final_of(plan)} steps ({c['steps_at_risk_rule']})"
    )
    hours = c["expected_hours"]
    lines.append(
        f"  expected {hours:g} h × {c['chips']} chips = {c['expected_chip_hours']:g} chip-hours of training"
        " (before any preemption)"
        if hours is not None
        else "  expected chip-hours: pass --step-seconds to estimate them"
    )
    unpriced = [mode for mode, row in c["per_mode"].items() if row["price_per_chip_hour"] is None]
    for mode, row in c["per_mode"].items():
        if mode not in unpriced:
            amount = f"${row['expected_cost']:,.2f}" if row["expected_cost"] is not None else "-"
            lines.append(f"  {mode:<12} cost {amount}; price {row['price']}")
    if unpriced:  # once, plainly (the JSON form keeps each price's source and note)
        lines.append(f"  cost: {cost.unset_hint(c['tpu_type'], unpriced)}")
    if c["quota"]:
        q = c["quota"]
        lines.append(
            f"  quota: queue {q['queue']} has {q['chips']} TPU chips ({q['source']}), shared by the runs in it"
        )
    lines += [f"  warning: {w}" for w in c["warnings"]]
    d = plan["deadlines"]
    lines.append(", ".join(f"{k} {v} s" for k, v in d.items()).join(("deadlines: ", "")))
    return "\n".join(lines) + "\n"


def final_of(plan: dict[str, Any]) -> int:
    return int(plan["training"]["final_step"])


def capacity_plan(
    req: Request,
    final: int,
    *,
    step_seconds: float | None,
    prices: dict[str, Any] | None,
    quota: Quota | None = None,
) -> dict[str, Any]:
    """Chips, steps at risk per preemption, and expected chip-hours and cost per provisioning mode.

    Hours are an estimate only when the caller gives the seconds per step (``--step-seconds``):
    nothing in a request says how fast a model trains. A price nobody published is unset. With
    the deployment's ``quota`` for the request's queue, a request over it is warned about."""
    doc = req.model_dump(mode="python")
    chips = tpu.SHAPES[req.tpu.type].chips * req.tpu.slices
    # Chip-hours and costs come from the unrounded hours: rounding the hours first and multiplying
    # by 64 chips moved the chip-hours by up to 0.03 (53.31 for 53.33). Only what is shown is rounded.
    hours = final * step_seconds / 3600 if step_seconds else None
    chip_hours = hours * chips if hours is not None else None
    beyond = []
    if chip_hours is not None and not (math.isfinite(chip_hours) and 0 <= chip_hours <= MAX_CHIP_HOURS):
        beyond.append(
            f"{step_seconds:g} s per step makes an estimate outside 0 to {MAX_CHIP_HOURS:,} chip-hours, "
            "rlpipe's ceiling; no hours or cost are estimated: check --step-seconds"
        )
        hours = chip_hours = None
    per_mode = {}
    for mode in cost.MODES:
        price = cost.price(req.tpu.type, mode, prices)
        per_mode[mode] = {
            "price": price.describe(),
            "price_per_chip_hour": price.per_chip_hour,
            "expected_cost": price.cost(chip_hours) if chip_hours is not None else None,
        }
    return {
        "provisioning": req.tpu.provisioning,
        "tpu_type": req.tpu.type,
        "slices": req.tpu.slices,
        "chips": chips,
        "steps_at_risk_per_preemption": provisioning.steps_at_risk(doc),
        "steps_at_risk_rule": "the steps since the last committed checkpoint: at most checkpoint_period, "
        "the whole run when nothing is committed before the final step; spot's default period keeps it "
        f"within {presets.SPOT_MAX_STEPS_AT_RISK:.0%} of the run",
        "warnings": [*provisioning.warnings(doc), *filter(None, [quota_warning(req, chips, quota)]), *beyond],
        "quota": {"queue": quota.queue, "chips": quota.chips, "source": quota.source} if quota else None,
        "expected_hours": round(hours, 3) if hours is not None else None,
        "expected_chip_hours": round(chip_hours, 2) if chip_hours is not None else None,
        "per_mode": per_mode,
    }


def export_plan(req: Request, training: steps.TrainingSteps, final: int) -> dict[str, Any]:
    """What export loads: ``export.step``, the steps ``best`` may choose from (each has a checkpoint
    and an evaluation), and the ``max_num_checkpoints_to_keep`` rlpipe passes for them (None: the
    run's own retention keeps them)."""
    spec = req.export
    step = spec.step if spec is not None else "last"
    out: dict[str, Any] = {"step": step, "max_num_checkpoints_to_keep_passed": export_checks.retention(req)}
    if step == "best":
        rule = spec.select if spec is not None and spec.select is not None else export_checks.DEFAULT_SELECT
        out["select"] = rule.model_dump()
        out["candidates"] = export_checks.candidate_steps(training, final)
    return out
