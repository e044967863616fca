"""`model` must be a model MaxText knows, that its converters map, of the preset's architecture.

Before, `model: gemma-4-26b` (a Hub-style spelling) passed and the simulated run succeeded, and a
Llama model passed with the Gemma 4 preset: on a cluster, MaxText would have trained its default
architecture or stopped at conversion. Expected names come from MaxText 0.2.4's
``configs/models/*.yml``, ``HF_IDS`` and ``PARAM_MAPPING`` as read by hand, not from rlpipe.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import validate_request
from tests.conftest import ROOT, minimal_request


def _problem(**fields: object) -> str:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(minimal_request(**fields))
    [problem] = [p for p in caught.value.problems if p.path == "model"]
    return f"{problem.message} — fix: {problem.fix}"


def test_a_hub_style_spelling_is_refused_naming_the_closest_model() -> None:
    said = _problem(model="gemma-4-26b")
    assert "gemma-4-26b is not a model MaxText knows" in said and "did you mean gemma4-26b?" in said


def test_a_model_of_another_architecture_is_refused_with_the_gemma4_preset() -> None:
    said = _problem(model="llama3.1-8b")  # decoder_block llama2 (configs/models/llama3.1-8b.yml)
    assert "llama2 model" in said and "made for gemma4 models" in said and "gemma4-26b" in said
    assert "qwen3" in _problem(model="qwen3-8b", preset="v6e-64")


def test_a_model_the_converters_cannot_map_is_refused() -> None:
    """gemma-2b has a config file but no HF_IDS or PARAM_MAPPING entry (to_maxtext.py:882-885)."""
    assert "converters have no mapping for gemma-2b" in _problem(model="gemma-2b")


@pytest.mark.parametrize("model", ["gemma4-26b", "gemma4-31b"])
def test_the_preset_architectures_models_are_accepted(model: str) -> None:
    assert validate_request(minimal_request(model=model)).model == model


def test_the_plan_names_the_converter_mapping() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "plan", "examples/gemma4-26b-v6e-32.yaml", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    converter = json.loads(done.stdout)["conversion"]["converter"]
    assert converter["param_mapping"] == "GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING"
    assert converter["hf_id"] == "google/gemma-4-26b-a4b-it" and converter["decoder_block"] == "gemma4"
