"""Bad requests are rejected with one error listing every problem, each with its path and fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import MAX_DOCUMENT_BYTES, load_request, validate_request
from tests.conftest import minimal_request


def _problems(doc: Any) -> dict[str, str]:
    with pytest.raises(RequestInvalid) as info:
        validate_request(doc) if isinstance(doc, dict) else load_request(doc)
    assert all(p.fix for p in info.value.problems), "every problem names a fix"
    found: dict[str, str] = {}
    for p in info.value.problems:  # a path can have several problems: all of them, in order
        found[p.path] = " || ".join(filter(None, (found.get(p.path), f"{p.message} | {p.fix}")))
    return found


def test_minimal_request_takes_every_other_value_from_the_preset() -> None:
    req = validate_request(minimal_request())
    assert req.preset == "v6e-32" and req.tpu.topology == "4x8" and req.training.batch_size == 4
    req64 = validate_request(minimal_request(preset="v6e-64"))
    assert req64.tpu.topology == "8x8" and req64.training.batch_size == 8
    assert req64.training.train_micro_batch_size is None  # the v6e-64 tutorial does not pass it


def test_overrides_merge_into_the_preset_instead_of_replacing_it() -> None:
    req = validate_request(
        minimal_request(training={"num_batches": 100}, retry={"budgets": {"preempted": 9}})
    )
    assert req.training.num_batches == 100 and req.training.batch_size == 4
    assert req.retry.budgets.preempted == 9 and req.retry.budgets.capacity == 10


@pytest.mark.parametrize("missing", ["model", "hf_repo"])
def test_required_fields(missing: str) -> None:
    doc = minimal_request()
    del doc[missing]
    assert missing in _problems(doc)


def test_unknown_keys_at_any_depth_are_rejected_with_a_suggestion() -> None:
    problems = _problems(minimal_request(modle="x", training={"batch_sise": 4}, tpu={"slice": 2}))
    assert set(problems) >= {"modle", "training.batch_sise", "tpu.slice"}
    assert "batch_size" in problems["training.batch_sise"]
    assert "slices" in problems["tpu.slice"]


@pytest.mark.parametrize(("tpu_type", "topology"), [("v6e-32", "8x8"), ("v6e-64", "4x8"), ("v6e-64", "4x4")])
def test_topology_must_match_the_tpu_type(tpu_type: str, topology: str) -> None:
    problems = _problems(minimal_request(tpu={"type": tpu_type, "topology": topology}))
    assert "does not match" in problems["tpu.topology"]


@pytest.mark.parametrize("slices", [0, -1])
def test_slices_below_one(slices: int) -> None:
    assert "tpu.slices" in _problems(minimal_request(tpu={"slices": slices}))


def test_trainer_mesh_must_tile_the_trainer_chips() -> None:
    # v6e-32: 32 chips × 0.5 = 16 trainer chips; tensor 3 × expert 4 = 12 does not divide 16.
    problems = _problems(minimal_request(training={"ici_tensor_parallelism": 3}))
    assert "16 chips" in problems["training.ici_tensor_parallelism"]


def test_explicit_fsdp_must_make_the_product_exact() -> None:
    problems = _problems(minimal_request(training={"ici_fsdp_parallelism": 4}))  # 2×4×4 = 32 ≠ 16
    assert "32" in problems["training.ici_fsdp_parallelism"]


def test_rollout_parallelism_must_tile_the_sampler_chips() -> None:
    problems = _problems(minimal_request(training={"rollout_tensor_parallelism": 3}))
    assert "sampler" in problems["training.rollout_tensor_parallelism"]


def test_fractions_must_give_whole_chips_and_not_exceed_one() -> None:
    problems = _problems(
        minimal_request(training={"trainer_devices_fraction": 0.33, "sampler_devices_fraction": 0.75})
    )
    assert "exceed 1" in problems["training.sampler_devices_fraction"]
    assert "whole number" in problems["training.trainer_devices_fraction"]


def test_multi_slice_counts_all_chips() -> None:
    # Two v6e-32 slices: 64 chips, 32 for the trainer, so tensor 2 × expert 4 × fsdp 4 = 32 fits.
    req = validate_request(minimal_request(tpu={"slices": 2}, training={"ici_fsdp_parallelism": 4}))
    assert req.tpu.slices == 2


def test_batch_size_must_divide_by_the_micro_batch() -> None:
    problems = _problems(minimal_request(training={"batch_size": 5}))
    assert "train_micro_batch_size 2" in problems["training.batch_size"]


def test_label_too_long_for_kubernetes() -> None:
    problems = _problems(minimal_request(labels={"team": "x" * 64, "a" * 64: "ok", "kubernetes.io/x": "y"}))
    assert "63" in problems["labels.team"]
    assert "labels." + "a" * 64 in problems
    assert "reserved" in problems["labels.kubernetes.io/x"]


def test_model_name_too_long_for_its_label() -> None:
    problems = _problems(minimal_request(model="m" * 64))
    assert "63" in problems["model"]


def test_every_problem_is_reported_at_once() -> None:
    doc = minimal_request(
        tpu={"topology": "8x8"},
        training={"batch_size": 5, "bogus": 1},
        image="registry.example/img:latest",
        maxtext_overrides={"Bad Key": 1, "learning_rate": 0.1, "x": "$(rm -rf /)"},
        timeouts={"train": "2 weeks"},
    )
    problems = _problems(doc)
    assert {
        "tpu.topology",
        "training.batch_size",
        "training.bogus",
        "image",
        "maxtext_overrides.Bad Key",
        "maxtext_overrides.learning_rate",
        "maxtext_overrides.x",
        "timeouts.train",
    } <= set(problems)


@pytest.mark.parametrize(
    ("image", "fragment"),
    [
        ("us-docker.pkg.dev/p/r/img", "no tag or digest"),
        ("us-docker.pkg.dev/p/r/img:latest", "latest"),
        ("not an image", "not a container image"),
    ],
)
def test_images_must_be_pinned(image: str, fragment: str) -> None:
    assert fragment in _problems(minimal_request(image=image))["image"]
    assert fragment in _problems(minimal_request(pathways={"proxy_image": image}))["pathways.proxy_image"]


def test_digest_pinned_image_is_accepted() -> None:
    image = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/img@sha256:" + "a" * 64  # an allowed registry
    assert validate_request(minimal_request(image=image)).image == image


@pytest.mark.parametrize(
    ("overrides", "path", "fragment"),
    [
        ({"Bad-Key": 1}, "maxtext_overrides.Bad-Key", "not a MaxText config key"),
        # No value reaches a shell ("$@"): what matters is what MaxText reads, here text for a number,
        # and a line break that YAML folds into a space.
        ({"eval_interval": "1; rm -rf /"}, "maxtext_overrides.eval_interval", "not a whole number"),
        ({"eval_interval": "a\nb"}, "maxtext_overrides.eval_interval", "as the text 'a b'"),
        (
            {"base_output_directory": "gs://x"},
            "maxtext_overrides.base_output_directory",
            "set by the pipeline",
        ),
        ({"rl.num_generations": 8}, "maxtext_overrides.rl.num_generations", "training.num_generations"),
        # Keys that would make the end of training unverifiable or ambiguous (the train done rule).
        ({"enable_checkpointing": False}, "maxtext_overrides.enable_checkpointing", "not even the final one"),
        ({"dataset.batch_size": 8}, "maxtext_overrides.dataset.batch_size", "training.batch_size"),
        ({"dataset.train_fraction": 0.5}, "maxtext_overrides.dataset.train_fraction", "would be ignored"),
        (
            {"rl.num_iterations": 2, "num_iterations": 3},
            "maxtext_overrides.num_iterations",
            "same MaxText value given twice",
        ),
        ({"train_fraction": 1.5}, "maxtext_overrides.train_fraction", "(0, 1]"),
        ({"num_epoch": 0}, "maxtext_overrides.num_epoch", ">= 1"),
        ({"num_epoch": True}, "maxtext_overrides.num_epoch", "whole number"),
        ({"train_fraction": 0.01}, "maxtext_overrides.train_fraction", "rounds down to 0 steps"),
        ({"max_num_checkpoints_to_keep": 0}, "maxtext_overrides.max_num_checkpoints_to_keep", ">= 1"),
    ],
)
def test_maxtext_overrides(overrides: dict[str, Any], path: str, fragment: str) -> None:
    assert fragment in _problems(minimal_request(maxtext_overrides=overrides))[path]


def test_checkpointing_off_is_refused_with_the_key_and_the_reason() -> None:
    problems = _problems(minimal_request(maxtext_overrides={"enable_checkpointing": "maybe"}))
    assert "not true or false" in problems["maxtext_overrides.enable_checkpointing"]
    for value in (False, "false", "False"):  # MaxText reads key=value as YAML: all three are false
        message = _problems(minimal_request(maxtext_overrides={"enable_checkpointing": value}))[
            "maxtext_overrides.enable_checkpointing"
        ]
        assert "finished training cannot be told from a crashed one" in message
        assert "export has nothing to read" in message
        # and the text "false" is also refused for being read as another type than written
        assert ("as the boolean false" in message) == isinstance(value, str)


def test_step_overrides_that_keep_the_end_verifiable_are_accepted() -> None:
    from rlpipe.core import steps

    for overrides, final in (
        ({"num_epoch": 2}, 100),
        ({"train_fraction": 0.5}, 25),
        ({"num_iterations": 2}, 100),
        ({"num_epoch": 3}, 150),
        ({"enable_checkpointing": True, "max_num_checkpoints_to_keep": 3}, 50),
    ):
        assert steps.final_step(validate_request(minimal_request(maxtext_overrides=overrides))) == final


def test_override_values_must_be_scalars() -> None:
    assert any(
        p.startswith("maxtext_overrides.x") for p in _problems(minimal_request(maxtext_overrides={"x": [1]}))
    )


def test_valid_overrides_are_appended_to_train_rl() -> None:
    req = validate_request(minimal_request(maxtext_overrides={"eval_interval": 5, "rl.num_iterations": 2}))
    assert req.maxtext_overrides == {"eval_interval": 5, "rl.num_iterations": 2}


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (minimal_request(hf_token="hf_" + "a" * 34), "hf_token"),
        (minimal_request(training={"command_env": {"HF_TOKEN": "x"}}), "training.command_env.HF_TOKEN"),
        (minimal_request(labels={"note": "hf_" + "b" * 34}), "labels.note"),
    ],
)
def test_secrets_are_never_accepted(doc: dict[str, Any], path: str) -> None:
    problems = _problems(doc)
    assert path in problems and ("secret" in problems[path].lower() or "token" in problems[path].lower())
    assert "hf_" + "a" * 34 not in json.dumps(problems) and "hf_" + "b" * 34 not in json.dumps(problems)


def test_keys_that_merely_contain_token_are_not_secrets() -> None:
    req = validate_request(minimal_request(training={"tokenizer_path": "google/gemma-4-26b-a4b-it"}))
    assert req.training.tokenizer_path == "google/gemma-4-26b-a4b-it"
    assert "access_token" in _problems(minimal_request(labels={"x": "y"}, access_token="abc"))


@pytest.mark.parametrize(
    ("revision", "ok"),
    [
        ("main", True),
        ("v1.0", True),
        ("a" * 40, True),
        ("A" * 40, False),
        ("-rf", False),
        ("a..b", False),
        ("x y", False),
    ],
)
def test_hf_revision_is_a_branch_or_full_sha(revision: str, ok: bool) -> None:
    if ok:
        assert validate_request(minimal_request(hf_revision=revision)).hf_revision == revision
    else:
        assert "hf_revision" in _problems(minimal_request(hf_revision=revision))


@pytest.mark.parametrize(
    ("request_id", "ok"), [("nightly-1", True), ("x" * 40, True), ("x" * 41, False), ("Caps", False)]
)
def test_request_id_syntax(request_id: str, ok: bool) -> None:
    if ok:
        assert validate_request(minimal_request(request_id=request_id)).request_id == request_id
    else:
        assert "request_id" in _problems(minimal_request(request_id=request_id))


def test_durations_accept_units() -> None:
    req = validate_request(minimal_request(timeouts={"train": "36h", "convert": 7200, "queued": "90m"}))
    assert (req.timeouts.train, req.timeouts.convert, req.timeouts.queued) == (36 * 3600, 7200, 5400)


def test_unknown_workaround_names_the_registry() -> None:
    problems = _problems(minimal_request(training={"workarounds": ["adafactor-optimizer@9"]}))
    assert "adafactor-optimizer@1" in problems["training.workarounds"]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"\xff\xfe\x00garbage", "UTF-8"),
        (b"model: [unclosed", "not valid JSON or YAML"),
        (b"- a\n- b\n", "not a mapping"),
        (b"just a string", "not a mapping"),
        (b"model: a\nmodel: b\n", "duplicate key"),
        (b"a: &x [1]\nb: *x\n", "aliases"),
        (b"x" * (MAX_DOCUMENT_BYTES + 1), "bytes"),
    ],
)
def test_unreadable_documents(data: bytes, fragment: str) -> None:
    with pytest.raises(RequestInvalid) as info:
        load_request(data, source="requests/x.yaml")
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "data",
    [
        b'{"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it",}',
        b"model: gemma4-26b",
        b'{"a": 1, "a": 2}',
    ],
)
def test_json_files_are_parsed_as_strict_json(data: bytes) -> None:
    with pytest.raises(RequestInvalid) as info:
        load_request(data, source="requests/x.json")
    assert "not valid JSON" in str(info.value) or "duplicate key" in str(info.value)


def test_json_and_yaml_give_the_same_request() -> None:
    doc = minimal_request(preset="v6e-64", training={"num_batches": 10})
    from_json = load_request(json.dumps(doc).encode())
    from_yaml = load_request(
        "model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\npreset: v6e-64\ntraining:\n  num_batches: 10\n"
    )
    assert from_json == from_yaml


def test_a_fraction_that_keeps_fewer_than_one_batch_is_refused_before_any_tpu() -> None:
    """Two iterations per batch make max_steps int(2 × 2 × 0.4) = 1, while train_fraction keeps
    int(2 × 8 × 0.4) = 6 examples: no whole batch of 8 (drop_remainder), so train_rl would fail
    before its first step."""
    from rlpipe.core.problems import RequestInvalid

    training = {"num_batches": 2, "batch_size": 8}
    doc = minimal_request(
        training=training, maxtext_overrides={"train_fraction": 0.6, "rl.num_iterations": 2}
    )
    validate_request(doc)  # 9 examples: one batch of 8
    doc["maxtext_overrides"] = {
        "train_fraction": 0.4,
        "rl.num_iterations": 2,
        "num_epoch": 2,
    }  # 12 over two epochs
    validate_request(doc)
    doc["maxtext_overrides"] = {"train_fraction": 0.4, "rl.num_iterations": 2}
    with pytest.raises(RequestInvalid) as caught:
        validate_request(doc)
    [problem] = [p for p in caught.value.problems if p.path == "maxtext_overrides.train_fraction"]
    assert "fewer than one batch of 8" in problem.message


def test_a_split_name_datasets_would_refuse_is_refused_here() -> None:
    """datasets accepts split names of word characters and dots only (datasets 5.2.0 naming.py:29);
    `test-v2` would fail inside the training pod."""
    from rlpipe.core.problems import RequestInvalid

    validate_request(minimal_request(dataset={"eval_split": "test.v2"}))
    with pytest.raises(RequestInvalid) as caught:
        validate_request(minimal_request(dataset={"eval_split": "test-v2"}))
    assert [p.path for p in caught.value.problems] == ["dataset.eval_split"]
