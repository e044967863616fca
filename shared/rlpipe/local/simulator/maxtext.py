"""What the three MaxText programs write to GCS, and in which order: tiny files, real names.

Everything here comes from DESIGN §4 and reference/manifests.md §4 (Orbax on GCS writes in
place and ``commit_success.txt`` last; MaxText's conversion step 0 with item ``items``; Tunix
checkpoints under ``<base>/<run_name>/checkpoints/actor/<step>/`` with ``model_params`` and
``optimizer_state``; the HF export's tokenizer, config, shards and index last). It is written
independently of the pipeline's own layout code on purpose: a pipeline tested against a
simulator built from its own constants would only agree with itself.

The programs run against a :class:`ProgramContext` (writes, logs, pauses and fault hooks), so
this module knows MaxText and nothing about Kubernetes. Log lines are the programs' own, with
absl's prefix; every one is described, with its source, in ``tests/fixtures/maxtext_facts.yaml``
(train_rl prints rewards only in its Pre/Post RL Training and Intermediate Eval lines). The
``rlpipe-pin``/``rlpipe-fetch`` steps are rlpipe's own script lines before the program (they read
the repo at the pinned sha), played here from the container's environment.
"""

from __future__ import annotations

import json
import math
import re
import struct
import time
from collections.abc import Mapping
from dataclasses import replace

from rlpipe.local.simulator.gcs_io import join
from rlpipe.local.simulator.program import Arguments, ProgramContext, ProgramExit
from rlpipe.local.simulator.publisher import hub_file
from rlpipe.local.simulator.rl_eval import TrainConfig, TrainSplit, eval_examples, train_data
from rlpipe.local.simulator.rl_eval import final_step as data_final_step

__all__ = [
    "PROGRAMS",
    "STAGES",
    "Arguments",
    "ProgramContext",
    "ProgramExit",
    "mean_reward",
    "stage_of_object",
]

STAGES = ("convert", "train", "export")
COMMIT_FILE = "commit_success.txt"  # Orbax: the step (or item) is finalized
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
PYTREE_METADATA = "_METADATA"
SHARDING = "_sharding"
ARRAY_METADATA = "array_metadatas/process_0"
CONVERSION_STEP = "0"  # to_maxtext saves one synchronous checkpoint at step 0
CONVERSION_ITEM = "items"
RL_ACTOR_DIR = ("checkpoints", "actor")  # <base>/<run_name>/checkpoints/actor/<step>/
RL_CHECKPOINTABLES = ("model_params", "optimizer_state")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
RL_DEFAULT_CHECKPOINT_PERIOD = 50  # rl.yml:187
RL_DEFAULT_KEEP = 10  # rl.yml:188 max_num_checkpoints_to_keep
RL_DEFAULTS = {  # rl.yml at maxtext-v0.2.4 (lines 43, 110, 113, 120, 128, 130, 132)
    "num_iterations": "1",
    "batch_size": "1",
    "num_batches": "4",
    "num_test_batches": "5",
    "train_fraction": "1.0",
    "eval_interval": "10",
    "num_epoch": "1",
}
ABSL_THREAD = 140318812  # any thread id; absl prints it right-aligned in 5 columns
# rlpipe's own script steps before the program (core/pinning.py): what they read and write.
PIN_MARK, FETCH_MARK = "rlpipe-pin:", "rlpipe-fetch:"
PINNED_MANIFEST = "rlpipe-pinned.json"
PINNED_REPO_FILES = ("config.json", "generation_config.json", *TOKENIZER_FILES)
HF_CONFIG = "config.json"
HF_INDEX = "model.safetensors.index.json"
HF_SINGLE = "model.safetensors"

SIMULATED_NOTE = "written by the rlpipe cluster simulator (simulated; not real MaxText output)"


def stage_of_object(name: str) -> str | None:
    """Which program writes an object with this name (bucket-relative or gs:// URI)?

    By MaxText's own file names only: the conversion's step ``0`` with item ``items``, the
    RL trainer's ``checkpoints/actor`` and ``tensorboard``, the exporter's Hugging Face files.
    """
    base = name.rsplit("/", 1)[-1]
    if "/checkpoints/actor/" in name or "/tensorboard/" in name:
        return "train"
    if base.endswith(".safetensors") or base in (HF_INDEX, HF_CONFIG, *TOKENIZER_FILES):
        return "export"
    step0 = f"/{CONVERSION_STEP}/"
    if f"{step0}{CONVERSION_ITEM}/" in name or name.endswith(
        (f"{step0}{COMMIT_FILE}", f"{step0}{CHECKPOINT_METADATA}")
    ):
        return "convert"
    return None


