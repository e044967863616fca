"""The programs tier's results are read only when they are this checkout's (tests/harness/programs.py).

A result is stored under the hash of its inputs; a test that finds none for the current hash
must not pass on an old one: it skips naming ``make programs`` (stale or missing), and under
CI=true, where ``make test`` runs the tier first, it fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from programs import parts
from tests.harness import programs as harness


def _store(cache: Path, name: str, key: str) -> None:
    folder = cache / "results" / f"{name}-{key}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"part": name, "key": key}))


def test_a_missing_result_skips_naming_make_programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="run `make programs`"):
        harness.result("config", cache_dir=tmp_path)


def test_a_result_of_other_inputs_is_stale_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    _store(tmp_path, "config", "0" * 20)  # made from another rendering, lock, fixture or driver
    with pytest.raises(pytest.skip.Exception, match="stale"):
        harness.result("config", cache_dir=tmp_path)


def test_under_ci_a_missing_result_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="make programs"):
        harness.result("export", cache_dir=tmp_path)


def test_the_result_of_the_current_key_is_read(tmp_path: Path) -> None:
    _store(tmp_path, "train_data", parts.key("train_data"))
    assert harness.result("train_data", cache_dir=tmp_path)["key"] == parts.key("train_data")


def test_the_key_changes_with_the_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another argv is another key: a result made before a rendering change is never read after it."""
    before = parts.key("config")
    changed = dict(parts.parts())
    config = changed["config"]
    job = {**config.job, "cases": [{**config.job["cases"][0], "args": ["model_name=other"]}]}
    changed["config"] = parts.Part("config", job, config.files)
    monkeypatch.setattr(parts, "parts", lambda: changed)
    assert parts.key.__wrapped__("config") != before
