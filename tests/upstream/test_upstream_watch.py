"""Watch list validation (every problem, with path and fix) and the pure release rules."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cli.upstream import register
from rlpipe.upstream.release import (
    describe_ignored,
    describe_release,
    diff,
    matcher,
    missing_shards,
    release_key,
)
from rlpipe.upstream.watchlist import (
    DEFAULT_TRIGGER_FILES,
    WatchListInvalid,
    load_watch_list,
    template_hash,
    validate_watch_list,
)
from tests.conftest import ROOT

REPO = "google/gemma-4-26b-a4b-it"


def _doc(*entries: dict[str, Any]) -> bytes:
    return yaml.safe_dump({"watch": list(entries)}).encode()


def _entry(**fields: Any) -> dict[str, Any]:
    return {"hf_repo": REPO, "template": {"model": "gemma4-26b"}, **fields}


def _paths(exc: WatchListInvalid) -> dict[str, str]:
    return {p.path: f"{p.message} | {p.fix}" for p in exc.problems}


def test_defaults_and_identity() -> None:
    [entry] = validate_watch_list(_doc(_entry())).entries
    assert (entry.branch, entry.debounce_minutes, entry.enabled) == ("main", 30, True)
    assert tuple(entry.trigger_files) == DEFAULT_TRIGGER_FILES
    assert entry.key == f"main@{template_hash({'model': 'gemma4-26b'})}"
    # The hash is of the canonical JSON: key order does not matter, any value does.
    assert (
        template_hash({"a": 1, "b": 2}) == template_hash({"b": 2, "a": 1}) != template_hash({"a": 1, "b": 3})
    )
    doc = entry.request_document("a" * 40)
    assert doc == {"model": "gemma4-26b", "hf_repo": REPO, "hf_revision": "a" * 40}


def test_every_problem_is_listed_with_its_path_and_fix() -> None:
    data = _doc(
        _entry(debounce_minute=5),  # unknown key (typo)
        _entry(template={"model": "gemma4-26b", "request_id": "nightly"}),
        _entry(trigger_files="*.safetensors"),  # a string, not a list
        _entry(trigger_files=["config.json", 7]),  # a glob that is not a string
        _entry(template={"model": "gemma4-26b", "training": {"batch_size": "four"}}),
        _entry(branch="refs/heads/main", enabled="yes"),
    )
    with pytest.raises(WatchListInvalid) as caught:
        validate_watch_list(data)
    problems = _paths(caught.value)
    assert "did you mean 'debounce_minutes'" in problems["watch[0].debounce_minute"]
    assert "same idempotency key" in problems["watch[1].template.request_id"]
    assert "remove it" in problems["watch[1].template.request_id"]
    assert "write a list" in problems["watch[2].trigger_files"]
    assert "not a glob" in problems["watch[3].trigger_files[1]"]
    assert "whole number" in problems["watch[4].template.training.batch_size"]
    assert "without refs/heads/" in problems["watch[5].branch"]
    assert "true or false" in problems["watch[5].enabled"]
    assert len(caught.value.problems) == 7
    rendered = caught.value.render()
    assert rendered.startswith("watch list rejected: 7 problems")
    assert all(path in rendered for path in problems)


def test_templates_cannot_set_what_the_entry_owns_and_are_validated_as_requests() -> None:
    data = _doc(
        _entry(
            hf_repo="not a repo",
            template={"hf_revision": "main", "hf_repo": "x/y", "preset": "v6e-999", "model": "gemma4-26b"},
        ),
        _entry(template={"preset": "v6e-64"}),
    )  # no model: the built request lacks it
    with pytest.raises(WatchListInvalid) as caught:
        validate_watch_list(data)
    problems = _paths(caught.value)
    assert "owner/name" in problems["watch[0].hf_repo"]
    assert "pinned to each release" in problems["watch[0].template.hf_revision"]
    assert "set by the watch entry" in problems["watch[0].template.hf_repo"]
    assert "unknown preset" in problems["watch[0].template.preset"]
    assert "add this field" in problems["watch[1].template.model"]


def test_document_shape_problems() -> None:
    for data, path in [
        (b"", ""),
        (b"watch: {a: 1}\n", "watch"),
        (b"entries: []\n", "watch"),
        (b"watch: [1]\nextra: 2\n", "extra"),
    ]:
        with pytest.raises(WatchListInvalid) as caught:
            validate_watch_list(data)
        assert path in {p.path for p in caught.value.problems}, data


def test_lenient_load_keeps_the_good_entries_and_reports_the_bad() -> None:
    watch = load_watch_list(
        _doc(_entry(), _entry(hf_repo="other/model", template="nope"), _entry(branch="dev"))
    )
    assert [(e.hf_repo, e.branch) for e in watch.entries] == [(REPO, "main"), (REPO, "dev")]
    [bad] = watch.rejected
    assert (bad.index, bad.hf_repo) == (1, "other/model")
    assert [p.path for p in bad.problems] == ["watch[1].template"]


def test_duplicate_entries_are_rejected() -> None:
    with pytest.raises(WatchListInvalid) as caught:
        validate_watch_list(_doc(_entry(), _entry(debounce_minutes=5)))  # same repo, branch, template
    assert "same hf_repo, branch, template and team as watch[0]" in _paths(caught.value)["watch[1]"]


def test_the_example_watch_list_is_valid() -> None:
    watch = validate_watch_list((ROOT / "examples/upstream/watch.yaml").read_bytes())
    assert {e.template["preset"] for e in watch.entries} == {"v6e-32", "v6e-64"}


def test_cli_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_bytes(_doc(_entry()))
    bad.write_bytes(_doc(_entry(template={"model": "gemma4-26b", "request_id": "x"}, color="red")))
    args = parser.parse_args(["watch-list", "validate", str(good)])
    assert args.func(args) == 0
    assert f"{REPO}@main" in capsys.readouterr().out
    args = parser.parse_args(["watch-list", "validate", str(bad)])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert "watch[0].color" in err and "watch[0].template.request_id" in err and "2 problems" in err


def test_cli_validate_checks_a_teams_entry_against_that_teams_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the deployment's RLPIPE_TEAMS in the environment, an entry's template is checked as
    intake will check its releases: vision's entry may name vision's token Secret, not speech's."""
    import json

    from tests.control.lifecycle.test_intake_teams import TEAMS

    monkeypatch.setenv("RLPIPE_TEAMS", json.dumps(TEAMS))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))

    def entry(secret: str) -> dict[str, Any]:
        template = {
            "model": "gemma4-26b",
            "hf_token_secret": {"name": secret, "key": "token"},
            "tpu": {"queue": "user-queue"},
        }
        return _entry(team="vision", template=template)

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_bytes(_doc(entry("hf-vision")))
    bad.write_bytes(_doc(entry("hf-speech")))
    args = parser.parse_args(["watch-list", "validate", str(good)])
    assert args.func(args) == 0, capsys.readouterr().err
    capsys.readouterr()
    args = parser.parse_args(["watch-list", "validate", str(bad)])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert "watch[0].template.hf_token_secret" in err and "teams.vision.read_secrets" in err