def mean_reward(step: int) -> float:
    """A deterministic, rising reward curve (what a healthy GRPO run looks like)."""
    return round(0.12 + 0.66 * (1.0 - math.exp(-step / 45.0)), 4)


def absl_line(ctx: ProgramContext, level: str, source: str, message: str) -> str:
    """``message`` as absl prints it: ``W0102 15:04:05.123456 140318812 train_rl.py:785] ...``."""
    now = ctx.now()
    t = time.gmtime(now)
    stamp = f"{t.tm_mon:02d}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{int(now % 1 * 1e6):06d}"
    return f"{level}{stamp} {ABSL_THREAD:5d} {source}] {message}"


def _eval_line(step: int, total: int) -> str:
    """The fields of evaluate_rl's result as train_rl formats them: repr() of each, reward to 4 places."""
    reward = mean_reward(step) if total > 0 else 0.0  # nothing scored: 0.0 (evaluate_rl.py:326)
    corr = round(total * min(1.0, reward))
    accuracy = corr / total * 100 if total > 0 else 0
    partial = min(total, corr + 1) / total * 100 if total > 0 else 0
    fmt = 100.0 if total > 0 else 0
    return (
        f"corr={corr!r}, total={total!r}, accuracy={accuracy!r}%, partial_accuracy={partial!r}%, "
        f"format_accuracy={fmt!r}%, mean_reward={reward:.4f}"
    )


# --------------------------------------------------------------------------- file contents


def _json(doc: object) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def _zarray() -> bytes:
    return _json(
        {
            "chunks": [2, 2],
            "compressor": {"id": "zstd", "level": 1},
            "dtype": "bfloat16",
            "fill_value": None,
            "filters": None,
            "order": "C",
            "shape": [2, 2],
            "zarr_format": 2,
        }
    )


def _pytree_files(arrays: list[str]) -> list[tuple[str, bytes]]:
    """An Orbax PyTree item without OCDBT or zarr3: per-array zarr v2 directories, then the
    sharding file, the per-process array metadata and finally the tree metadata."""
    files: list[tuple[str, bytes]] = []
    for array in arrays:
        files.append((f"{array}/.zarray", _zarray()))
        files.append((f"{array}/0.0", bytes(8)))  # one 2x2 bfloat16 chunk of zeros
    files.append(
        (
            SHARDING,
            _json({a: {"sharding_type": "SingleDeviceSharding", "device_str": "TFRT_CPU_0"} for a in arrays}),
        )
    )
    files.append(
        (
            ARRAY_METADATA,
            _json(
                {
                    "array_metadatas": [
                        {"array_metadata": {"param_name": a, "write_shape": [2, 2]}} for a in arrays
                    ]
                }
            ),
        )
    )
    files.append(
        (
            PYTREE_METADATA,
            _json(
                {
                    "tree_metadata": {a: {"value_metadata": {"value_type": "jax.Array"}} for a in arrays},
                    "use_zarr3": False,
                    "_simulated": SIMULATED_NOTE,
                }
            ),
        )
    )
    return files


def _checkpoint_metadata(now_ns: int, custom: Mapping[str, object]) -> bytes:
    return _json(
        {
            "init_timestamp_nsecs": now_ns,
            "commit_timestamp_nsecs": now_ns,
            "metrics": {},
            "performance_metrics": {},
            "custom_metadata": dict(custom),
            "_simulated": SIMULATED_NOTE,
        }
    )


def _commit(path: str) -> bytes:
    return f"Checkpoint commit was successful to {path}\n".encode()


