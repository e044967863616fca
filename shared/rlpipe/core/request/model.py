"""The request's schema: typed fields with the constraints a person can act on.

Why pydantic models: one definition gives parsing, the problems with their paths, and the
JSON Schema that ``rlpipe schema`` publishes. Cross-field rules live in ``checks``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    WithJsonSchema,
    field_validator,
)

from rlpipe.core import presets, workarounds
from rlpipe.core.request.base import BRANCH_PATTERN, HF_REPO_PATTERN, Strict, check_revision, custom_error
from rlpipe.core.request.inputs import DatasetSpec, RewardsSpec, UserFile
from rlpipe.core.request.sweep import SelectRule, SweepSpec
from rlpipe.core.step_counts import MAX_TRAIN_STEPS

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
_MODEL = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_TOPIC = re.compile(r"^(projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/)?[A-Za-z][A-Za-z0-9._~%+-]{2,254}$")
_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)?\s*$")
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"


_custom = custom_error


def _parse_duration(value: Any) -> Any:
    if isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise _custom(
                f"{value!r} is not a duration",
                "write whole seconds (7200) or a number with s, m, h or d ('2h')",
            )
        scale = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]
        return int(m.group(1)) * scale
    return value


Seconds = Annotated[
    int,
    BeforeValidator(_parse_duration),
    Field(ge=60, le=30 * 86400),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 60, "maximum": 2592000},
                {"type": "string", "pattern": r"^\s*\d+\s*(s|m|h|d)?\s*$"},
            ],
            "description": "seconds, or a duration such as '90m', '2h', '1d'",
        }
    ),
]
Quantity = Annotated[str, Field(pattern=_QUANTITY)]
DnsLabel = Annotated[str, Field(pattern=_DNS_LABEL, max_length=63)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)]
EnvValue = Annotated[str, Field(max_length=1024)]


_Strict = Strict


def _check_image(value: str) -> str:
    m = _IMAGE.match(value)
    if not m:
        raise _custom(
            f"{value!r} is not a container image reference",
            "use REGISTRY/PATH:TAG or REGISTRY/PATH@sha256:DIGEST",
        )
    if not m.group("tag") and not m.group("digest"):
        raise _custom(f"{value!r} has no tag or digest", "pin the image: add :TAG or @sha256:DIGEST")
    if m.group("tag") == "latest" and not m.group("digest"):
        raise _custom(f"{value!r} uses the moving tag 'latest'", "pin a release tag or a sha256 digest")
    return value


Image = Annotated[str, BeforeValidator(lambda v: _check_image(v) if isinstance(v, str) else v)]


class TpuSpec(_Strict):
    """The slice the training JobSet runs on (and convert/export in ``tpu-slice`` placement)."""

    type: Literal["v6e-16", "v6e-32", "v6e-64", "v6e-128", "v6e-256"]
    topology: Annotated[str, Field(pattern=r"^[0-9]+x[0-9]+$")]
    slices: Annotated[int, Field(ge=1, le=64)]
    reservation: Annotated[str, Field(pattern=_DNS_LABEL, max_length=63)] | None
    queue: DnsLabel = Field(description="Kueue LocalQueue name in the workload namespace")
    provisioning: Literal["reservation", "on-demand", "spot", "flex-start"] = Field(
        description="where the TPU capacity comes from (docs/provisioning.md)"
    )


class CpuJobSpec(_Strict):
    """The single CPU pod that runs conversion and export in ``cpu`` placement."""

    node_pool: DnsLabel
    cpu: Quantity
    memory: Quantity


class ScratchSpec(_Strict):
    """Local disk for convert and export (an emptyDir with this sizeLimit), in either
    placement; the node pool's boot disk must hold it (infra/README.md)."""

    convert: Quantity = Field(
        description="HF_HOME, the repo snapshot at the pinned sha (all safetensors) and TMPDIR"
    )
    export: Quantity = Field(
        description="the whole exported model (to_huggingface writes it here; the manifest step uploads it) and the tokenizer"
    )


class SecretRef(_Strict):
    """Where the HF token lives in the cluster; the value itself is never in a request."""

    name: Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253)]
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]{1,253}$")]


