"""The serve check (``rlpipe.publisher.serve_check``) run for real: transformers and torch of the
serving tier load the programs tier's real export of the tiny Gemma 4 (MaxText's ``to_huggingface``
output), as a server would, and answer greedily; a config broken the way MaxT#2867 broke one, and a
model transformers cannot load, are refused naming why."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.harness.programs import kept
from tests.harness.serving import serving_python

pytestmark = pytest.mark.slow
PROGRAM = ROOT / "shared" / "rlpipe" / "publisher" / "serve_check.py"
BASE = ROOT / "tests" / "fixtures" / "tiny_gemma4"  # what the programs tier converted, then exported


def _base(tmp_path: Path, **text_config: Any) -> Path:
    """The fixture's files, its config saying what the model is built with: no per-layer inputs.
    (The fixture's config.json leaves ``hidden_size_per_layer_input`` to transformers' Gemma 4
    default, 256, which describes per-layer weights the fixture does not have: transformers then
    makes them up at random on every load, and the serve check, reading the base as transformers
    does, compares the export with that.)"""
    base = tmp_path / "base"
    shutil.copytree(BASE, base)
    config = json.loads((base / "config.json").read_text())
    config["text_config"].update({"hidden_size_per_layer_input": 0} | text_config)
    for name, value in text_config.items():
        if value is None:
            del config["text_config"][name]
    (base / "config.json").write_text(json.dumps(config))
    return base


def _check(model: Path, out: Path, base: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = base or _base(out.parent / f"{out.stem}-base")
    return subprocess.run(
        [str(serving_python()), str(PROGRAM), "--model", str(model), "--base", str(base), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def _export_copy(tmp_path: Path, **text_config: Any) -> Path:
    """The real export, copied, with its config as the trained model's (``AS_TRAINED``) and then
    these fields of its text config changed."""
    model = tmp_path / "export"
    shutil.copytree(kept("export", "hf-export"), model)
    config = json.loads((model / "config.json").read_text())
    config["vision_config"] = None
    config["text_config"].update(AS_TRAINED | text_config)
    (model / "config.json").write_text(json.dumps(config))
    return model


# What the real export's config says otherwise than the base model's, each read by AutoConfig.
# MaxText's to_huggingface writes its gemma4-26b table's sliding window, experts per token,
# bidirectional attention and vision tower, not the model's, though the export was given
# sliding_window_size=16 and num_experts_per_tok=2, the tiny model's (docs/programs.md, "Upstream
# limits found"); and where the fixture's config.json leaves the context length to transformers'
# Gemma 4 default (131,072 positions) the export writes the 26B's (262,144). The real 26B model's
# config has the table's values, so only a model of another size shows this.
REAL_EXPORT_DIFFERS = [
    "text_config.max_position_embeddings is 262144 where the base model's is 131072",
    "text_config.sliding_window is 1024 where the base model's is 16",
    "text_config.top_k_experts is 8 where the base model's is 2",
    "text_config.use_bidirectional_attention is 'vision' where the base model's is None",
    "vision_config is '<a mapping>' where the base model's is None",
]
AS_TRAINED = {
    "max_position_embeddings": 131072,
    "sliding_window": 16,
    "top_k_experts": 2,
    "use_bidirectional_attention": None,
}


def test_the_real_export_is_refused_where_its_config_is_not_the_trained_models(tmp_path: Path) -> None:
    done = _check(kept("export", "hf-export"), tmp_path / "evaluation.json")
    assert done.returncode == 2, done.stdout + done.stderr
    refusal = done.stderr.strip().splitlines()[-1]
    assert refusal.startswith("serve check refused: the export's config.json builds another model")
    assert refusal.split(": ", 2)[2].split("; ") == REAL_EXPORT_DIFFERS
    assert not (tmp_path / "evaluation.json").exists()


def test_the_export_with_the_trained_config_loads_and_answers_greedily_through_its_chat_template(
    tmp_path: Path,
) -> None:
    done = _check(_export_copy(tmp_path), tmp_path / "evaluation.json")
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / "evaluation.json").read_text())
    assert manifest["loaded_by"].startswith("transformers 5.12.1, torch 2.13.0")
    assert [a["prompt"] for a in manifest["answers"]] == ["What is 3 + 4?", "Name a primary color."]
    assert all(len(a["tokens"]) == 8 for a in manifest["answers"]), manifest["answers"]
    assert manifest["model_class"] == "Gemma4ForConditionalGeneration"  # the export's architectures
    # Greedy: the same model answers the same twice (the check is what a deploy gates on).
    again = _check(_export_copy(tmp_path / "again"), tmp_path / "again.json")
    assert again.returncode == 0
    assert json.loads((tmp_path / "again.json").read_text())["answers"] == manifest["answers"]


def test_an_export_whose_activation_is_not_the_models_is_refused_naming_it(tmp_path: Path) -> None:
    """MaxT#2867: a Gemma 3 export said ``hidden_activation: gelu`` for a model trained with
    ``gelu_pytorch_tanh``. transformers builds that model without complaint (it is another
    function), so the check compares the config with the base model's before loading."""
    done = _check(_export_copy(tmp_path, hidden_activation="gelu"), tmp_path / "e.json")
    assert done.returncode == 2
    assert (
        "text_config.hidden_activation is 'gelu' where the base model's is 'gelu_pytorch_tanh'" in done.stderr
    )


def test_an_export_transformers_cannot_load_is_refused_with_the_loaders_error(tmp_path: Path) -> None:
    model = _export_copy(tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # cut off mid-tensor
    done = _check(model, tmp_path / "e.json")
    assert done.returncode == 2
    assert "serve check refused: transformers cannot load the export:" in done.stderr, done.stderr


def test_a_field_the_base_config_leaves_to_its_default_is_compared_as_transformers_reads_it(
    tmp_path: Path,
) -> None:
    """A base whose config.json does not spell ``hidden_activation`` out (transformers' Gemma 4
    default is ``gelu_pytorch_tanh``), and an export that writes ``gelu``: refused all the same."""
    base = _base(tmp_path, hidden_activation=None)
    done = _check(_export_copy(tmp_path, hidden_activation="gelu"), tmp_path / "e.json", base=base)
    assert done.returncode == 2
    assert (
        "text_config.hidden_activation is 'gelu' where the base model's is 'gelu_pytorch_tanh'" in done.stderr
    )
