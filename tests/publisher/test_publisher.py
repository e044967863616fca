"""The publish program: an export on (fake) GCS → one commit on a Hub (double) branch, real clients.

The program (``rlpipe.publisher.program``) runs here the way the Job runs it, ``python -c <source>``
in a subprocess (the shipped text: ``exported.py``'s in place of its import), and in-process (``main(argv)``) where a test needs to watch or break it from
inside. The Hub double (``rlpipe.local.hub_double``) answers over HTTP with the upload routes the real
``huggingface_hub`` client calls; the client uploads over LFS (Xet disabled: the double has no Xet).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlpipe.core import layout
from rlpipe.local.hub_double import HubDouble, HubFile
from rlpipe.publisher import exported as export_check
from rlpipe.publisher import program, shipped_program
from rlpipe.publisher.card import render_card
from tests.conftest import Buckets
from tests.harness import exported
from tests.harness.patience import ceiling

SOURCE = shipped_program()
TOKEN = "hf_" + "Wr1teT0kenForTheHubDoubleXyz42" + "abcd"  # looks like a real one: hf_ + 34
OTHER = "hf_" + "AnotherTokenSeenByAProxy" + "0" * 10  # any hf_ token, not only ours, is hidden
BASE_SHA = "0123456789abcdef0123456789abcdef01234567"
SHARD = 96 * 1024


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def client_env(hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What the Job's container has: the token, the Hub's address; the client over LFS."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    yield
    with hub.lock:  # knobs a failed test may have left armed
        hub.failures.clear()
        hub.limits.clear()
    hub.release_stalls()


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's retry waits (1-8 s each, utils/_http.py:556-582), recorded instead of slept."""
    import huggingface_hub.utils._http as http

    waits: list[float] = []
    monkeypatch.setattr(http.time, "sleep", waits.append)
    return waits


@dataclass
class Export:
    run_id: str
    repo: str
    files: dict[str, bytes]
    card: str
    argv: list[str]


def _export(
    buckets: Buckets, name: str, *, shards: int = 3, branch: str = "rl", private: bool = True
) -> Export:
    """An export under runs/<run>/hf/ (shards, index, config, tokenizer) with its manifest, as the
    export Job's last step leaves it (``tests.harness.exported``), and its rendered card."""
    run_id = f"{name}-{os.urandom(3).hex()}"
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    files = {n: os.urandom(SHARD + i) for i, n in enumerate(names)}
    index = {"metadata": {"total_size": sum(map(len, files.values()))}, "weight_map": {"w": names[0]}}
    files |= {
        "model.safetensors.index.json": json.dumps(index).encode(),
        "config.json": b'{"model_type": "gemma3"}',
        "tokenizer.json": b'{"version": "1.0"}' * 200,
    }
    exported.export(buckets.artifacts, run_id, files)
    bucket = buckets.client.bucket(buckets.artifacts)
    card = render_card(
        {
            "base_model": "google/gemma-3-1b-it",
            "base_sha": BASE_SHA,
            "license": "gemma",
            "preset": "gemma3-1b-v6e-8",
            "overrides": {"learning_rate": 3e-6},
            "image": "us-docker.pkg.dev/p/r/maxtext@sha256:" + "e" * 64,
            "rewards": {"pre": {"mean_reward": 0.31}, "post": {"mean_reward": 0.52}},
            "run_id": run_id,
            "request_id": f"req-{run_id}",
        }
    )
    bucket.blob(f"runs/{run_id}/publish/README.md").upload_from_string(card)
    argv = [
        *("--source", f"gs://{buckets.artifacts}/runs/{run_id}/hf/"),
        *("--manifest", f"gs://{buckets.artifacts}/runs/{run_id}/hf/{layout.EXPORT_MANIFEST}"),
        *("--card", f"gs://{buckets.artifacts}/runs/{run_id}/publish/README.md"),
        *("--repo", f"org/{run_id}", "--branch", branch, "--private", str(private).lower()),
        *("--run-id", run_id, "--request-id", f"req-{run_id}"),
    ]
    return Export(run_id, f"org/{run_id}", files, card, argv)