class PathwaysEnv(_Strict):
    workload: dict[EnvName, EnvValue]
    proxy: dict[EnvName, EnvValue]
    resource_manager: dict[EnvName, EnvValue]
    worker: dict[EnvName, EnvValue]


class PathwaysSpec(_Strict):
    proxy_image: Image
    server_image: Image
    worker_image: Image | None = Field(description="defaults to server_image")
    head_node_pool: DnsLabel
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=30 * 86400)]
    env: PathwaysEnv


Scalar = bool | int | float | str


class TrainingSpec(_Strict):
    """Every hyper-parameter of the tutorials' ``train_rl`` command; ``None`` = not passed."""

    command_env: dict[EnvName, EnvValue] = Field(
        description="variables set for train_rl inside the container (the tutorials set them inline)"
    )
    workarounds: list[str] = Field(description="in-container patches, as name@version from the registry")
    scan_layers: bool
    data_template_path: Annotated[str, Field(max_length=512)] | None
    num_batches: Annotated[int, Field(ge=1, le=1_000_000)]
    batch_size: Annotated[int, Field(ge=1, le=65536)]
    train_micro_batch_size: Annotated[int, Field(ge=1, le=65536)] | None
    max_target_length: Annotated[int, Field(ge=1, le=1_048_576)] | None
    max_prefill_predict_length: Annotated[int, Field(ge=1, le=1_048_576)] | None
    mu_dtype: Literal["bfloat16", "float32"] | None
    grad_dtype: Literal["bfloat16", "float32"] | None
    rollout_tensor_parallelism: Annotated[int, Field(ge=1, le=4096)]
    rollout_expert_parallelism: Annotated[int, Field(ge=1, le=4096)]
    trainer_devices_fraction: Annotated[float, Field(gt=0, le=1)]
    sampler_devices_fraction: Annotated[float, Field(gt=0, le=1)]
    tokenizer_path: Annotated[str, Field(max_length=512)] | None = Field(description="defaults to hf_repo")
    ici_tensor_parallelism: Annotated[int, Field(ge=1, le=4096)]
    ici_expert_parallelism: Annotated[int, Field(ge=1, le=4096)]
    ici_fsdp_parallelism: Annotated[int, Field(ge=-1, le=4096)] | None = Field(description="-1 = fill")
    hbm_utilization_vllm: Annotated[float, Field(gt=0, le=1)]
    remat_policy: Literal[
        "full",
        "minimal",
        "save_dot_except_mlpwi",
        "save_dot_except_mlp",
        "save_qkv_proj",
        "qkv_proj_offloaded",
        "minimal_offloaded",
        "custom",
    ]
    async_scheduling: bool
    allow_split_physical_axes: bool
    ragged_gather_reduce_fallback: bool
    enable_dp_attention: bool | None
    decode_sampling_temperature: Annotated[float, Field(ge=0, le=10)] | None
    decode_sampling_top_k: Annotated[int, Field(ge=0, le=100000)] | None
    decode_sampling_nucleus_p: Annotated[float, Field(gt=0, le=1)] | None
    learning_rate: Annotated[float, Field(gt=0, le=1)] | None
    learning_rate_schedule_steps: Annotated[int, Field(ge=1, le=10_000_000)] | None
    num_generations: Annotated[int, Field(ge=1, le=1024)] | None = Field(description="rl.num_generations")
    reshard_chunk_size: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        description="rl.reshard_chunk_size"
    )
    debug: bool | None
    checkpoint_period: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        description="MaxText's default (50) when unset"
    )
    vllm_hf_overrides: Annotated[str, Field(max_length=2048)]
    vllm_maxtext_config: dict[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]*$")], Scalar] = Field(
        description="maxtext_config of vllm_additional_config; model_name is added from `model`"
    )

    @field_validator("workarounds")
    @classmethod
    def _known_workarounds(cls, refs: list[str]) -> list[str]:
        unknown = [r for r in refs if not workarounds.is_valid_ref(r)]
        if unknown:
            raise _custom(
                f"unknown workaround(s) {', '.join(map(repr, unknown))}",
                f"use entries from the registry: {', '.join(sorted(workarounds.REGISTRY))}",
            )
        return refs

    @field_validator("vllm_maxtext_config")
    @classmethod
    def _config_values_short(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        """Each value is read as MaxText reads it with the other arguments (``reading``); here only
        its length is bounded, as the schema bounds every other config string."""
        for key, item in value.items():
            if isinstance(item, str) and len(item) > 256:
                raise _custom(f"value of {key!r} is {len(item)} characters", "use at most 256 characters")
        if "model_name" in value:
            raise _custom("model_name is set from the request's `model`", "remove model_name from this map")
        return value


class Budgets(_Strict):
    """Retries allowed per failure class (docs/design.md#failure-classes-and-retry-budgets); `permanent` is never retried."""

    preempted: Annotated[int, Field(ge=0, le=50)]
    capacity: Annotated[int, Field(ge=0, le=50)]
    resources: Annotated[int, Field(ge=0, le=5)]
    transient: Annotated[int, Field(ge=0, le=20)]


class Backoff(_Strict):
    initial_delay: Annotated[float, Field(ge=1, le=3600)]
    max_delay: Annotated[float, Field(ge=1, le=86400)]
    multiplier: Annotated[float, Field(ge=1, le=10)]


class RetrySpec(_Strict):
    budgets: Budgets
    max_retries: Annotated[int, Field(ge=0, le=60)] = Field(
        description="total cap over all classes, per stage"
    )
    backoff: Backoff
    retryable_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        description="program exit codes classified `transient` instead of `permanent`"
    )


