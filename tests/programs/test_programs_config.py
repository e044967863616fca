"""MaxText's own config reader judges every argv rlpipe renders (the programs tier's ``config`` part).

Every example (each sweep child too) and every preset, each MaxText stage, exactly as the rendered
container gets it: the real ``pyconfig.initialize`` of MaxText 0.2.4 (``make programs`` ran it,
with argv[0] the program's own file, so train read ``rl.yml``) must accept it, every ``--flag``
must be one the program defines, and every key must read back as the request means it. The
expected values come from the request object and the run's layout, never from the rendered
strings: a value the renderer spells in a way MaxText reads otherwise fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from programs.cases import BUCKET, HF_REVISION, RUN_ID, cases, requests
from rlpipe.core import export_manifest, layout, pinning, staging
from rlpipe.core.manifests import RenderContext, stage_paths
from rlpipe.core.request import Request
from tests.harness.programs import result

CASES = {c.name: c for c in cases()}
REQUESTS = requests()
CTX = RenderContext(run_id=RUN_ID, bucket=BUCKET, hf_revision=HF_REVISION)


def _config_case(name: str) -> dict[str, Any]:
    found = {c["name"]: c for c in result("config")["cases"]}
    assert name in found, f"{name} was not judged: make programs renders every case (programs.cases)"
    return found[name]


# What each rendered key means, from the request (or the run's layout): the test's own table.
TRAINING_KEYS = [
    "num_batches",
    "batch_size",
    "train_micro_batch_size",
    "max_target_length",
    "max_prefill_predict_length",
    "rollout_tensor_parallelism",
    "rollout_expert_parallelism",
    "trainer_devices_fraction",
    "sampler_devices_fraction",
    "ici_tensor_parallelism",
    "ici_expert_parallelism",
    "ici_fsdp_parallelism",
    "hbm_utilization_vllm",
    "remat_policy",
    "async_scheduling",
    "allow_split_physical_axes",
    "ragged_gather_reduce_fallback",
    "enable_dp_attention",
    "decode_sampling_temperature",
    "decode_sampling_top_k",
    "decode_sampling_nucleus_p",
    "learning_rate",
    "learning_rate_schedule_steps",
    "debug",
    "checkpoint_period",
]


def _expectations(req: Request, stage: str) -> dict[str, Any]:
    t, d = req.training, req.dataset
    paths = stage_paths(req, CTX, stage, 1)  # type: ignore[arg-type]
    common = {"model_name": req.model, "scan_layers": t.scan_layers}
    if stage == "convert":
        return {
            **common,
            "base_output_directory": paths.output,
            "use_multimodal": False,  # the text model only
            "skip_jax_distributed_system": True,  # one CPU process
            "hardware": "cpu",
            "checkpoint_storage_use_zarr3": False,  # what Pathways reads
            "checkpoint_storage_use_ocdbt": False,
        }
    if stage == "export":
        return {
            **common,
            "load_parameters_path": paths.inputs,
            # to_huggingface writes on the pod's scratch volume; rlpipe's upload step, not
            # MaxText, copies that folder to paths.output with its manifest (core.export_manifest)
            "base_output_directory": export_manifest.LOCAL_DIR,
            "skip_jax_distributed_system": True,
            "hardware": "cpu",
            "use_multimodal": False,
            "weight_dtype": "bfloat16",
        }
    expected: dict[str, Any] = {
        **common,
        "run_name": layout.TRAIN_RUN_NAME,
        "base_output_directory": paths.output,
        "load_parameters_path": paths.inputs,
        **{k: getattr(t, k) for k in TRAINING_KEYS},
        "mu_dtype": t.mu_dtype,
        "grad_dtype": t.grad_dtype,
        "rl.num_generations": t.num_generations,
        "rl.reshard_chunk_size": t.reshard_chunk_size,
        "tokenizer_path": t.tokenizer_path or pinning.HEAD_PINNED_DIR,
        "data_template_path": (
            staging.user_file_path("chat_template") if req.chat_template is not None else t.data_template_path
        ),
        # both are mappings in MaxText's config; the request holds the first as YAML text
        "vllm_hf_overrides": yaml.safe_load(t.vllm_hf_overrides),
        "vllm_additional_config": {"maxtext_config": {"model_name": req.model, **t.vllm_maxtext_config}},
        "dataset_name": d.repo,
        "eval_dataset_name": d.evaluated_repo,
        "hf_subset": d.subset,
        "train_split": d.train_split,
        "eval_split": d.eval_split,
        "hf_train_files": staging.data_files_pattern(layout.RunLayout(BUCKET, RUN_ID), "train"),
        "hf_eval_files": staging.data_files_pattern(layout.RunLayout(BUCKET, RUN_ID), "eval"),
        **dict(req.maxtext_overrides),
    }
    if req.rewards is not None:
        expected["reward_functions_path"] = staging.user_file_path("rewards")
        expected["reward_functions"] = ",".join(req.rewards.functions)  # MaxText splits it on commas
    if d.processor is not None:
        expected["dataset_processor_path"] = staging.user_file_path("processor")
    return expected


def _read_back(entry: dict[str, Any]) -> Any:
    """The value MaxText holds; a dtype as its name, a nested model as its fields."""
    return entry["value"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_maxtexts_reader_accepts_the_rendered_argv(name: str) -> None:
    judged = _config_case(name)
    assert judged["accepted"], f"MaxText's pyconfig refused {name}: {judged['error']}"
    unknown = [flag for flag, known in judged["flags"].items() if not known]
    assert not unknown, f"{name}: flags the program does not define: {unknown}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_rendered_value_reads_back_as_the_request_means_it(name: str) -> None:
    case = CASES[name]
    judged = _config_case(name)
    assert judged["accepted"], judged["error"]
    expected = _expectations(REQUESTS[name.rsplit("/", 1)[0]], case.stage)
    wrong, ignored, unexplained = [], [], []
    for key, entry in judged["values"].items():
        if entry.get("missing"):
            ignored.append(key)
            continue
        if key not in expected:
            unexplained.append(key)
            continue
        want, got = expected[key], _read_back(entry)
        same_type = entry["type"] in ("dtype", "dict") or type(want).__name__ == entry["type"]
        if got != want or not same_type:
            wrong.append(f"{key}: MaxText read {got!r} ({entry['type']}), the request means {want!r}")
    assert not ignored, (
        f"{name}: MaxText accepted {ignored} and keeps them nowhere (nested keys it does not know)"
    )
    assert not wrong, f"{name}:\n" + "\n".join(wrong)
    assert not unexplained, f"{name}: no expectation for {unexplained}: say in this test what each means"


def _corpus() -> dict[str, dict[str, Any]]:
    return {entry["item"]: entry for entry in result("config")["corpus"]}


def test_the_reader_refuses_an_unknown_top_level_key_and_ignores_an_unknown_nested_one() -> None:
    corpus = _corpus()
    assert "'bogus_top' not in" in corpus["bogus_top=1"]["error"]
    nested = corpus["rl.bogus_key=1"]
    assert "error" not in nested and nested.get("missing"), nested  # accepted, and kept nowhere


def test_the_reader_reads_values_as_yaml() -> None:
    corpus = _corpus()
    assert corpus["load_full_state_path='gs://b/runs/victim/x'"]["value"] == "gs://b/runs/victim/x"
    assert corpus["load_full_state_path= gs://b/runs/victim/x"]["value"] == "gs://b/runs/victim/x"
    assert (corpus["learning_rate=2e-5"]["value"], corpus["learning_rate=2e-5"]["type"]) == (2e-5, "float")
    assert (corpus["rl.num_generations=4"]["value"], corpus["rl.num_generations=4"]["type"]) == (4, "int")
    assert (corpus["debug=True"]["value"], corpus["debug=True"]["type"]) == (True, "bool")
    assert corpus["hf_train_files="]["value"] is None  # pyconfig turns an empty file list into None