def safetensors_bytes(tensors: list[str]) -> tuple[bytes, int]:
    """A valid safetensors file of 2x2 bfloat16 zero tensors; returns (bytes, data size)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt", "simulated": "true"}}
    for i, tensor in enumerate(tensors):
        header[tensor] = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8 * i, 8 * (i + 1)]}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
    data = bytes(8 * len(tensors))
    return struct.pack("<Q", len(head)) + head + data, len(data)


def _layer_names(scan_layers: bool, names: list[str]) -> list[str]:
    layers = ["layers"] if scan_layers else ["layers_0", "layers_1"]
    return [f"decoder.{layer}.{name}" for layer in layers for name in names]


# --------------------------------------------------------------------------- programs


def _write_all(
    ctx: ProgramContext,
    base: str,
    files: list[tuple[str, bytes]],
    seconds: float,
    *,
    peak_after: int | None = None,
) -> None:
    per_file = seconds / max(len(files), 1)
    for i, (name, data) in enumerate(files):
        ctx.pause(per_file)
        ctx.write(join(base, name), data)
        if peak_after is not None and i + 1 == peak_after:
            ctx.hook("peak")


def _pinned_steps(ctx: ProgramContext, args: Arguments) -> None:
    """rlpipe's script steps before the program: pin the repo at the sha, or fetch the pinned files."""
    if "pin" in args.steps:
        repo, rev = args.env.get("RLPIPE_HF_REPO", "?"), args.env.get("RLPIPE_HF_REVISION", "?")
        dest, local = args.env.get("RLPIPE_PINNED_URI", ""), args.env.get("RLPIPE_SNAPSHOT_DIR", "?")
        ctx.log(f"{PIN_MARK} downloading {repo} at {rev} into {local}")
        if not dest:
            raise ProgramExit(1, message="KeyError: 'RLPIPE_PINNED_URI'")
        for name in PINNED_REPO_FILES:
            ctx.write(join(dest, name), _json({"_simulated": SIMULATED_NOTE}))
        files = [{"path": n, "copied": True} for n in PINNED_REPO_FILES]
        if (card := hub_file(ctx, repo, rev, "README.md")) is not None:  # type: ignore[arg-type]
            ctx.write(join(dest, "README.md"), card)
            files.append({"path": "README.md", "copied": True})
        files.append({"path": HF_SINGLE, "size": 0})
        ctx.write(join(dest, PINNED_MANIFEST), _json({"hf_repo": repo, "revision": rev, "files": files}))
        ctx.log(f"{PIN_MARK} copied {len(PINNED_REPO_FILES)} files and {PINNED_MANIFEST} to {dest}")
    if "fetch" in args.steps:
        src, local = args.env.get("RLPIPE_PINNED_URI", ""), args.env.get("RLPIPE_PINNED_DIR", "?")
        names = ctx.list(src) if src else []
        if join(src, PINNED_MANIFEST) not in names:
            raise ProgramExit(
                1, message=f"{FETCH_MARK} no pinned files at {src} ({PINNED_MANIFEST} is missing)"
            )
        ctx.log(f"{FETCH_MARK} {len(names)} files from {src} in {local}")
    if "inputs" in args.steps:  # the head's own files verified, the pinned data staged
        from rlpipe.local.simulator.inputs import stage_inputs

        stage_inputs(ctx, args)


def run_convert(ctx: ProgramContext, args: Arguments) -> int:
    """``to_maxtext``: convert from the local snapshot, save Orbax step 0 synchronously."""
    base = args.require("base_output_directory")
    ctx.hook("start")  # a fault at start strikes before the script's first step
    _pinned_steps(ctx, args)
    model_id = args.flags.get("hf_model_path", "?")
    scan_layers = args.boolean("scan_layers", True)
    step_dir = join(base, CONVERSION_STEP)
    ctx.log(
        absl_line(
            ctx,
            "I",
            "to_maxtext.py:925",
            f"Lazy loading ENABLED. Initializing LazyHFLoader for: {model_id}...",
        )
    )
    if ctx.exists(join(step_dir, COMMIT_FILE)):
        raise ProgramExit(1, message=f"orbax: step 0 already exists at {step_dir} (StepAlreadyExistsError)")
    total = ctx.duration("convert")
    ctx.log(absl_line(ctx, "I", "to_maxtext.py:155", f"Loading index file: {HF_INDEX}"))
    ctx.pause(total * 0.4)
    items = join(step_dir, CONVERSION_ITEM)
    arrays = [
        "params.params.token_embedder.embedding",
        "params.params.decoder.decoder_norm.scale",
        *(
            f"params.params.{n}"
            for n in _layer_names(scan_layers, ["self_attention.query.kernel", "mlp.wi_0.kernel"])
        ),
    ]
    files = _pytree_files(arrays)
    _write_all(ctx, items, files, total * 0.5, peak_after=len(arrays))  # oom strikes mid-write
    ctx.write(join(items, COMMIT_FILE), _commit(items))
    ctx.pause(total * 0.1)
    ctx.write(
        join(step_dir, CHECKPOINT_METADATA), _checkpoint_metadata(ctx_ns(ctx), {"scan_layers": scan_layers})
    )
    ctx.write(join(step_dir, COMMIT_FILE), _commit(step_dir))
    ctx.log(absl_line(ctx, "I", "utils.py:1303", "saved a checkpoint at step 0"))
    ctx.log(absl_line(ctx, "I", "to_maxtext.py:1109", f"Conversion complete. Checkpoint saved to {base}"))
    ctx.log(absl_line(ctx, "I", "to_maxtext.py:1110", f"Overall Elapse: {total / 60:.2f} min"))
    return 0