# ---- release rules (pure) -------------------------------------------------------------------------


def test_trigger_diff_compares_content_ids_of_trigger_files_only() -> None:
    old = {
        "README.md": "blob:1",
        "config.json": "blob:2",
        "model-1.safetensors": "sha256:a",
        "tokenizer.json": "sha256:t",
    }
    new = {
        "README.md": "blob:9",
        "config.json": "blob:2",
        "model-1.safetensors": "sha256:b",
        "model-2.safetensors": "sha256:c",
    }
    changes = diff(old, new, matcher(DEFAULT_TRIGGER_FILES))
    assert changes.added == ("model-2.safetensors",)
    assert changes.removed == ("tokenizer.json",)
    assert changes.modified == ("model-1.safetensors",)
    assert describe_release(changes) == "2 weight files changed, and tokenizer.json"
    readme_only = diff(old, {**old, "README.md": "blob:9"})
    assert not diff(old, {**old, "README.md": "blob:9"}, matcher(DEFAULT_TRIGGER_FILES))
    assert describe_ignored(readme_only) == "only README.md changed"


def test_missing_shards_and_release_key() -> None:
    index = {
        "weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors", "c": "model-2.safetensors"}
    }
    assert missing_shards(index, ["model-1.safetensors"]) == ["model-2.safetensors"]
    assert missing_shards(index, ["model-1.safetensors", "model-2.safetensors"]) == []
    assert missing_shards(index, ["sub/model-1.safetensors"], "sub/model.safetensors.index.json") == [
        "model-2.safetensors"
    ]
    with pytest.raises(ValueError, match="weight_map"):
        missing_shards({"metadata": {}}, [])
    assert release_key(REPO, "f" * 40, "abc") == f"hf:{REPO}@{'f' * 40}:abc"
