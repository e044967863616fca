"""What the three MaxText programs write to GCS, and in which order: tiny files, real names.

Everything here comes from docs/design.md#independent-knowledge and reference/manifests.md §4 (Orbax on GCS writes in
place and ``commit_success.txt`` last; MaxText's conversion step 0 with item ``items``; Tunix
checkpoints under ``<base>/<run_name>/checkpoints/actor/<step>/`` with ``model_params`` and
``optimizer_state``; the HF export's tokenizer, config, shards and index last). It is written
independently of the pipeline's own layout code on purpose: a pipeline tested against a
simulator built from its own constants would only agree with itself.

The programs run against a :class:`ProgramContext` (writes, logs, pauses and fault hooks), so
this module knows MaxText and nothing about Kubernetes. Log lines are the programs' own, in the
format each program prints them (``.absl_log``: absl's prefix for to_huggingface, Python logging's
default one for to_maxtext); every one is described, with its source, in
``tests/fixtures/maxtext_facts.yaml``. The converted arrays' names are ``.converted_params``'.
``tests/programs/test_programs_simulator.py`` holds both converters' files and lines to the real programs'. The conversion and the export are played here, train_rl in
``.train_rl``; Orbax's checkpoint files are ``.orbax``'s, and the ``rlpipe-pin``/``rlpipe-fetch``
steps, rlpipe's own script lines before each program, ``.pinning``'s; the export script's last
step, which uploads what to_huggingface wrote with its manifest, is rlpipe's own program, run for
real (``.export_step``).
"""

from __future__ import annotations

import json
import math
import struct

from rlpipe.local.simulator.absl_log import absl_line, logging_line
from rlpipe.local.simulator.converted_params import converted_arrays
from rlpipe.local.simulator.export_step import run_manifest_step
from rlpipe.local.simulator.gcs_io import join
from rlpipe.local.simulator.orbax import (
    CHECKPOINT_METADATA,
    COMMIT_FILE,
    SIMULATED_NOTE,
    checkpoint_metadata,
    commit_marker,
    json_bytes,
    now_ns,
    pytree_files,
    write_all,
)
from rlpipe.local.simulator.pinning import HF_SINGLE, TOKENIZER_FILES, pinned_steps
from rlpipe.local.simulator.program import Arguments, ProgramContext, ProgramExit
from rlpipe.local.simulator.train_rl import run_train

__all__ = ["PROGRAMS", "STAGES", "Arguments", "ProgramContext", "ProgramExit", "stage_of_object"]

STAGES = ("convert", "train", "export")
CONVERSION_STEP = "0"  # to_maxtext saves one synchronous checkpoint at step 0
CONVERSION_ITEM = "items"
HF_CONFIG = "config.json"
HF_INDEX = "model.safetensors.index.json"
# What the export's tokenizer.save_pretrained writes (utils/utils.py:654-657) with transformers 5.12,
# in its order: no special_tokens_map.json any more, the chat template in a file of its own.
EXPORTED_TOKENIZER_FILES = ("tokenizer_config.json", "chat_template.jinja", "tokenizer.json")


def stage_of_object(name: str) -> str | None:
    """Which program writes an object with this name (bucket-relative or gs:// URI)?

    By MaxText's own file names only: the conversion's step ``0`` with item ``items``, the
    RL trainer's ``checkpoints/actor`` and ``tensorboard``, the exporter's Hugging Face files.
    """
    base = name.rsplit("/", 1)[-1]
    if "/checkpoints/actor/" in name or "/tensorboard/" in name:
        return "train"
    if base.endswith(".safetensors") or base in (
        HF_INDEX,
        HF_CONFIG,
        *TOKENIZER_FILES,
        *EXPORTED_TOKENIZER_FILES,
    ):
        return "export"
    step0 = f"/{CONVERSION_STEP}/"
    if f"{step0}{CONVERSION_ITEM}/" in name or name.endswith(
        (f"{step0}{COMMIT_FILE}", f"{step0}{CHECKPOINT_METADATA}")
    ):
        return "convert"
    return None