def committed_steps(ctx: ProgramContext, actor_dir: str) -> list[int]:
    """Steps whose directory holds ``commit_success.txt`` (Orbax's own "finalized?" test)."""
    pattern = re.compile(re.escape(actor_dir.rstrip("/")) + r"/(\d+)/" + re.escape(COMMIT_FILE) + "$")
    return sorted(int(m.group(1)) for uri in ctx.list(actor_dir) if (m := pattern.match(uri)))


def train_steps(args: Arguments) -> int:
    """MaxText's ``train_steps`` (configs/types.py:4655-4660): Tunix's max_steps."""
    iterations = args.get("rl.num_iterations") or args.get("num_iterations") or RL_DEFAULTS["num_iterations"]
    batches = args.integer("num_batches", int(RL_DEFAULTS["num_batches"]))
    fraction = args.number("train_fraction", RL_DEFAULTS["train_fraction"])
    epochs = args.integer("num_epoch", int(RL_DEFAULTS["num_epoch"]))
    return int(batches * int(iterations) * fraction * epochs)


def held_out_of(args: Arguments, rows: int | None) -> int | None:
    """What train_rl trains on when it evaluates a dataset on itself: it splits the training split
    with ``train_test_split(test_size=0.05)`` first (train_rl.py:253-279, 306-330), whose test side
    is ``ceil(0.05 × n)`` and train side the rest (datasets 5.2.0 ``arrow_dataset.py:5144,5154``)."""
    from rlpipe.core.staging import SELF_SPLIT_DATASETS

    name = args.get("dataset_name")
    if rows is None or name not in SELF_SPLIT_DATASETS or args.get("eval_dataset_name") != name:
        return rows
    return rows - math.ceil(0.05 * rows)


def train_split(ctx: ProgramContext, args: Arguments | None = None) -> TrainSplit:
    """The train split this train_rl reads: how many examples, and how many prompts the length
    filter drops. The scenario's ``train-examples``/``long-prompts`` entries for this workload win
    (``rl_eval.train_data``); else the rows of the staged files ``hf_train_files`` names
    (``inputs.staged_rows``); plentiful when train_rl is pointed at no files."""
    from rlpipe.local.simulator.inputs import staged_rows

    workload = getattr(ctx, "workload", None)  # runtime.ProgramRun's; a test's container has none
    given = train_data(getattr(workload, "faults", None) or ())
    if given.rows is not None:
        return given
    rows = staged_rows(ctx, args) if args is not None else None  # the staged split's own size
    return replace(given, rows=held_out_of(args, rows) if args is not None else rows)


def final_step(args: Arguments, split: TrainSplit, restored: int = 0) -> int:
    """The step this train_rl ends at: its data and Tunix's loop played (``rl_eval``)."""
    return data_final_step(TrainConfig.from_args(args, RL_DEFAULTS), split, restored)


