"""The committed nested-key fixture against the installed MaxText (the programs tier's ``config`` part).

``tests/fixtures/maxtext_nested_keys.yaml`` names every nested section of MaxText 0.2.4's config
models and its keys, citing ``configs/types.py``; ``make programs`` read the same from the package
the lock installs. A MaxText upgrade that adds, drops or moves a nested key fails here until the
fixture says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.harness.programs import result

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "maxtext_nested_keys.yaml"


def _installed() -> dict[str, dict[str, dict[str, Any]]]:
    nested: dict[str, dict[str, dict[str, Any]]] = result("config")["nested"]
    return nested


def test_the_fixture_names_every_nested_section_and_key_of_the_installed_maxtext() -> None:
    fixture, installed = yaml.safe_load(FIXTURE.read_text()), _installed()
    assert sorted(fixture) == sorted(installed), "config classes"
    for cls, sections in installed.items():
        assert sorted(fixture[cls]) == sorted(sections), f"{cls}: nested sections"
        for name, section in sections.items():
            written = fixture[cls][name]
            assert written["model"] == section["model"], f"{cls}.{name}: model"
            assert sorted(written["keys"]) == section["keys"], f"{cls}.{name}: keys"


def test_the_fixture_cites_the_lines_of_types_py() -> None:
    fixture, installed = yaml.safe_load(FIXTURE.read_text()), _installed()
    for cls, sections in installed.items():
        for name, section in sections.items():
            written = fixture[cls][name]
            assert (written["model_line"], written["field_line"]) == (
                section["model_line"],
                section["field_line"],
            ), f"{cls}.{name}: types.py lines"


def test_rl_num_iterations_is_a_nested_key_and_num_batches_is_not_an_rl_one() -> None:
    """The two spellings core.steps relies on: rl.num_iterations exists; rl.num_batches does not."""
    rl = _installed()["RLConfig"]["rl"]["keys"]
    assert "num_iterations" in rl and "num_batches" not in rl
    assert "num_batches" in _installed()["RLConfig"]["dataset"]["keys"]