def safetensors_bytes(tensors: list[str]) -> tuple[bytes, int]:
    """A valid safetensors file of 2x2 bfloat16 zero tensors; returns (bytes, data size)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt", "simulated": "true"}}
    for i, tensor in enumerate(tensors):
        header[tensor] = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8 * i, 8 * (i + 1)]}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
    data = bytes(8 * len(tensors))
    return struct.pack("<Q", len(head)) + head + data, len(data)


# --------------------------------------------------------------------------- programs


def run_convert(ctx: ProgramContext, args: Arguments) -> int:
    """``to_maxtext``: convert from the local snapshot, save Orbax step 0 synchronously."""
    base = args.require("base_output_directory")
    ctx.hook("start")  # a fault at start strikes before the script's first step
    pinned_steps(ctx, args)
    model_id = args.flags.get("hf_model_path", "?")
    scan_layers = args.boolean("scan_layers", True)
    step_dir = join(base, CONVERSION_STEP)
    ctx.log(logging_line("I", f"Lazy loading ENABLED. Initializing LazyHFLoader for: {model_id}..."))
    if ctx.exists(join(step_dir, COMMIT_FILE)):
        raise ProgramExit(1, message=f"orbax: step 0 already exists at {step_dir} (StepAlreadyExistsError)")
    total = ctx.duration("convert")
    ctx.log(logging_line("I", f"Loading index file: {HF_INDEX}"))
    ctx.pause(total * 0.4)
    items = join(step_dir, CONVERSION_ITEM)
    arrays = converted_arrays(args.get("model_name"), scan_layers)
    files = pytree_files(arrays)
    write_all(ctx, items, files, total * 0.5, peak_after=len(arrays))  # oom strikes mid-write
    ctx.write(join(items, COMMIT_FILE), commit_marker(items))
    ctx.pause(total * 0.1)
    ctx.write(
        join(step_dir, CHECKPOINT_METADATA), checkpoint_metadata(now_ns(ctx), {"scan_layers": scan_layers})
    )
    ctx.write(join(step_dir, COMMIT_FILE), commit_marker(step_dir))
    ctx.log(logging_line("I", "saved a checkpoint at step 0"))
    ctx.log(logging_line("I", f"Conversion complete. Checkpoint saved to {base}"))
    ctx.log(logging_line("I", f"Overall Elapse: {total / 60:.2f} min"))
    return 0


def hf_tensor_names(layers: int = 2) -> list[str]:
    names = ["model.embed_tokens.weight"]
    for i in range(layers):
        names += [f"model.layers.{i}.self_attn.{p}_proj.weight" for p in ("q", "k", "v", "o")]
        names += [f"model.layers.{i}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        names += [f"model.layers.{i}.input_layernorm.weight"]
    return [*names, "model.norm.weight"]


def run_export(ctx: ProgramContext, args: Arguments) -> int:
    """``to_huggingface``: tokenizer, then config, then the shards, and the index last.

    Into ``base_output_directory`` as MaxText treats it (utils/utils.py:604-620): a ``gs://`` one
    through a temporary staging directory, each file uploaded as it is saved; a local one (what the
    pipeline passes) directly, with nothing uploaded. The export script's own last step, which
    uploads a local one with its manifest, is rlpipe's, run for real after (``.export_step``)."""
    load = args.require("load_parameters_path")
    base = args.require("base_output_directory")
    pinned_steps(ctx, args)
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
    if base.startswith("gs://"):
        staging = f"{args.env.get('TMPDIR', '/tmp')}/maxtext_hf_save_{now_ns(ctx) % 10**8:08d}"
        ctx.log(absl_line(ctx, "I", "utils.py:615", f"   Using temporary local staging directory: {staging}"))
    else:
        ctx.log(absl_line(ctx, "I", "utils.py:619", f"   Using local directory: {base}"))
    for name in EXPORTED_TOKENIZER_FILES:
        note = (
            json_bytes({"_simulated": SIMULATED_NOTE})
            if name.endswith(".json")
            else f"{{# {SIMULATED_NOTE} #}}\n"
        )
        ctx.write(join(base, name), note)
    dtype = args.get("weight_dtype", "bfloat16")
    ctx.write(
        join(base, HF_CONFIG),
        json_bytes(
            {"model_type": args.get("model_name"), "torch_dtype": dtype, "_simulated": SIMULATED_NOTE}
        ),
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
            ctx.hook("peak")  # oom strikes after the first shard (on a gs:// base, a partial export stays)
    if shards > 1:
        index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
        ctx.write(join(base, HF_INDEX), json.dumps(index, indent=2, sort_keys=True).encode())
    message = f"\u2705 MaxText model successfully saved in HuggingFace format at {base}"
    ctx.log(absl_line(ctx, "I", "to_huggingface.py:464", message))
    ctx.log(absl_line(ctx, "I", "to_huggingface.py:581", f"Overall Elapse: {total / 60:.2f} min"))
    if "manifest" in args.steps:
        ctx.pause(total * 0.1)  # the upload
        run_manifest_step(ctx, args)
    return 0


PROGRAMS = {"convert": run_convert, "train": run_train, "export": run_export}