def run_train(ctx: ProgramContext, args: Arguments) -> int:
    """``train_rl``: GRPO with Tunix checkpoints every ``checkpoint_period`` steps and at the
    end, resuming from the latest committed step, keeping the newest N checkpoints."""
    base = args.require("base_output_directory")
    run_name = args.require("run_name")
    load = args.require("load_parameters_path")
    iterations = int(
        args.get("rl.num_iterations") or args.get("num_iterations") or RL_DEFAULTS["num_iterations"]
    )
    period = args.integer("checkpoint_period", RL_DEFAULT_CHECKPOINT_PERIOD)
    keep = args.integer("max_num_checkpoints_to_keep", RL_DEFAULT_KEEP)
    enabled = args.boolean("enable_checkpointing", True)
    interval = args.integer("eval_interval", int(RL_DEFAULTS["eval_interval"]))
    test_batches = args.integer("num_test_batches", int(RL_DEFAULTS["num_test_batches"]))
    eval_total = eval_examples(args, RL_DEFAULTS)  # eval_batch_size, not batch_size, when set
    if period < 1:
        raise ProgramExit(1, message=f"checkpoint_period={period} must be >= 1")
    _pinned_steps(ctx, args)
    actor = join(base, run_name, *RL_ACTOR_DIR)
    if not ctx.exists_under(load):
        raise ProgramExit(1, message=f"no checkpoint found at load_parameters_path={load}")
    ctx.hook("start")
    ctx.write(
        join(base, run_name, "tensorboard", f"events.out.tfevents.{ctx_ns(ctx) // 10**9}.pathways-head"),
        b"simulated tensorboard event file\n",
    )
    done = committed_steps(ctx, actor) if enabled else []
    start = done[-1] if done else 0
    ctx.pause(ctx.duration("train_startup"))
    if start:  # Tunix restores the newest committed step while the trainer is built
        ctx.log(
            absl_line(
                ctx, "I", "checkpoint_manager.py:292", f"Restored params from step: {start} in 1.250 seconds"
            )
        )
        ctx.note("resume", str(start))
    if test_batches > 0:
        ctx.log(absl_line(ctx, "W", "train_rl.py:785", f"Pre RL Training: {_eval_line(start, eval_total)}"))
        if interval > 0:
            message = (
                f"[intermediate-eval] hook installed: evaluate(...) will fire every {interval} outer steps."
            )
            ctx.log(absl_line(ctx, "W", "utils_rl.py:876", message))
    ctx.log(absl_line(ctx, "W", "train_rl.py:799", "Starting RL training..."))
    # Where rl_trainer.train() ends: max_steps, or earlier where the data ends (a resumed run skips
    # one batch per restored step); no batch at all raises out of train() before any step.
    final = final_step(args, train_split(ctx, args), start)
    evaluated = [0]

    def metrics(step: int) -> None:
        """Tunix writes step N's metrics during update N+1 (or at close), then runs the hook."""
        loss = 1.0 / math.sqrt(step + 1)
        line = f"Train step {step} training loss: {loss:f}  - training perplexity: {math.exp(loss):f}"
        ctx.log(absl_line(ctx, "I", "peft_trainer.py:735", line))
        outer = step // iterations
        if (
            test_batches > 0
            and interval > 0
            and outer > 0
            and outer != evaluated[0]
            and outer % interval == 0
        ):
            evaluated[0] = outer
            message = f"Intermediate Eval (step={outer}): {_eval_line(step, eval_total)}"
            ctx.log(absl_line(ctx, "W", "hooks.py:98", message))

    if start < final:
        ctx.hook("peak", start + 1)
    saved = set(done)
    for step in range(start + 1, final + 1):
        saving = enabled and step % period == 0
        ctx.hook("step", step, saving=saving or (enabled and step == final))
        ctx.pause(ctx.duration("step"))
        if step > start + 1:
            metrics(step - 1)
        ctx.note("step", str(step))
        if saving:
            _save_rl_checkpoint(ctx, actor, step, keep)
            saved.add(step)
    if start < final:
        metrics(final)  # close(): the last buffered metrics, then the forced final save
    if enabled and final >= 1 and final not in saved and (not done or done[-1] < final):
        _save_rl_checkpoint(ctx, actor, final, keep)
    ctx.log(absl_line(ctx, "W", "train_rl.py:810", "RL Training Completed Successfully!"))
    if test_batches > 0:
        ctx.log(absl_line(ctx, "W", "train_rl.py:823", f"Post RL Training: {_eval_line(final, eval_total)}"))
    return 0


