"""What the real MaxText programs did with today's rendering, for the tests: ``make programs`` results.

The programs run in ``make programs`` (minutes; Python >= 3.12), not in pytest; each part's result
is stored under the hash of its inputs (``programs.parts``). A test asks for a part's result, and
gets the one made from this checkout's rendering, lock, fixture and code, or none: a missing or
stale result skips the test, naming ``make programs`` (or the missing Python), and under CI=true,
where ``make test`` runs the tier first, fails it instead. What a part keeps beside its result (the
export's own files) is found the same way (:func:`kept`).
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from programs import parts
from programs.run import CACHE

VENV_SCRIPT = parts.HERE / "venv.sh"


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs the programs tier (make test: programs-if-python), but: {reason}")
    pytest.skip(reason)


@cache
def _python_found() -> bool:
    done = subprocess.run([str(VENV_SCRIPT), "--find-python"], capture_output=True, check=False)
    return done.returncode == 0


@cache
def _load(name: str, cache_dir: Path) -> dict[str, Any] | None:
    path = parts.result_dir(cache_dir, name) / "result.json"
    if not path.exists():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def result(name: str, cache_dir: Path = CACHE) -> dict[str, Any]:
    """The part's result for this checkout (skips, or fails under CI, when there is none)."""
    found = _load(name, cache_dir)
    if found is not None:
        return found
    if not _python_found():
        _missing(
            "the MaxText programs need Python 3.12 or 3.13 and none is installed: install one "
            "(pyenv install 3.12), then run `make programs`"
        )
    others = sorted((cache_dir / "results").glob(f"{name}-*/result.json"))
    if others:
        _missing(
            f"the programs tier's {name} result is stale (rlpipe's rendering, the lock, the fixture "
            f"or a driver changed since it ran): run `make programs`"
        )
    _missing(f"the programs tier has no {name} result: run `make programs`")
    raise AssertionError("unreachable")  # pytest.skip and pytest.fail raise


def kept(name: str, folder: str, cache_dir: Path = CACHE) -> Path:
    """A folder the part kept beside this checkout's result (skips or fails as :func:`result`)."""
    result(name, cache_dir)
    path = parts.result_dir(cache_dir, name) / folder
    assert path.is_dir(), f"the {name} result keeps no {folder}/: run `make programs` again"
    return path