class Timeouts(_Strict):
    convert: Seconds
    train: Seconds
    export: Seconds
    publish: Seconds = Field(description="the upload to the Hugging Face Hub (with publish only)")
    queued: Seconds = Field(
        description="how long a workload may wait for admission before it counts as `capacity`"
    )
    waiting: Seconds = Field(
        description=(
            "how long the run may wait, at plan for its team's place or budget, its sweep's slot or "
            "the conversion its sweep shares, and again at its sweep's selection, before it fails "
            "naming what it waited for"
        )
    )


class GateSpec(_Strict):
    """Thresholds a trained model must meet before it is exported and published (docs/outcomes.md).

    Each compares a number train_rl printed (``Pre/Post RL Training: …``); accuracy is in percent,
    as train_rl prints it. A run that misses one ends ``gated``; ``rlpipe promote`` overrides it."""

    min_post_mean_reward: float | None = Field(
        default=None, description="post-training mean_reward at least this"
    )
    min_reward_gain: float | None = Field(
        default=None, description="post mean_reward minus pre mean_reward at least this"
    )
    min_post_accuracy: Annotated[float, Field(ge=0, le=100)] | None = Field(
        default=None, description="post-training accuracy (percent) at least this"
    )


class PublishSpec(_Strict):
    """Where the exported model goes on the Hugging Face Hub (docs/outcomes.md)."""

    repo: Annotated[str, Field(pattern=HF_REPO_PATTERN.pattern)] = Field(description="target owner/name")
    private: bool = Field(description="create the repository private (if it does not exist)")
    branch: str = Field(description="target branch")
    token_secret: SecretRef = Field(
        description="Kubernetes Secret with a *write* token (never the read token's Secret)"
    )

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str) -> str:
        if BRANCH_PATTERN.match(value):
            return value
        raise _custom(f"{value!r} is not a branch name", "use a branch such as 'main' or 'rlpipe/tuned'")


class ExportSpec(_Strict):
    """Which committed step export turns into the served model (docs/outcomes.md#the-exported-step-export).

    ``last`` is the step training ended at. ``best`` is the step whose evaluation is best by
    ``select`` (the vocabulary of ``sweep.select``): the intermediate evaluations train_rl prints
    every ``eval_interval`` steps, and the final one (``Post RL Training``), among the steps that
    have a checkpoint. A number is that step, which must be a checkpoint step. rlpipe passes
    ``max_num_checkpoints_to_keep`` so that the step is still in the bucket when export runs
    (``core.request.export_checks``), and deletes what it kept only for this once export ended."""

    step: Literal["last", "best"] | Annotated[int, Field(strict=True, ge=1, le=MAX_TRAIN_STEPS)] = Field(
        description="last (default), best, or a checkpoint step"
    )
    select: SelectRule | None = Field(
        description="best: the metric and its direction; None: post_mean_reward, highest wins"
    )

    @field_validator("step", mode="before")
    @classmethod
    def _one_step(cls, value: object) -> object:
        """One answer for what a step may be, not one per member of the union."""
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value in ("last", "best") or (whole and 1 <= value <= MAX_TRAIN_STEPS):  # type: ignore[operator]
            return value
        raise _custom(
            f"{value!r:.80} is not a step", "write last, best or a checkpoint step (a whole number from 1)"
        )


