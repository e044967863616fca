"""What the three MaxText programs write to GCS, and in which order: tiny files, real names.

Everything here comes from DESIGN §4 and reference/manifests.md §4 (Orbax on GCS writes in
place and ``commit_success.txt`` last; MaxText's conversion step 0 with item ``items``; Tunix
checkpoints under ``<base>/<run_name>/checkpoints/actor/<step>/`` with ``model_params`` and
``optimizer_state``; the HF export's tokenizer, config, shards and index last). It is written
independently of the pipeline's own layout code on purpose: a pipeline tested against a
simulator built from its own constants would only agree with itself.

The programs run against a :class:`ProgramContext` (writes, logs, pauses and fault hooks), so
this module knows MaxText and nothing about Kubernetes.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from rlpipe.local.simulator.gcs_io import join

STAGES = ("convert", "train", "export")
MODULES = {
    "maxtext.checkpoint_conversion.to_maxtext": "convert",
    "maxtext.trainers.post_train.rl.train_rl": "train",
    "maxtext.checkpoint_conversion.to_huggingface": "export",
}

COMMIT_FILE = "commit_success.txt"  # Orbax: the step (or item) is finalized
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
PYTREE_METADATA = "_METADATA"
SHARDING = "_sharding"
ARRAY_METADATA = "array_metadatas/process_0"
CONVERSION_STEP = "0"  # to_maxtext saves one synchronous checkpoint at step 0
CONVERSION_ITEM = "items"
RL_ACTOR_DIR = ("checkpoints", "actor")  # <base>/<run_name>/checkpoints/actor/<step>/
RL_CHECKPOINTABLES = ("model_params", "optimizer_state")
RL_DEFAULT_CHECKPOINT_PERIOD = 50  # rl.yml
RL_DEFAULT_KEEP = 10  # rl.yml max_num_checkpoints_to_keep
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
HF_CONFIG = "config.json"
HF_INDEX = "model.safetensors.index.json"
HF_SINGLE = "model.safetensors"

SIMULATED_NOTE = "written by the rlpipe cluster simulator (simulated; not real MaxText output)"


class ProgramExit(Exception):
    """The program ended with a non-zero exit code (``reason`` as the kubelet reports it)."""

    def __init__(self, code: int, reason: str = "Error", message: str = "") -> None:
        super().__init__(f"exit code {code} ({reason}){': ' + message if message else ''}")
        self.code = code
        self.reason = reason
        self.message = message


class ProgramContext(Protocol):
    """What a simulated program may do: the container's side of the world."""

    export_shards: int

    def now(self) -> float: ...
    def log(self, line: str) -> None: ...
    def pause(self, simulated_seconds: float) -> None: ...
    def duration(self, name: str) -> float: ...
    def write(self, uri: str, data: bytes | str) -> None: ...
    def list(self, prefix_uri: str) -> list[str]: ...
    def exists_under(self, prefix_uri: str) -> bool: ...
    def exists(self, uri: str) -> bool: ...
    def delete(self, uri: str) -> None: ...
    def note(self, kind: str, detail: str) -> None: ...
    def hook(self, point: str, step: int = 0, *, saving: bool = False) -> None:
        """A place where an injected fault may strike: "start", "peak" (the memory high-water
        mark), "step" (a training step begins) and "save" (mid-checkpoint)."""


@dataclass(frozen=True)
class Arguments:
    """``key=value`` arguments (MaxText config overrides) and ``--flag[=value]`` flags."""

    values: Mapping[str, str]
    flags: Mapping[str, str]

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def require(self, key: str) -> str:
        value = self.values.get(key)
        if not value:
            raise ProgramExit(1, message=f"{key} is required but was not passed")
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        raw = self.values.get(key)
        if raw is None:
            if default is None:
                raise ProgramExit(1, message=f"{key} is required but was not passed")
            return default
        try:
            return int(raw)
        except ValueError:
            raise ProgramExit(1, message=f"{key}={raw!r} is not an integer") from None

    def boolean(self, key: str, default: bool) -> bool:
        raw = self.values.get(key)
        return default if raw is None else raw.strip().lower() in ("true", "1", "yes")

    @classmethod
    def parse(cls, argv: list[str]) -> Arguments:
        values: dict[str, str] = {}
        flags: dict[str, str] = {}
        for arg in argv:
            if arg.startswith("--"):
                name, sep, value = arg[2:].partition("=")
                flags[name] = value if sep else "true"
            elif "=" in arg:
                key, _, value = arg.partition("=")
                values[key] = value
        return cls(values, flags)


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


def run_convert(ctx: ProgramContext, args: Arguments) -> int:
    """``to_maxtext``: download the HF checkpoint, convert, save Orbax step 0 synchronously."""
    base = args.require("base_output_directory")
    repo = args.flags.get("hf_model_path", "?")
    revision = args.flags.get("revision", "main")
    scan_layers = args.boolean("scan_layers", True)
    step_dir = join(base, CONVERSION_STEP)
    ctx.log(
        f"to_maxtext: model_name={args.get('model_name')} loading {repo}@{revision} from the Hugging Face Hub"
    )
    ctx.hook("start")
    if ctx.exists(join(step_dir, COMMIT_FILE)):
        raise ProgramExit(1, message=f"orbax: step 0 already exists at {step_dir} (StepAlreadyExistsError)")
    total = ctx.duration("convert")
    ctx.pause(total * 0.4)
    ctx.log(f"to_maxtext: converted weights (scan_layers={str(scan_layers).lower()}); saving to {step_dir}")
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
    ctx.log(f"to_maxtext: saved checkpoint step 0 to {step_dir}")
    return 0