def _save_rl_checkpoint(ctx: ProgramContext, actor: str, step: int, keep: int) -> None:
    """Orbax's order on GCS: item files, step metadata, each item's commit file, the step's last."""
    step_dir = join(actor, str(step))
    params = _pytree_files(
        [
            "decoder.decoder_norm.scale",
            "token_embedder.embedding",
            "decoder.layers_0.self_attention.query.kernel",
        ]
    )
    optimizer = _pytree_files(["opt_state.0.v.decoder.decoder_norm.scale", "opt_state.1.count"])
    save_time = ctx.duration("checkpoint_save")
    _write_all(ctx, join(step_dir, RL_CHECKPOINTABLES[0]), params, save_time * 0.5)
    _write_all(ctx, join(step_dir, RL_CHECKPOINTABLES[1]), optimizer, save_time * 0.5)
    ctx.write(join(step_dir, CHECKPOINT_METADATA), _checkpoint_metadata(ctx_ns(ctx), {}))
    items = [join(step_dir, item) for item in RL_CHECKPOINTABLES]
    ctx.write(join(items[0], COMMIT_FILE), _commit(items[0]))
    ctx.hook("save", step)  # a preemption here leaves model_params committed but not the step
    ctx.write(join(items[1], COMMIT_FILE), _commit(items[1]))
    ctx.write(join(step_dir, COMMIT_FILE), _commit(step_dir))
    ctx.note("checkpoint", str(step))
    steps = committed_steps(ctx, actor)
    for old in steps[:-keep] if len(steps) > keep else []:
        for uri in ctx.list(join(actor, str(old))):
            ctx.delete(uri)
        ctx.note("deleted", f"step {old} (max_num_checkpoints_to_keep={keep})")


def hf_tensor_names(layers: int = 2) -> list[str]:
    names = ["model.embed_tokens.weight"]
    for i in range(layers):
        names += [f"model.layers.{i}.self_attn.{p}_proj.weight" for p in ("q", "k", "v", "o")]
        names += [f"model.layers.{i}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        names += [f"model.layers.{i}.input_layernorm.weight"]
    return [*names, "model.norm.weight"]


def run_export(ctx: ProgramContext, args: Arguments) -> int:
    """``to_huggingface``: tokenizer, then config, then the shards, and the index last."""
    load = args.require("load_parameters_path")
    base = args.require("base_output_directory")
    _pinned_steps(ctx, args)
    if not ctx.exists_under(load):
        raise ProgramExit(1, message=f"no checkpoint found at load_parameters_path={load}")
    ctx.hook("start")
    total = ctx.duration("export")
    ctx.pause(total * 0.4)
    ctx.log(
        absl_line(
            ctx, "I", "to_huggingface.py:509", f"Elapse for checkpoint load: {total * 0.4 / 60:.2f} min"
        )
    )
    staging = f"{args.env.get('TMPDIR', '/tmp')}/maxtext_hf_save_{ctx_ns(ctx) % 10**8:08d}"
    ctx.log(absl_line(ctx, "I", "utils.py:615", f"   Using temporary local staging directory: {staging}"))
    tokenizer = {"_simulated": SIMULATED_NOTE}
    for name in TOKENIZER_FILES:
        ctx.write(join(base, name), _json(tokenizer))
    dtype = args.get("weight_dtype", "bfloat16")
    ctx.write(
        join(base, HF_CONFIG),
        _json({"model_type": args.get("model_name"), "torch_dtype": dtype, "_simulated": SIMULATED_NOTE}),
    )
    shards = max(1, ctx.export_shards)
    tensors = hf_tensor_names()
    per_shard = math.ceil(len(tensors) / shards)
    groups = [tensors[i * per_shard : (i + 1) * per_shard] for i in range(shards)]
    weight_map: dict[str, str] = {}
    total_size = 0
    for i, group in enumerate(groups, start=1):
        file = HF_SINGLE if shards == 1 else f"model-{i:05d}-of-{shards:05d}.safetensors"
        data, size = safetensors_bytes(group)
        ctx.pause(total * 0.5 / shards)
        ctx.write(join(base, file), data)
        total_size += size
        weight_map.update(dict.fromkeys(group, file))
        if i == 1:
            ctx.hook("peak")  # oom strikes after the first shard: a partial export is left behind
    if shards > 1:
        index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
        ctx.write(join(base, HF_INDEX), json.dumps(index, indent=2, sort_keys=True).encode())
    message = f"\u2705 MaxText model successfully saved in HuggingFace format at {base}"
    ctx.log(absl_line(ctx, "I", "to_huggingface.py:464", message))
    ctx.log(absl_line(ctx, "I", "to_huggingface.py:581", f"Overall Elapse: {total / 60:.2f} min"))
    return 0


def ctx_ns(ctx: ProgramContext) -> int:
    return int(ctx.now() * 1e9)


PROGRAMS = {"convert": run_convert, "train": run_train, "export": run_export}