class Request(_Strict):
    """A complete, normalized request: what the ledger stores and the manifests are built from."""

    model: Annotated[str, Field(pattern=_MODEL.pattern)] = Field(
        description="MaxText model name, e.g. gemma4-26b"
    )
    hf_repo: Annotated[str, Field(pattern=HF_REPO_PATTERN.pattern)] = Field(
        description="Hugging Face repository, e.g. google/gemma-4-26b-a4b-it"
    )
    hf_revision: str = Field(description="branch name, or a 40-hex commit sha")
    request_id: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,40}$")] | None = Field(
        default=None, description="client idempotency key: the same id never starts a second run"
    )
    preset: presets.PresetName = presets.DEFAULT_PRESET
    tpu: TpuSpec
    image: Image
    placement: Literal["cpu", "tpu-slice"] = Field(description="where convert and export run")
    cpu_job: CpuJobSpec
    scratch: ScratchSpec
    pathways: PathwaysSpec
    hf_token_secret: SecretRef
    training: TrainingSpec
    dataset: DatasetSpec = Field(description="the Hub dataset to train and evaluate on (docs/datasets.md)")
    rewards: RewardsSpec | None = Field(
        description="your reward functions, replacing MaxText's built-in three; None = the built-in"
    )
    chat_template: UserFile | None = Field(
        description="your data template (JSON: SYSTEM_PROMPT, TEMPLATE); None = training.data_template_path"
    )
    maxtext_overrides: dict[str, Scalar] = Field(
        description="extra train_rl key=value arguments: keys MaxText 0.2.4 defines (rl.num_iterations), "
        "values MaxText's YAML reader reads back as written"
    )
    retry: RetrySpec
    timeouts: Timeouts
    notify: Annotated[str, Field(pattern=_TOPIC.pattern)] | None = Field(
        description="Pub/Sub topic for status messages"
    )
    labels: dict[str, str]
    gate: GateSpec | None = Field(description="quality gate evaluated after train")
    publish: PublishSpec | None = Field(description="publish the export to the Hugging Face Hub")
    export: ExportSpec | None = Field(
        default=None, description="which step is exported (None: the last, as before this field)"
    )
    sweep: SweepSpec | None = Field(
        description="run a grid of children over training fields and MaxText keys (docs/sweeps.md)"
    )

    @field_validator("hf_revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        return check_revision(value)


# Keys the pipeline itself controls, and typed fields that must not be set through overrides.
# Keys the pipeline sets, or that change what MaxText loads (``base_config``: pyconfig loads the
# YAML file it names instead of the program's own config, pyconfig.py:80-103 at maxtext-v0.2.4,
# and the vLLM adapter passes it as a keyword argument, adapter.py:160).
CONTROLLED_ARGS = frozenset(
    {
        "run_name",
        "base_output_directory",
        "load_parameters_path",
        "hf_access_token",
        "model_name",
        "base_config",
    }
)
TYPED_OVERRIDE_KEYS = {
    **{
        name: f"training.{name}"
        for name in TrainingSpec.model_fields
        if name
        not in ("command_env", "workarounds", "num_generations", "reshard_chunk_size", "vllm_maxtext_config")
    },
    "rl.num_generations": "training.num_generations",
    "rl.reshard_chunk_size": "training.reshard_chunk_size",
    "vllm_additional_config": "training.vllm_maxtext_config",
    # What the dataset, rewards and chat_template sections say (and the staged files they become).
    "dataset_name": "dataset.repo",
    "eval_dataset_name": "dataset.eval_repo",
    "hf_subset": "dataset.subset",
    "train_split": "dataset.train_split",
    "eval_split": "dataset.eval_split",
    "hf_train_files": "dataset (the pipeline stages the pinned files)",
    "hf_eval_files": "dataset (the pipeline stages the pinned files)",
    "dataset_processor_path": "dataset.processor",
    "reward_functions_path": "rewards.file",
    "reward_functions": "rewards.functions",
}
