"""The exact MaxText command lines of the three stages, as exec-form argument lists.

Arguments are built from validated fields only and are never pasted into a shell line: where
a stage needs a shell (``VLLM_HOST_IP``, the in-container patches, the tpu-slice index gate, the
pinned-revision steps of ``pinning``), the script is a fixed template and the arguments reach the
program as ``"$@"``. No argument carries the HF token, not even as ``$(HF_TOKEN)``: MaxText reads
the ``HF_TOKEN`` environment variable itself (pyconfig falls back to it when ``hf_access_token``
is unset), and Kubernetes sets that variable from a Secret.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from rlpipe.core import export_manifest, pinning, staging, workarounds
from rlpipe.core.request import export_checks

if TYPE_CHECKING:
    from rlpipe.core.request import Request, Scalar

CONVERT_MODULE = "maxtext.checkpoint_conversion.to_maxtext"
TRAIN_MODULE = "maxtext.trainers.post_train.rl.train_rl"
EXPORT_MODULE = "maxtext.checkpoint_conversion.to_huggingface"
HF_TOKEN_ENV = "HF_TOKEN"
HF_TOKEN_REF = f"$({HF_TOKEN_ENV})"  # no longer in any argv; kept for callers that test for it
# Bumped whenever the conversion's inputs change shape, so old cache entries are not reused
# (1: converted from a local snapshot at the sha, with the pinned source files beside it).
CONVERSION_RECIPE = "rlpipe-convert@1"


def fmt(value: Scalar) -> str:
    """MaxText parses overrides as YAML: booleans lower-case, floats without padded exponents."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text:
            mantissa, exponent = text.split("e")
            sign = "-" if exponent.startswith("-") else ""
            text = f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"
        return text
    return str(value)