def _main(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = program.main([*argv, "--tmpdir", str(tmp_path / "scratch")])
    out, err = capsys.readouterr()
    return code, out + err


def _subprocess_env(hub: HubDouble, buckets: Buckets, tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_TOKEN": TOKEN,
        "HF_ENDPOINT": hub.url,
        "HF_HUB_DISABLE_XET": "1",
        "STORAGE_EMULATOR_HOST": buckets.emulator,
    }


def _api(hub: HubDouble, token: str = TOKEN) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _runs(hub: HubDouble, export: Export, branch: str = "rl") -> list[Any]:
    """The branch's commits for this run (none if the repo or branch does not exist)."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        commits = _api(hub).list_repo_commits(export.repo, revision=branch)
    except (RepositoryNotFoundError, RevisionNotFoundError):
        return []
    return [c for c in commits if f"rlpipe run {export.run_id} " in c.title]


def _last(output: str) -> str:
    return [line for line in output.splitlines() if line.startswith("rlpipe-publish: ")][-1]


def test_an_export_of_several_shards_is_one_commit_with_every_file_and_the_card(
    hub: HubDouble, buckets: Buckets, tmp_path: Path
) -> None:
    """Run as the Job runs it: ``python -c <source>``, the token only in env HF_TOKEN."""
    export = _export(buckets, "several")
    argv = [*export.argv, "--tmpdir", str(tmp_path / "scratch")]
    env = _subprocess_env(hub, buckets, tmp_path)
    hub.fail(f"/lfs-storage/{export.repo}/", 500)  # one retried PUT: the client logs its signed URL
    done = subprocess.run(
        [sys.executable, "-c", SOURCE, *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _last(done.stdout).startswith("rlpipe-publish: done published: commit ")
    assert TOKEN not in done.stdout + done.stderr and TOKEN not in argv
    assert "X-Amz-Signature=[redacted]" in done.stderr and not re.search("Signature=[0-9a-f]", done.stderr)

    runs = _runs(hub, export)
    assert len(runs) == 1 and runs[0].title == f"rlpipe run {export.run_id} (request req-{export.run_id})"
    assert runs[0].commit_id == _api(hub).model_info(export.repo, revision="rl").sha  # the branch head
    tree = {f.path: f.size for f in _api(hub).list_repo_tree(export.repo, revision="rl", recursive=True)}
    expected = {p: len(d) for p, d in export.files.items()} | {"README.md": len(export.card.encode())}
    assert {p: tree.get(p) for p in expected} == expected
    info = _api(hub).model_info(export.repo, revision="rl", files_metadata=True)
    assert info.private is True
    assert {s.rfilename for s in info.siblings or []} >= set(expected)
    for path, data in export.files.items():
        assert hub.file_bytes(export.repo, path, "rl") == data, path
    shard = next(p for p in export.files if p.endswith(".safetensors"))
    lfs = _api(hub).get_paths_info(export.repo, [shard, "config.json"], revision="rl")
    assert lfs[0].lfs is not None and lfs[0].lfs.size == len(export.files[shard]) and lfs[1].lfs is None

    readme = Path(
        _api(hub).hf_hub_download(export.repo, "README.md", revision="rl", cache_dir=tmp_path / "c")
    )
    card = readme.read_text()
    assert card == export.card and BASE_SHA in card and TOKEN not in card
    assert card.startswith("---\nbase_model: google/gemma-3-1b-it\n") and "- rlpipe" in card
    uploaded = [line for line in done.stdout.splitlines() if line.startswith("rlpipe-publish: uploaded ")]
    assert len(uploaded) == len(expected)
    total = sum(expected.values())
    assert uploaded[-1].endswith(f" {total}/{total} bytes")


def test_a_second_run_finds_its_commit_verifies_it_and_pushes_nothing(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, "twice")
    assert _main(export.argv, tmp_path, capsys)[0] == 0
    writes = len([p for p in hub.paths() if "/commit/" in p or "/preupload/" in p or "lfs" in p])

    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 0 and _last(output).startswith("rlpipe-publish: done already-published: run ")
    assert len(_runs(hub, export)) == 1
    assert len([p for p in hub.paths() if "/commit/" in p or "/preupload/" in p or "lfs" in p]) == writes


def test_a_crash_mid_upload_then_a_rerun_is_still_one_commit(
    hub: HubDouble,
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_sleep: list[float],
) -> None:
    """The 2nd LFS PUT fails through all the client's retries (a 500 each time): exit 75, no commit.
    The rerun re-sends only what the Hub's storage does not hold."""
    export = _export(buckets, "crash")
    hub.fail("/lfs-storage/", 500, after=1, times=6)
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 75 and _last(output).startswith("rlpipe-publish: failed transient: HTTP 500")
    assert len(no_sleep) == 5  # the client's own retries, before it gave up
    assert not _runs(hub, export)

    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 0, output
    assert len(_runs(hub, export)) == 1
    puts = [p.rsplit("/", 1)[-1] for p in hub.paths(f"/lfs-storage/{export.repo}/")]
    assert len(set(puts)) == 3 and puts.count(puts[0]) == 1  # shard 1 went up once, over two runs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_job_stopped_mid_upload_then_rerun_is_still_one_commit(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str], stop: int
) -> None:
    """Stopped while the 2nd shard is on its way (the double holds that PUT), like a preempted pod:
    SIGKILL leaves no last line; SIGTERM (what Kubernetes sends first) ends in a transient one."""
    import hashlib

    export = _export(buckets, "stopped")
    second = sorted(p for p in export.files if p.endswith(".safetensors"))[1]
    held = f"/lfs-storage/{export.repo}/{hashlib.sha256(export.files[second]).hexdigest()}"
    hub.stall(held)
    argv = [*export.argv, "--tmpdir", str(tmp_path / "scratch")]
    child = subprocess.Popen(
        [sys.executable, "-c", SOURCE, *argv],
        env=_subprocess_env(hub, buckets, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + ceiling(60)
        while not hub.paths(held) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.paths(held), "the 2nd shard's upload never started"
    finally:
        child.send_signal(stop)
        output, _ = child.communicate(timeout=ceiling(30))
        hub.release_stalls()
    if stop == signal.SIGTERM:
        assert child.returncode == 75, output
        assert _last(output).startswith("rlpipe-publish: failed transient: stopped by signal 15")
    else:
        assert child.returncode == -signal.SIGKILL
    assert not _runs(hub, export)

    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 0, output
    assert len(_runs(hub, export)) == 1


@pytest.mark.parametrize("existing", [True, False], ids=["existing-repo", "new-repo"])
def test_a_token_without_write_access_is_permanent(
    hub: HubDouble,
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    existing: bool,
) -> None:
    export = _export(buckets, "readonly")
    if existing:
        _api(hub).create_repo(export.repo, exist_ok=True)
    reader = "hf_" + "ReadOnlyTokenForTheHubDouble" + os.urandom(4).hex()
    hub.read_only_token(reader)
    monkeypatch.setenv("HF_TOKEN", reader)
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2 and _last(output).startswith("rlpipe-publish: failed permanent: HTTP 403")
    assert reader not in output


def test_a_revoked_token_is_permanent_and_a_missing_one_too(
    hub: HubDouble,
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    export = _export(buckets, "revoked")
    revoked = "hf_" + "RevokedTokenForTheHubDouble0" + os.urandom(4).hex()
    hub.revoke(revoked)
    monkeypatch.setenv("HF_TOKEN", revoked)
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2 and _last(output).startswith("rlpipe-publish: failed permanent: HTTP 401")
    assert revoked not in output
    monkeypatch.delenv("HF_TOKEN")
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2 and "HF_TOKEN is not set" in _last(output)


@pytest.mark.parametrize(
    ("arm", "expected"),
    [
        (lambda hub, repo: hub.rate_limit(6, path_prefix=f"/api/models/{repo}/"), "HTTP 429"),
        (lambda hub, repo: hub.fail(f"/api/models/{repo}/", 503, times=6), "HTTP 503"),
        (lambda hub, repo: hub.fail(f"/api/models/{repo}/preupload/", 500, times=6), "HTTP 500"),
    ],
    ids=["429", "503-first-call", "500-preupload"],
)
def test_rate_limits_and_server_errors_are_transient(
    hub: HubDouble,
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_sleep: list[float],
    arm: Any,
    expected: str,
) -> None:
    export = _export(buckets, "transient")
    arm(hub, export.repo)
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 75 and _last(output).startswith(f"rlpipe-publish: failed transient: {expected}")
    assert len(no_sleep) == 5  # the client retried before giving up
    assert not _runs(hub, export)


def test_an_unreachable_hub_is_transient(
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_sleep: list[float],
) -> None:
    from rlpipe.local.ports import free_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    code, output = _main(_export(buckets, "offline").argv, tmp_path, capsys)
    assert code == 75 and _last(output).startswith("rlpipe-publish: failed transient: network: ")


def test_the_token_is_redacted_from_every_line_even_when_an_error_carries_it(
    hub: HubDouble,
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A proxy that echoes headers into its error, and a token pasted into argv by mistake."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import httpx

    def leaky(*args: Any, **kwargs: Any) -> Any:
        answer = httpx.Response(403, request=httpx.Request("GET", f"{hub.url}/api/models/x/y/commits/rl"))
        raise HfHubHTTPError(f"403 (Authorization: Bearer {TOKEN}; proxy token {OTHER})", response=answer)

    export = _export(buckets, "leak")
    monkeypatch.setattr(HfApi, "list_repo_commits", leaky)
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2 and "Bearer [redacted]; proxy token hf_[redacted]" in output
    assert TOKEN not in output and OTHER not in output

    code, output = _main([*export.argv, "--token", TOKEN], tmp_path, capsys)
    assert code == 2 and "bad arguments" in _last(output) and TOKEN not in output


def test_the_program_imports_only_the_standard_library_the_hub_client_and_gcs() -> None:
    allowed = {"huggingface_hub", "google.cloud.storage"}
    imported: set[str] = set()
    for node in ast.walk(ast.parse(SOURCE)):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module)
    outside = {
        m
        for m in imported
        if m.split(".")[0] not in sys.stdlib_module_names
        and m != "__future__"
        and not any(m == a or m.startswith(a + ".") for a in allowed)
    }
    assert not outside, outside
    assert SOURCE.startswith("# rlpipe-publisher")  # how the manifest recognises the program


def test_at_most_one_shard_is_on_local_disk_at_any_time(
    hub: HubDouble,
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each pre-upload call sees what is on disk: one file (the one being sent), never two."""
    from huggingface_hub import HfApi

    seen: list[tuple[int, int]] = []
    scratch = tmp_path / "scratch"
    real = HfApi.preupload_lfs_files

    def watched(self: Any, *args: Any, **kwargs: Any) -> Any:
        files = [p for p in scratch.rglob("*") if p.is_file()]
        seen.append((len(files), sum(p.stat().st_size for p in files)))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(HfApi, "preupload_lfs_files", watched)
    export = _export(buckets, "disk", shards=4)
    assert _main(export.argv, tmp_path, capsys)[0] == 0
    # One call per file, then create_commit's own (hf_api.py:5196-5205), with the scratch empty.
    assert len(seen) == len(export.files) + 1 and seen[-1] == (0, 0)
    assert max(n for n, _ in seen) == 1 and max(b for _, b in seen) == max(map(len, export.files.values()))
    assert not [p for p in scratch.rglob("*") if p.is_file()]  # nothing left behind

    seen.clear()
    grouped = _export(buckets, "grouped", shards=4)
    budget = 2 * SHARD + 10
    assert _main([*grouped.argv, "--max-shard-bytes-in-flight", str(budget)], tmp_path, capsys)[0] == 0
    assert max(n for n, _ in seen) >= 2 and max(b for _, b in seen) <= budget  # groups, within budget


def test_a_shard_over_the_in_flight_budget_fails_before_any_upload(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, "budget")
    before = len(hub.paths())
    code, output = _main([*export.argv, "--max-shard-bytes-in-flight", str(SHARD)], tmp_path, capsys)
    assert code == 2 and "over --max-shard-bytes-in-flight" in _last(output)
    assert not [p for p in hub.paths()[before:] if "/preupload/" in p or p.startswith("/api/repos")]


def test_another_runs_commit_whose_id_starts_alike_is_not_this_run(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, "prefix", branch="main")
    _api(hub).create_repo(export.repo, exist_ok=True)
    hub.push(
        export.repo,
        {"notes.txt": HubFile.of("notes.txt", "x")},
        message=f"rlpipe run {export.run_id}0 (request q)",
    )
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 0 and "done published" in _last(output)
    assert len(_runs(hub, export, "main")) == 1


def test_the_card_is_rendered_with_the_hub_metadata_and_the_pinned_sha() -> None:
    from huggingface_hub import ModelCard

    facts = {
        "base_model": "meta-llama/Llama-3.1-8B-Instruct",
        "base_sha": BASE_SHA,
        "license": "other",
        "license_name": "llama3.1",
        "license_link": "https://llama.meta.com/llama3_1/license/",
        "preset": "llama3.1-8b-v6e-32",
        "overrides": {"num_generations": 8, "beta": 0.04},
        "image": "img@sha256:" + "f" * 64,
        "rewards": {"pre": {"accuracy": 0.5, "mean_reward": 0.1}, "post": {"accuracy": 0.75}},
        "run_id": "run-1",
        "request_id": "req-1",
    }
    text = render_card(facts)
    data = ModelCard(text).data.to_dict()
    assert data["base_model"] == facts["base_model"] and data["license"] == "other"
    assert data["license_name"] == "llama3.1" and {"rlpipe", "grpo", "maxtext"} <= set(data["tags"])
    assert (
        BASE_SHA in text
        and "| Accuracy | 0.5% | 0.75% | +0.25 pp |" in text
        and "| Mean reward | 0.1 | — | — |" in text
    )
    assert "`beta` | `0.04`" in text and "rlpipe run run-1" in text
    with pytest.raises(ValueError, match="base_sha"):
        render_card({**facts, "base_sha": "main"})
    with pytest.raises(ValueError, match="license"):
        render_card({**facts, "license": ""})


def test_the_hub_double_refuses_what_the_hub_refuses(hub: HubDouble, tmp_path: Path) -> None:
    """Private repos hide from anonymous callers; a stale parent commit is 412 (huggingface_hub
    tests/test_hf_api.py, test_create_commit_conflict); a bad card header is 400 from validate-yaml;
    uploads need a token; the double says it has no Xet."""
    from huggingface_hub import CommitOperationAdd, HfApi, errors

    api = _api(hub)
    repo = f"org/refusals-{os.urandom(3).hex()}"
    api.create_repo(repo, private=True)
    with pytest.raises(errors.RepositoryNotFoundError) as anonymous:
        HfApi(endpoint=hub.url, token=False).model_info(repo)
    assert anonymous.value.response.status_code == 401
    head = api.model_info(repo).sha
    assert api.list_repo_files(repo) == [".gitattributes"]  # a new repo's initial commit
    api.create_commit(repo, [CommitOperationAdd("a.txt", b"a")], commit_message="first", parent_commit=head)
    with pytest.raises(errors.HfHubHTTPError, match="A commit has happened since") as stale:
        api.create_commit(
            repo, [CommitOperationAdd("b.txt", b"b")], commit_message="late", parent_commit=head
        )
    assert stale.value.response.status_code == 412
    with pytest.raises(ValueError, match=r"Invalid metadata in README\.md"):
        api.create_commit(
            repo, [CommitOperationAdd("README.md", b"---\n[unclosed\n---\n")], commit_message="x"
        )
    with pytest.raises(errors.HfHubHTTPError) as anonymous_write:
        HfApi(endpoint=hub.url, token=False).create_branch(repo, branch="x")
    assert anonymous_write.value.response.status_code == 401

    from huggingface_hub import get_session

    xet = get_session().get(
        f"{hub.url}/api/models/{repo}/xet-write-token/main", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert xet.status_code == 501 and "HF_HUB_DISABLE_XET" in xet.headers["X-Error-Message"]


def test_the_cards_license_comes_from_the_base_card_pinned_with_the_weights(buckets: Buckets) -> None:
    """The license travels with the weights it came with: it is read from the card convert pinned
    beside them. (Its pipeline_tag is read on the Hub at the pinned sha: tests/publisher/test_model_card.py.)"""
    from rlpipe.control.lifecycle import publishing
    from rlpipe.core import layout
    from rlpipe.core.manifests import RenderContext, converted_dir
    from rlpipe.core.request import validate_request
    from tests.conftest import minimal_request

    req = validate_request(minimal_request())
    ctx = RenderContext(run_id="rtag00000001", bucket=buckets.artifacts, hf_revision=BASE_SHA)
    store = buckets.store("artifacts")
    name = layout.pinned_source_dir(converted_dir(req, ctx)) + publishing.CARD_FILE
    store.put(name, b"---\nlicense: gemma\npipeline_tag: image-text-to-text\n---\n# base\n")
    assert publishing.base_license(store, req, ctx) == {"license": "gemma"}
    store.put(name, b"---\npipeline_tag: text-generation\n---\n# no license\n")
    facts = publishing.base_license(store, req, ctx)
    assert facts["license"] == "other" and "names no license" in facts["license_name"]


# ---- exactly what export wrote ------------------------------------------------------------------


def _pushed_nothing(hub: HubDouble, export: Export, before: int) -> bool:
    """No LFS byte, pre-upload or commit reached the Hub since ``before`` (its request count)."""
    return not [
        p for p in hub.paths()[before:] if "/preupload/" in p or "/commit/" in p or "lfs" in p
    ] and not _runs(hub, export)


def test_an_object_the_export_did_not_write_fails_publish_naming_it_and_nothing_is_pushed(
    hub: HubDouble, buckets: Buckets, tmp_path: Path
) -> None:
    """Something else wrote under runs/<id>/hf/ (a MaxText override pointing a write key at the
    export's prefix, say): run as the Job runs it, publish pushes nothing and names the object."""
    export = _export(buckets, "planted")
    planted = f"runs/{export.run_id}/hf/extra/evil.py"
    buckets.client.bucket(buckets.artifacts).blob(planted).upload_from_string(b"print('pwned')")
    before = len(hub.paths())
    done = run_as_the_job(hub, buckets, tmp_path, export)
    assert done.returncode == 2, done.stdout + done.stderr
    last = _last(done.stdout)
    assert last.startswith("rlpipe-publish: failed permanent: 1 object(s) under ")
    assert f"gs://{buckets.artifacts}/{planted}" in last and "not in the export manifest" in last
    assert _pushed_nothing(hub, export, before)


def test_a_file_whose_bytes_changed_after_export_fails_its_hash_check(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same name, same size, other bytes: only the sha256 tells. Nothing is committed."""
    export = _export(buckets, "changed")
    shard = sorted(p for p in export.files if p.endswith(".safetensors"))[1]
    other = os.urandom(len(export.files[shard]))
    buckets.client.bucket(buckets.artifacts).blob(f"runs/{export.run_id}/hf/{shard}").upload_from_string(
        other
    )
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2, output
    expected = hashlib.sha256(export.files[shard]).hexdigest()
    assert _last(output) == (
        f"rlpipe-publish: failed permanent: {shard} has sha256 {hashlib.sha256(other).hexdigest()}, "
        f"export wrote {expected}: it changed after export; nothing was committed. Export again"
    )
    assert not _runs(hub, export)


@pytest.mark.parametrize("how", ["gone", "resized"])
def test_a_listed_file_that_is_gone_or_resized_fails_publish_naming_it(
    how: str, hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, how)
    blob = buckets.client.bucket(buckets.artifacts).blob(f"runs/{export.run_id}/hf/config.json")
    if how == "gone":
        blob.delete()
    else:
        blob.upload_from_string(b"{}")
    before = len(hub.paths())
    code, output = _main(export.argv, tmp_path, capsys)
    said = "config.json is gone" if how == "gone" else "config.json is 2 bytes, export wrote 24"
    assert code == 2 and said in _last(output) and "is not what export wrote" in _last(output)
    assert _pushed_nothing(hub, export, before)


@pytest.mark.parametrize(
    "manifest",
    [
        None,
        b"not json",
        b'{"files": []}',
        b'{"files": [{"path": "../other/hf/config.json", "size": 24, "sha256": "' + b"ab" * 32 + b'"}]}',
        b'{"files": [{"path": "config.json", "size": "24", "sha256": "' + b"ab" * 32 + b'"}]}',
        b'{"files": [{"path": "config json", "size": 24, "sha256": "' + b"ab" * 32 + b'"}]}',
    ],
    ids=["missing", "not-json", "empty", "outside", "size-text", "not-allowed-name"],
)
def test_without_a_manifest_export_wrote_nothing_is_published(
    manifest: bytes | None,
    hub: HubDouble,
    buckets: Buckets,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    export = _export(buckets, "manifest")
    blob = buckets.client.bucket(buckets.artifacts).blob(f"runs/{export.run_id}/hf/{layout.EXPORT_MANIFEST}")
    if manifest is None:
        blob.delete()
    else:
        blob.upload_from_string(manifest)
    before = len(hub.paths())
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2, output
    assert ("no export manifest at" if manifest is None else "is not one export writes") in _last(output)
    assert _pushed_nothing(hub, export, before)


def test_a_rerun_whose_export_was_rewritten_since_its_commit_is_not_taken_as_published(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The commit that names the run holds other LFS bytes than the manifest lists now (same sizes):
    the Hub names an LFS file by its sha256, so the rerun says so instead of 'already published'."""
    export = _export(buckets, "rewritten")
    assert _main(export.argv, tmp_path, capsys)[0] == 0
    files = {p: os.urandom(len(d)) if p.endswith(".safetensors") else d for p, d in export.files.items()}
    exported.export(buckets.artifacts, export.run_id, files)
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 1 and _last(output).startswith("rlpipe-publish: failed error: verification failed at ")
    assert "has sha256" in _last(output) and "export wrote" in _last(output)
    assert len(_runs(hub, export)) == 1


def test_the_names_a_manifest_may_list_are_the_layouts() -> None:
    """The program imports no rlpipe module, so it spells the allowlist itself: the same one."""
    assert export_check.EXPORTED_PATH.pattern == layout.EXPORTED_PATH_PATTERN
    rest = ["--repo", "o/n", "--run-id", "r", "--request-id", "q"]
    assert program.parse_args(
        ["--source", "gs://b/runs/r/hf/", "--manifest", "gs://b/runs/r/hf/x.json", *rest]
    )
    with pytest.raises(program.Failure, match="is not under --source"):
        program.parse_args(
            ["--source", "gs://b/runs/r/hf/", "--manifest", "gs://b/runs/other/hf/x.json", *rest]
        )


def run_as_the_job(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, export: Export, *extra: str
) -> subprocess.CompletedProcess[str]:
    """The publish program as the Job runs it: the shipped ``python -c`` text, ``export``'s
    arguments and ``extra``, with a scratch directory of the test's."""
    return subprocess.run(
        [sys.executable, "-c", SOURCE, *export.argv, *extra, "--tmpdir", str(tmp_path / "scratch")],
        env=_subprocess_env(hub, buckets, tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