def committed_steps(ctx: ProgramContext, actor_dir: str) -> list[int]:
    """Steps whose directory holds ``commit_success.txt`` (Orbax's own "finalized?" test)."""
    pattern = re.compile(re.escape(actor_dir.rstrip("/")) + r"/(\d+)/" + re.escape(COMMIT_FILE) + "$")
    return sorted(int(m.group(1)) for uri in ctx.list(actor_dir) if (m := pattern.match(uri)))


def run_train(ctx: ProgramContext, args: Arguments) -> int:
    """``train_rl``: GRPO with Tunix checkpoints every ``checkpoint_period`` steps and at the
    end, resuming from the latest committed step, keeping the newest N checkpoints."""
    base = args.require("base_output_directory")
    run_name = args.require("run_name")
    load = args.require("load_parameters_path")
    num_batches = args.integer("num_batches")
    period = args.integer("checkpoint_period", RL_DEFAULT_CHECKPOINT_PERIOD)
    keep = args.integer("max_num_checkpoints_to_keep", RL_DEFAULT_KEEP)
    enabled = args.boolean("enable_checkpointing", True)
    if num_batches < 1 or period < 1:
        raise ProgramExit(1, message=f"num_batches={num_batches} and checkpoint_period={period} must be >= 1")
    actor = join(base, run_name, *RL_ACTOR_DIR)
    ctx.log(f"train_rl: loading parameters from load_parameters_path={load}")
    if not ctx.exists_under(load):
        raise ProgramExit(1, message=f"no checkpoint found at load_parameters_path={load}")
    ctx.hook("start")
    ctx.write(
        join(base, run_name, "tensorboard", f"events.out.tfevents.{ctx_ns(ctx) // 10**9}.pathways-head"),
        b"simulated tensorboard event file\n",
    )
    done = committed_steps(ctx, actor) if enabled else []
    start = done[-1] if done else 0
    if start:
        ctx.log(f"train_rl: found committed checkpoint {join(actor, str(start))}; resuming from step {start}")
        ctx.note("resume", str(start))
    ctx.pause(ctx.duration("train_startup"))
    ctx.log(f"Pre RL Training: step={start} eval_batches=4 mean_reward={mean_reward(start):.4f}")
    if start < num_batches:
        ctx.hook("peak", start + 1)
    for step in range(start + 1, num_batches + 1):
        saving = enabled and (step % period == 0 or step == num_batches)
        ctx.hook("step", step, saving=saving)
        ctx.pause(ctx.duration("step"))
        loss = 1.0 / math.sqrt(step + 1)
        reward = mean_reward(step)
        ctx.log(
            f"Reshard finished; train step {step}/{num_batches}: loss={loss:.4f} mean_reward={reward:.4f}"
        )
        ctx.note("step", str(step))
        if saving:
            _save_rl_checkpoint(ctx, actor, step, keep)
    ctx.log(f"Post RL Training: step={num_batches} eval_batches=4 mean_reward={mean_reward(num_batches):.4f}")
    return 0


def _save_rl_checkpoint(ctx: ProgramContext, actor: str, step: int, keep: int) -> None:
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
    ctx.hook("save", step)  # a preemption here leaves a step directory without a commit file
    _write_all(ctx, join(step_dir, RL_CHECKPOINTABLES[1]), optimizer, save_time * 0.5)
    ctx.write(join(step_dir, CHECKPOINT_METADATA), _checkpoint_metadata(ctx_ns(ctx), {}))
    ctx.write(join(step_dir, COMMIT_FILE), _commit(step_dir))
    ctx.log(f"checkpoint_manager: saved step {step} to {step_dir}")
    ctx.note("checkpoint", str(step))
    steps = committed_steps(ctx, actor)
    for old in steps[:-keep] if len(steps) > keep else []:
        for uri in ctx.list(join(actor, str(old))):
            ctx.delete(uri)
        ctx.log(f"checkpoint_manager: deleted step {old} (max_num_checkpoints_to_keep={keep})")


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
    ctx.log(f"to_huggingface: model_name={args.get('model_name')} loading MaxText checkpoint from {load}")
    if not ctx.exists_under(load):
        raise ProgramExit(1, message=f"no checkpoint found at load_parameters_path={load}")
    ctx.hook("start")
    total = ctx.duration("export")
    ctx.pause(total * 0.4)
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
    ctx.log(f"to_huggingface: saved {shards} shard(s) to {base}")
    return 0


def ctx_ns(ctx: ProgramContext) -> int:
    return int(ctx.now() * 1e9)


PROGRAMS = {"convert": run_convert, "train": run_train, "export": run_export}
