"""Every default of a request, in one place: the presets.

A request names a preset (``v6e-32`` by default) and overrides any field it wants. The preset
values reproduce the two tutorials argument for argument (``v6e-32``: the Japanese v6e-32 4x8
tutorial; ``v6e-64``: the Chinese v6e-64 8x8 tutorial). A training field set to ``None`` means
"not passed to MaxText", so MaxText's own default applies, exactly as when the tutorial omits it.

Where rlpipe deliberately improves on the tutorials (docs/design.md#departures-from-the-tutorials), the improvement lives here too:
conversion and export on the CPU pool, the HF token from a Secret, pinned Pathways images.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, get_args

PresetName = Literal["v6e-32", "v6e-64"]
PRESET_NAMES: tuple[str, ...] = get_args(PresetName)
DEFAULT_PRESET: PresetName = "v6e-32"

# The Kubernetes Secrets the presets name (the deployment creates them: infra/cluster/k8s).
_READ_TOKEN_SECRET = {"name": "hf-token", "key": "token"}
_WRITE_TOKEN_SECRET = {"name": "hf-write-token", "key": "token"}
MAXTEXT_IMAGE = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4"
PATHWAYS_IMAGE_REPO = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
# Pathways server and proxy must match the JAX inside the MaxText image, so they are pinned by
# digest: the pair MaxText maxtext-v0.2.4 itself pins for Gemma 4 RL on Pathways
# (src/maxtext/trainers/post_train/rl/scripts/run_gemma4_e4b_rl.sh). The tools default to `latest`.
PATHWAYS_SERVER_IMAGE = (
    f"{PATHWAYS_IMAGE_REPO}/server@sha256:d03068b39a8a2fab0621086ccb7c9445ce17ad34f1520159ca4ecd395346a162"
)
PATHWAYS_PROXY_IMAGE = f"{PATHWAYS_IMAGE_REPO}/proxy_server@sha256:6342a3cae2818d2f887d396e9ae4156b3316f79fef186d71ff16d535b44e1724"

# Deliberate improvement: one CPU pod sized for a 26B model instead of a whole TPU slice.
_CPU_JOB = {"node_pool": "cpu-np", "cpu": "32", "memory": "256Gi"}
# Local disk of convert and export. Convert holds the repo snapshot at the pinned sha: Gemma 4
# 26B A4B's safetensors are about 52 GB (48.4 GiB), plus tokenizer and config; the Xet chunk
# cache is turned off (a one-shot download gains nothing from it). Export holds the whole exported
# model too: to_huggingface writes it into a local directory, which the script's last step uploads
# with its manifest (core/export_manifest.py), so that what publish pushes is exactly what it
# wrote. Both with headroom. infra/README.md sizes the cpu-np boot disk for one of each on a node.
_SCRATCH = {"convert": "100Gi", "export": "100Gi"}

_RETRY = {
    "budgets": {"preempted": 5, "capacity": 10, "resources": 1, "transient": 3},
    "max_retries": 12,
    "backoff": {"initial_delay": 30.0, "max_delay": 1800.0, "multiplier": 2.0},
    "retryable_exit_codes": [],
}

_TIMEOUTS = {
    "convert": 4 * 3600,
    "train": 24 * 3600,
    "export": 4 * 3600,
    "publish": 4 * 3600,
    "queued": 2 * 3600,
    # A run queued behind its team's other runs or its sweep's siblings: a week, so that only a
    # wait on something that no longer moves ends it (core.runs.admission).
    "waiting": 7 * 86400,
}

# The tutorials' data and rewards: train_rl's defaults (rl.yml at maxtext-v0.2.4, lines 236-245):
# GSM8K's `main` config, trained on `train` and evaluated on `test`, with MaxText's three built-in
# math rewards (no `rewards` section). Now pinned: plan resolves `revision` to a commit.
_DATASET = {
    "repo": "openai/gsm8k",
    "revision": "main",
    "subset": "main",
    "train_split": "train",
    "eval_repo": None,
    "eval_revision": None,
    "eval_subset": None,
    "eval_split": "test",
    "processor": None,
}

_VLLM_HF_OVERRIDES_32 = '{"architectures": ["MaxTextForCausalLM"]}'
_VLLM_HF_OVERRIDES_64 = '{architectures: ["MaxTextForCausalLM"]}'


def _common(topology: str, tpu_type: str) -> dict[str, Any]:
    return {
        "hf_revision": "main",
        "tpu": {
            "type": tpu_type,
            "topology": topology,
            "slices": 1,
            "reservation": None,
            "queue": "user-queue",
            "provisioning": "reservation",  # the tutorials' capacity
        },
        "image": MAXTEXT_IMAGE,
        "placement": "cpu",
        "cpu_job": dict(_CPU_JOB),
        "scratch": dict(_SCRATCH),
        "hf_token_secret": dict(_READ_TOKEN_SECRET),
        "retry": copy.deepcopy(_RETRY),
        "timeouts": dict(_TIMEOUTS),
        "notify": None,
        "labels": {},
        "dataset": dict(_DATASET),
        "rewards": None,
        "chat_template": None,
        "maxtext_overrides": {},
        "gate": None,
        "publish": None,
        "export": None,
        "sweep": None,
    }


# Defaults that follow from tpu.provisioning when the request leaves them unset (docs/provisioning.md):
# flex-start is queued provisioning, admitted by Kueue's ProvisioningRequest check on this queue.
FLEX_START_QUEUE = "flex-queue"
# Spot capacity is reclaimed: the checkpoint period is chosen so that one reclaim loses at most
# this fraction of the run's steps (the rule `rlpipe plan` states).
SPOT_MAX_STEPS_AT_RISK = 0.10

# How many children one sweep may make unless the deployment says otherwise (docs/sweeps.md).
DEFAULT_MAX_SWEEP_CHILDREN = 16

# Defaults of optional sections, merged under a request's section when it sets one.
SECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "export": {"step": "last", "select": None},
    "gate": {"min_post_mean_reward": None, "min_reward_gain": None, "min_post_accuracy": None},
    # Private until a person decides otherwise; a write token's own Secret, never the read one's.
    "publish": {
        "private": True,
        "branch": "main",
        "token_secret": dict(_WRITE_TOKEN_SECRET),
    },
}


_PRESETS: dict[str, dict[str, Any]] = {
    "v6e-32": {
        **_common("4x8", "v6e-32"),
        "pathways": {
            "proxy_image": PATHWAYS_PROXY_IMAGE,
            "server_image": PATHWAYS_SERVER_IMAGE,
            "worker_image": None,
            "head_node_pool": "cpu-np",
            "ttl_seconds_after_finished": 86400,
            "env": {
                "workload": {
                    "GRPC_DNS_RESOLVER": "native",
                    "FLAGS_pathways_enforce_subset_devices_form_subslice": "false",
                },
                "proxy": {
                    "GRPC_DNS_RESOLVER": "native",
                    "FLAGS_pathways_enforce_subset_devices_form_subslice": "false",
                },
                "resource_manager": {
                    "GRPC_DNS_RESOLVER": "native",
                    "FLAGS_pathways_enforce_subset_devices_form_subslice": "false",
                },
                "worker": {
                    "GRPC_DNS_RESOLVER": "native",
                    "FLAGS_pathways_enforce_subset_devices_form_subslice": "false",
                },
            },
        },
        "training": {
            "command_env": {
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "JAX_PLATFORMS": "proxy,cpu",
                "ENABLE_PATHWAYS_PERSISTENCE": "1",
            },
            "workarounds": ["adafactor-optimizer@1"],
            "scan_layers": False,
            "data_template_path": "maxtext/examples/chat_templates/openmathinstruct2_rl.json",
            "num_batches": 50,
            "batch_size": 4,
            "train_micro_batch_size": 2,
            "max_target_length": 640,
            "max_prefill_predict_length": 256,
            "mu_dtype": "bfloat16",
            "grad_dtype": "bfloat16",
            "rollout_tensor_parallelism": 4,
            "rollout_expert_parallelism": 1,
            "trainer_devices_fraction": 0.5,
            "sampler_devices_fraction": 0.5,
            "tokenizer_path": None,
            "ici_tensor_parallelism": 2,
            "ici_expert_parallelism": 4,
            "ici_fsdp_parallelism": -1,
            "hbm_utilization_vllm": 0.7,
            "remat_policy": "full",
            "async_scheduling": False,
            "allow_split_physical_axes": True,
            "ragged_gather_reduce_fallback": True,
            "enable_dp_attention": False,
            "decode_sampling_temperature": 0.8,
            "decode_sampling_top_k": 50,
            "decode_sampling_nucleus_p": 0.95,
            "learning_rate": 2e-5,
            "learning_rate_schedule_steps": 100,
            "num_generations": 4,
            "reshard_chunk_size": 4,
            "debug": True,
            "checkpoint_period": None,
            "vllm_hf_overrides": _VLLM_HF_OVERRIDES_32,
            "vllm_maxtext_config": {
                "model_call_mode": "inference",
                "enable_dp_attention": False,
                "allow_split_physical_axes": True,
                "use_ragged_sort": False,
                "ragged_gather_reduce_fallback": True,
                "prefuse_moe_weights": True,
                "weight_dtype": "bfloat16",
            },
        },
    },
    "v6e-64": {
        **_common("8x8", "v6e-64"),
        "pathways": {
            "proxy_image": PATHWAYS_PROXY_IMAGE,
            "server_image": PATHWAYS_SERVER_IMAGE,
            "worker_image": None,
            "head_node_pool": "cpu-np",
            # The v6e-64 tutorial passes no --gke-ttl-after-finished; gcluster's default is 1h.
            "ttl_seconds_after_finished": 3600,
            "env": {
                "workload": {"GRPC_DNS_RESOLVER": "native"},
                "proxy": {"GRPC_DNS_RESOLVER": "native"},
                "resource_manager": {"GRPC_DNS_RESOLVER": "native"},
                "worker": {"GRPC_DNS_RESOLVER": "native"},
            },
        },
        "training": {
            "command_env": {"JAX_PLATFORMS": "proxy,cpu", "ENABLE_PATHWAYS_PERSISTENCE": "1"},
            "workarounds": ["moe-permute-threshold@1"],
            "scan_layers": False,
            "data_template_path": None,
            "num_batches": 50,
            "batch_size": 8,
            "train_micro_batch_size": None,
            "max_target_length": None,
            "max_prefill_predict_length": None,
            "mu_dtype": None,
            "grad_dtype": None,
            "rollout_tensor_parallelism": 2,
            "rollout_expert_parallelism": 4,
            "trainer_devices_fraction": 0.5,
            "sampler_devices_fraction": 0.5,
            "tokenizer_path": None,
            "ici_tensor_parallelism": 2,
            "ici_expert_parallelism": 4,
            "ici_fsdp_parallelism": None,
            "hbm_utilization_vllm": 0.55,
            "remat_policy": "full",
            "async_scheduling": False,
            "allow_split_physical_axes": True,
            "ragged_gather_reduce_fallback": True,
            "enable_dp_attention": None,
            "decode_sampling_temperature": None,
            "decode_sampling_top_k": None,
            "decode_sampling_nucleus_p": None,
            "learning_rate": None,
            "learning_rate_schedule_steps": None,
            "num_generations": None,
            "reshard_chunk_size": None,
            "debug": None,
            "checkpoint_period": None,
            "vllm_hf_overrides": _VLLM_HF_OVERRIDES_64,
            "vllm_maxtext_config": {
                "allow_split_physical_axes": "true",
                "use_ragged_sort": "false",
                "ragged_gather_reduce_fallback": "true",
                "prefuse_moe_weights": "true",
                "weight_dtype": "bfloat16",
            },
        },
    },
}

# The MaxText architecture (a model config's ``decoder_block``, core/maxtext/model_names.json) each
# preset was made for: both tutorials train Gemma 4 26B A4B, and their parallelism, vLLM settings and
# in-container workarounds are that architecture's. A request's `model` must be of it.
PRESET_DECODER_BLOCK: dict[str, str] = {"v6e-32": "gemma4", "v6e-64": "gemma4"}

# MaxText facts the layout needs when a request leaves the field unset (rl.yml at maxtext-v0.2.4).
MAXTEXT_CHECKPOINT_PERIOD = 50
MAXTEXT_MAX_CHECKPOINTS_TO_KEEP = 10


def preset_defaults(name: str) -> dict[str, Any]:
    """A fresh, deep copy of one preset's field values (callers merge requests into it)."""
    return copy.deepcopy(_PRESETS[name])


# ---- what a deployment allows by default (rlpipe.core.request.policy; control.adapters.settings) ----------


def _repository_of(image: str) -> str:
    """``host/project/`` of an image reference: the registry project a deployment trusts."""
    host, project = image.split("/")[:2]
    return f"{host}/{project}/"


# The registries of the tutorials' images: MaxText's and the Pathways servers'.
TUTORIAL_IMAGE_PREFIXES: tuple[str, ...] = tuple(
    dict.fromkeys(_repository_of(i) for i in (MAXTEXT_IMAGE, PATHWAYS_IMAGE_REPO))
)
# The Secrets the presets name, as name:key: the read token, and the publish step's write token.
DEFAULT_READ_SECRETS = ("{name}:{key}".format(**_READ_TOKEN_SECRET),)
DEFAULT_WRITE_SECRETS = ("{name}:{key}".format(**_WRITE_TOKEN_SECRET),)
