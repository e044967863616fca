"""The serving tier for the tests: the interpreter of ``make serving`` (torch and transformers from
programs/requirements-serving.lock, docs/evaluation.md), or a skip naming ``make serving``; under
CI=true, where ``make test`` builds the tier first, a failure instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ROOT

SERVING_PYTHON = ROOT / ".cache" / "serving" / "venv" / "bin" / "python"


def serving_python() -> Path:
    stamp = SERVING_PYTHON.parent.parent / ".stamp"
    if SERVING_PYTHON.exists() and stamp.exists():
        return SERVING_PYTHON
    reason = "the serving tier is not built: run `make serving` (torch, transformers and lm-evaluation-harness, 5.5 GB the first time)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI builds the serving tier (make test: serving-if-python), but: {reason}")
    pytest.skip(reason)
    raise AssertionError("unreachable")