def _python_literal(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'"
    return fmt(value)


def vllm_additional_config(req: Request) -> str:
    """The tutorials' Python-literal-style map, with model_name first and taken from ``model``."""
    items = {"model_name": req.model, **req.training.vllm_maxtext_config}
    inner = ", ".join(f"'{k}': {_python_literal(v)}" for k, v in items.items())
    return "{'maxtext_config': {" + inner + "}}"


def convert_args(req: Request, hf_revision: str, output_dir_uri: str) -> list[str]:
    """Arguments of to_maxtext: CPU-only, one process, Pathways-readable checkpoint format.

    The weights come from the local snapshot the convert script downloads at ``hf_revision``
    (``pinning``), so no ``--revision`` is passed: to_maxtext ignores it for a local path.
    """
    del hf_revision  # pinned by the snapshot (the container's RLPIPE_HF_REVISION), not by a flag
    return [
        f"model_name={req.model}",
        f"--hf_model_path={pinning.SNAPSHOT_DIR}",
        f"base_output_directory={output_dir_uri}",
        f"scan_layers={fmt(req.training.scan_layers)}",
        "use_multimodal=false",
        "skip_jax_distributed_system=true",
        "checkpoint_storage_use_zarr3=false",
        "checkpoint_storage_use_ocdbt=false",
        "hardware=cpu",
        "--lazy_load_tensors=True",
    ]


def conversion_flags(req: Request, hf_revision: str) -> list[str]:
    """The arguments that determine the converted bytes (for the cache key): no paths, no token."""
    return [
        CONVERSION_RECIPE,
        *(a for a in convert_args(req, hf_revision, "") if not a.startswith("base_output_directory=")),
    ]


_TRAIN_ORDER: tuple[tuple[str, str], ...] = (
    ("data_template_path", "data_template_path"),
    ("num_batches", "num_batches"),
    ("batch_size", "batch_size"),
    ("train_micro_batch_size", "train_micro_batch_size"),
    ("max_target_length", "max_target_length"),
    ("max_prefill_predict_length", "max_prefill_predict_length"),
    ("mu_dtype", "mu_dtype"),
    ("grad_dtype", "grad_dtype"),
    ("rollout_tensor_parallelism", "rollout_tensor_parallelism"),
    ("rollout_expert_parallelism", "rollout_expert_parallelism"),
    ("trainer_devices_fraction", "trainer_devices_fraction"),
    ("sampler_devices_fraction", "sampler_devices_fraction"),
    ("tokenizer_path", "tokenizer_path"),
    ("ici_tensor_parallelism", "ici_tensor_parallelism"),
    ("ici_expert_parallelism", "ici_expert_parallelism"),
    ("ici_fsdp_parallelism", "ici_fsdp_parallelism"),
    ("hbm_utilization_vllm", "hbm_utilization_vllm"),
    ("remat_policy", "remat_policy"),
    ("async_scheduling", "async_scheduling"),
    ("allow_split_physical_axes", "allow_split_physical_axes"),
    ("ragged_gather_reduce_fallback", "ragged_gather_reduce_fallback"),
    ("enable_dp_attention", "enable_dp_attention"),
    ("decode_sampling_temperature", "decode_sampling_temperature"),
    ("decode_sampling_top_k", "decode_sampling_top_k"),
    ("decode_sampling_nucleus_p", "decode_sampling_nucleus_p"),
    ("learning_rate", "learning_rate"),
    ("learning_rate_schedule_steps", "learning_rate_schedule_steps"),
    ("num_generations", "rl.num_generations"),
    ("reshard_chunk_size", "rl.reshard_chunk_size"),
    ("debug", "debug"),
    ("checkpoint_period", "checkpoint_period"),
)


def dataset_args(req: Request, train_files: str, eval_files: str) -> list[str]:
    """What train_rl trains and evaluates on: the dataset's names (the built-in processor and the
    self-split rule read them), and the staged files at the pinned commits (``core.staging``);
    the user's processor and reward functions where the head's first step put them."""
    d = req.dataset
    args = [f"dataset_name={d.repo}", f"eval_dataset_name={d.evaluated_repo}"]
    if d.subset is not None:
        args.append(f"hf_subset={d.subset}")
    args += [f"train_split={d.train_split}", f"eval_split={d.eval_split}", f"hf_train_files={train_files}"]
    if not staging.splits_itself(d.repo, d.evaluated_repo):
        args.append(f"hf_eval_files={eval_files}")
    if d.processor is not None:
        args.append(f"dataset_processor_path={staging.user_file_path('processor')}")
    if req.rewards is not None:
        args.append(f"reward_functions_path={staging.user_file_path('rewards')}")
        args.append(f"reward_functions={','.join(req.rewards.functions)}")
    return args


def train_args(
    req: Request, base_output_uri: str, parameters_uri: str, data_files: tuple[str, str] = ("", "")
) -> list[str]:
    """train_rl arguments in the tutorials' order, the data, then the request's extra overrides
    (sorted). ``data_files``: the staged train and eval parquet patterns (``core.staging``)."""
    t = req.training
    args = [
        "run_name=rl",
        f"base_output_directory={base_output_uri}",
        f"model_name={req.model}",
        f"scan_layers={fmt(t.scan_layers)}",
        f"load_parameters_path={parameters_uri}",
    ]
    for field, key in _TRAIN_ORDER:
        value = getattr(t, field)
        if field == "tokenizer_path" and value is None:
            value = pinning.HEAD_PINNED_DIR  # the repo's tokenizer at the pinned sha (``pinning``)
        if field == "data_template_path" and req.chat_template is not None:
            value = staging.user_file_path("chat_template")  # the request's own, verified first
        if value is not None:
            args.append(f"{key}={fmt(value)}")
    keep = export_checks.retention(req)
    if keep is not None:  # the step export.step may choose must outlive Orbax's LatestN
        args.append(f"{export_checks.KEEP_KEY}={keep}")
    args.append(f"vllm_hf_overrides={t.vllm_hf_overrides}")
    args.append(f"vllm_additional_config={vllm_additional_config(req)}")
    args.extend(dataset_args(req, *data_files))
    args.extend(f"{k}={fmt(v)}" for k, v in sorted(req.maxtext_overrides.items()))
    return args


def export_args(req: Request, parameters_uri: str) -> list[str]:
    """Arguments of to_huggingface; the tokenizer comes from the pinned source files.

    It writes into a local directory on the pod's volume, which the script's last step uploads to
    the run's export prefix with a manifest of exactly those files (``export_manifest``)."""
    return [
        f"model_name={req.model}",
        f"--hf_model_path={pinning.EXPORT_PINNED_DIR}",
        f"load_parameters_path={parameters_uri}",
        f"base_output_directory={export_manifest.LOCAL_DIR}",
        "skip_jax_distributed_system=true",
        "hardware=cpu",
        f"scan_layers={fmt(req.training.scan_layers)}",
        "use_multimodal=false",
        "weight_dtype=bfloat16",
        "--override_model_architecture",
    ]


# ---- fixed shell templates (no value is ever interpolated unquoted) ----------------------------

SCRIPT_NAME = "rlpipe-stage"  # $0 of the bash -c scripts; the program's arguments follow as "$@"


def fetches_pinned_source(req: Request) -> bool:
    """Train reads the pinned tokenizer unless the request names its own ``tokenizer_path``."""
    return req.training.tokenizer_path is None


def train_script(req: Request, *, hold_seconds: int = 0) -> str:
    """Container script of the Pathways head: runtime env, pinned files, patches, then train_rl "$@"
    (a failed exit held ``hold_seconds``: :func:`held_exit`)."""
    lines = [
        "set -eu",
        "export VLLM_HOST_IP=\"$(hostname -I | awk '{print $1}')\"",
        'echo "rlpipe: VLLM_HOST_IP=${VLLM_HOST_IP}"',
    ]
    if fetches_pinned_source(req):
        lines.append(pinning.fetch_line())
    lines.append(staging.stage_line())
    lines += [workarounds.lookup(ref).shell_line() for ref in req.training.workarounds]
    lines += held_exit(TRAIN_MODULE, hold_seconds)
    return "\n".join(lines) + "\n"


HOLD_MARK = "rlpipe-hold:"  # printed when a failed exit is held (the simulator reads it too)


def held_exit(module: str, hold_seconds: int) -> list[str]:
    """Run the program as a child and hold a failed exit for ``hold_seconds``.

    The preemption race (docs/simulator.md): a disrupted TPU worker's Job is ``Failed`` only after
    its pods' grace periods, while the head may give up on the lost worker sooner; with
    ``maxRestarts: 0`` the JobSet fails on the first Failed child and deletes the others, the
    worker's Job and its DisruptionTarget evidence included. Holding the head's failed exit lets
    the worker's Job fail first, so the run is classed ``preempted``. SIGTERM (the JobSet or Kueue
    stopping the pod) is passed to the program at once and ends any hold; a success is never held.

    A stop can land before the program's pid is known: just before the program starts, or between
    its start and ``program=$!``. The trap then has no pid to signal, so it only records the stop,
    and the line after the pid is stored passes it on; ``signalled`` (the pid the trap signalled) keeps
    a stop the trap already passed on from being sent twice. Without that line the script would
    wait for a program nobody stopped, and the pod would ignore its stop until SIGKILL.
    """
    return [
        f"hold_seconds={int(hold_seconds)}",
        *run_child(module),
        'if [ "$code" -ne 0 ] && [ -z "$stopping" ] && [ "$hold_seconds" -gt 0 ]; then',
        f'  echo "{HOLD_MARK} the program exited $code; holding this exit ${{hold_seconds}}s so that a '
        + "disrupted TPU worker's Job, if any, fails the JobSet first\"",
        # One-second sleeps, not one long one: a signal that lands just before `wait` blocks leaves
        # its trap pending until that sleep ends, so a stop is honoured within a second, always.
        "  held=0",
        '  while [ -z "$stopping" ] && [ "$held" -lt "$hold_seconds" ]; do',
        "    sleep 1 &",
        "    sleeper=$!",
        '    wait "$sleeper"',
        "    held=$((held + 1))",
        "  done",
        "fi",
        'exit "$code"',
    ]


def run_child(module: str) -> list[str]:
    """Run ``python3 -m module "$@"`` as the script's child, SIGTERM passed on to it at once, and
    leave its exit code in ``$code`` and a stop in ``$stopping`` (see :func:`held_exit`)."""
    return [
        "stopping=",
        "program=",
        "sleeper=",
        "signalled=",
        """trap 'stopping=1; signalled=$program; kill -TERM $program $sleeper 2>/dev/null || true' TERM INT""",
        f'python3 -m {shlex.quote(module)} "$@" &',
        "program=$!",
        'if [ -n "$stopping" ] && [ "$signalled" != "$program" ]; then kill -TERM "$program" 2>/dev/null || true; fi',
        "set +e",
        'wait "$program"; code=$?',
        'while kill -0 "$program" 2>/dev/null; do wait "$program"; code=$?; done',
    ]


_INDEX_GATE = [
    'if [ "${JOB_COMPLETION_INDEX:-0}" != "0" ]; then',
    '  echo "rlpipe: completion index ${JOB_COMPLETION_INDEX} has nothing to do; index 0 runs the stage"',
    "  exit 0",
    "fi",
]


def _stage_script(module: str, first: str, *, gated: bool) -> str:
    lines = ["set -eu", *(_INDEX_GATE if gated else []), 'mkdir -p "$TMPDIR"', first]
    lines.append(f'exec python3 -m {shlex.quote(module)} "$@"')
    return "\n".join(lines) + "\n"


def convert_script(*, gated: bool) -> str:
    """Convert: the repo at the pinned sha into the volume (and its source files to GCS), then to_maxtext."""
    return _stage_script(CONVERT_MODULE, pinning.pin_line(), gated=gated)


def export_script(*, gated: bool) -> str:
    """Export: the pinned source files into the volume (the tokenizer), then to_huggingface into a
    directory the script has just created, then, only after it exited 0, the upload of exactly
    the files in that directory and their manifest, last (``export_manifest``).

    The program runs as a child (:func:`run_child`) so that the script can go on after it; a stop
    is passed on to it at once, and a stop or a failed exit ends the script with no upload."""
    lines = [
        "set -eu",
        *(_INDEX_GATE if gated else []),
        'mkdir -p "$TMPDIR"',
        pinning.fetch_line(),
        # Without -p: a directory that exists already (nothing but this script creates it on the
        # pod's fresh volume) stops the script, so every file in it is the program's.
        f'mkdir "${export_manifest.ENV_DIR}"',
        *run_child(EXPORT_MODULE),
        'if [ -n "$stopping" ] && [ "$code" -eq 0 ]; then code=143; fi',
        'if [ "$code" -ne 0 ]; then exit "$code"; fi',
        "set -e",
        export_manifest.manifest_line(),
    ]
    return "\n".join(lines) + "\n"


def indexed_gate_script(module: str) -> str:
    """tpu-slice placement: every pod of the slice starts, only completion index 0 does the work."""
    return "\n".join(["set -eu", *_INDEX_GATE, f'exec python3 -m {shlex.quote(module)} "$@"']) + "\n"
