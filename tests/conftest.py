"""Shared test helpers: example requests and the hand-written tutorial fixture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def tutorials() -> dict[str, Any]:
    return yaml.safe_load((FIXTURES / "tutorials.yaml").read_text())


def minimal_request(**fields: Any) -> dict[str, Any]:
    return {"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it", **fields}
