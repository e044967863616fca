"""The lists rlpipe keeps of what MaxText 0.2.4 defines, against the package the programs tier installs.

``core/maxtext/config_keys.json`` (every config model's fields, its nested sections, the flat keys its
config files set) and ``core/maxtext/model_names.json`` (every model config, its architecture and its
converter mapping) are written from the tag's sources by the generators in ``tests/fixtures/``;
validation reads them. Here the same generators read the installed package's files, and what
``pyconfig`` itself builds (the tier's ``config`` result) is compared too: a MaxText upgrade that
adds, drops or moves a key or a model fails here, naming the regeneration command, until the
lists say so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from programs.run import CACHE
from rlpipe.core.maxtext import config_keys
from tests.conftest import ROOT
from tests.harness.programs import result

FIXTURES = ROOT / "tests" / "fixtures"
CORE = ROOT / "shared" / "rlpipe" / "core" / "maxtext"
REGENERATE = "python tests/fixtures/{script} --installed {site}  (or the tag's checkout)"


def _site_packages() -> Path:
    found = sorted(CACHE.glob("venv/lib/python3.*/site-packages/maxtext"))
    if not found:
        result("config")  # no venv: the tier's own answer (skip, or fail under CI, naming the fix)
        pytest.fail("the programs tier has results but no installed maxtext")
    return found[0].parent


def _generator(name: str) -> Any:
    sys.path.insert(0, str(FIXTURES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(FIXTURES))


def test_the_config_key_list_is_the_installed_packages() -> None:
    generator = _generator("maxtext_keys_from_source")
    site = _site_packages()
    installed = generator.document(generator.installed_reader(site))
    committed = json.loads((CORE / "config_keys.json").read_text())
    fix = REGENERATE.format(script="maxtext_keys_from_source.py", site=site)
    for part in ("programs", "models", "config_flat_keys", "config_files"):
        assert installed[part] == committed[part], f"core/maxtext/config_keys.json's {part} drifted: {fix}"


def test_the_model_list_is_the_installed_packages() -> None:
    generator = _generator("maxtext_models_from_source")
    site = _site_packages()
    installed = generator.from_installed(site)
    committed = json.loads((CORE / "model_names.json").read_text())
    fix = REGENERATE.format(script="maxtext_models_from_source.py", site=site)
    assert installed["models"] == committed["models"], f"core/maxtext/model_names.json drifted: {fix}"
    assert installed["sources"] == committed["sources"], f"the lines cited drifted: {fix}"


def test_the_sections_pyconfig_builds_are_the_ones_validation_reads() -> None:
    """What the installed pyconfig builds (``nested``: each config class's sections and their keys,
    read from the classes themselves) is what ``core.maxtext.config_keys`` resolves against."""
    nested: dict[str, dict[str, dict[str, Any]]] = result("config")["nested"]
    for program, config_class in (("train_rl", "RLConfig"), ("vllm_maxtext_config", "MaxTextConfig")):
        keys = config_keys.for_program(program)
        built = nested[config_class]
        assert sorted(keys.sections) == sorted(built), f"{config_class}: nested sections"
        for section, found in built.items():
            assert sorted(keys.sections[section]) == found["keys"], f"{config_class}.{section}"


def test_the_two_spellings_core_steps_relies_on() -> None:
    """rl.num_iterations is a nested key; num_batches is the dataset section's, not rl's."""
    rl = result("config")["nested"]["RLConfig"]["rl"]["keys"]
    assert "num_iterations" in rl and "num_batches" not in rl
    assert "num_batches" in result("config")["nested"]["RLConfig"]["dataset"]["keys"]
