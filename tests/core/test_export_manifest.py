"""The export Job's script, run by a real bash, and its last step run for real against fake-gcs.

A stand-in ``python3`` on PATH plays to_huggingface (``-m``: it writes what FAKE_MODE says into
the directory the script made) and the fetch step (``-c``: nothing to do); the manifest step's
``python3 -c`` program is executed by this test's Python, unchanged, so the objects and the
manifest in the bucket are the ones the step writes on a cluster. What must hold: exactly the files
the program wrote are uploaded and listed, with their sizes and sha256, the manifest last; a
failed or stopped program, a directory that was there before, a link, or nothing written, uploads
nothing; and the export done rule reads the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlpipe.control.lifecycle import stored_outputs
from rlpipe.core import commands, export_manifest, layout
from tests.conftest import Buckets
from tests.harness import exported
from tests.harness.patience import ceiling

RUN = "rexport00001"

FAKE_PYTHON = r"""#!/bin/bash
# Stand-in for the container's python3. -c: the manifest step runs for real, any other step
# (the fetch of the pinned files) has nothing to do. -m: to_huggingface, as FAKE_MODE says.
if [ "$1" = "-c" ]; then
  case "$2" in
    *rlpipe-manifest:*) exec "$REAL_PYTHON" -c "$2" ;;
    *) exit 0 ;;
  esac
fi
echo "$*" > "$FAKE_DIR/program-args"
d="$RLPIPE_EXPORT_DIR"
case "$FAKE_MODE" in
  write)
    printf '{"model_type": "gemma4"}' > "$d/config.json"
    printf '{"version": "1.0"}' > "$d/tokenizer.json"
    head -c 3001 /dev/urandom > "$d/model-00001-of-00002.safetensors"
    head -c 2002 /dev/urandom > "$d/model-00002-of-00002.safetensors"
    printf '%s' "$FAKE_INDEX" > "$d/model.safetensors.index.json" ;;
  write-then-fail) printf '{}' > "$d/config.json"; exit 1 ;;
  link) printf '{}' > "$d/config.json"; ln -s "$FAKE_DIR/secret" "$d/tokenizer.json" ;;
  odd-name) printf '{}' > "$d/config.json"; printf '{}' > "$d/chat template.jinja" ;;
  own-manifest) printf '{}' > "$d/config.json"; printf '{"files": []}' > "$d/rlpipe-export.json" ;;
  nothing) ;;
  serve) trap 'exit 143' TERM; printf '{}' > "$d/config.json"; echo up > "$FAKE_DIR/up"
         while true; do sleep 0.05; done ;;
  serve-then-exit-0) trap 'exit 0' TERM; printf '{}' > "$d/config.json"; echo up > "$FAKE_DIR/up"
         while true; do sleep 0.05; done ;;
esac
"""
INDEX = {
    "metadata": {"total_size": 5003},
    "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
}


def _script_env(buckets: Buckets, tmp_path: Path, mode: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (tmp_path / "scratch").mkdir(exist_ok=True)
    (tmp_path / "secret").write_text("a service account key")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RLPIPE_", "HF_"))},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "REAL_PYTHON": sys.executable,
        "FAKE_MODE": mode,
        "FAKE_DIR": str(tmp_path),
        "FAKE_INDEX": json.dumps(INDEX),
        "GOOGLE_CLOUD_PROJECT": "rlpipe-test",
        "TMPDIR": str(tmp_path / "scratch" / "tmp"),
        **{e["name"]: e["value"] for e in export_manifest.env(layout.RunLayout(buckets.artifacts, RUN))},
        export_manifest.ENV_DIR: str(tmp_path / "scratch" / "hf-export"),
    }


def _start(buckets: Buckets, tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    """The export script exactly as the Job renders it, with to_huggingface's arguments after it."""
    return subprocess.Popen(
        [
            "/bin/bash",
            "-c",
            commands.export_script(gated=False),
            commands.SCRIPT_NAME,
            "model_name=m",
            "x=a b",
        ],
        env=_script_env(buckets, tmp_path, mode),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _run(buckets: Buckets, tmp_path: Path, mode: str) -> tuple[int, str]:
    child = _start(buckets, tmp_path, mode)
    out, _ = child.communicate(timeout=ceiling(120))
    return child.returncode, out


def _objects(buckets: Buckets) -> dict[str, Any]:
    run = layout.RunLayout(buckets.artifacts, RUN)
    return {b.name: b for b in buckets.client.list_blobs(buckets.artifacts, prefix=run.hf_dir)}


def _manifest(buckets: Buckets) -> dict[str, Any]:
    run = layout.RunLayout(buckets.artifacts, RUN)
    data = buckets.client.bucket(buckets.artifacts).blob(run.export_manifest).download_as_bytes()
    return dict(json.loads(data))


def test_exactly_the_files_the_program_wrote_are_uploaded_and_listed_with_the_manifest_last(
    buckets: Buckets, tmp_path: Path
) -> None:
    """Something else wrote under the export's prefix before export ran (a training override
    pointing a write key there, say): uploaded beside the export, it is in no manifest."""
    run = layout.RunLayout(buckets.artifacts, RUN)
    bucket = buckets.client.bucket(buckets.artifacts)
    bucket.blob(run.hf_dir + "planted.py").upload_from_string(b"import os; os.system('curl ...')")

    code, out = _run(buckets, tmp_path, "write")
    assert code == 0, out
    assert (
        tmp_path / "program-args"
    ).read_text().strip() == "-m maxtext.checkpoint_conversion.to_huggingface model_name=m x=a b"

    local = tmp_path / "scratch" / "hf-export"
    wrote = {p.name: p.read_bytes() for p in local.iterdir()}
    assert len(wrote) == 5
    listed = {f["path"]: (f["size"], f["sha256"]) for f in _manifest(buckets)["files"]}
    assert listed == {name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in wrote.items()}
    objects = _objects(buckets)
    assert set(objects) == {run.hf_dir + n for n in wrote} | {run.export_manifest, run.hf_dir + "planted.py"}
    for name, data in wrote.items():
        assert bucket.blob(run.hf_dir + name).download_as_bytes() == data
    uploaded = [objects[run.hf_dir + n].generation for n in wrote]
    assert objects[run.export_manifest].generation > max(uploaded), "the manifest is written last"
    assert "rlpipe-manifest: 5 files (" in out and f"{run.uri(run.export_manifest)} written last" in out

    done = stored_outputs.export_completeness(buckets.store("artifacts"), RUN)
    assert done.complete, done.reason


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("write-then-fail", ""),
        ("nothing", "the program wrote no file under"),
        ("link", "tokenizer.json under"),
        ("odd-name", "'chat template.jinja' under"),
        ("own-manifest", "'rlpipe-export.json' under"),
    ],
    ids=["failed", "wrote-nothing", "a-link", "a-name-no-export-has", "the-manifests-name"],
)
def test_nothing_is_uploaded_unless_the_program_succeeded_with_regular_files(
    mode: str, said: str, buckets: Buckets, tmp_path: Path
) -> None:
    code, out = _run(buckets, tmp_path, mode)
    assert code == 1, out
    assert said in out
    assert _objects(buckets) == {}
    assert not stored_outputs.export_completeness(buckets.store("artifacts"), RUN).complete


def test_a_directory_that_is_there_before_the_program_stops_the_script(
    buckets: Buckets, tmp_path: Path
) -> None:
    """Only a directory the script just made holds nothing but the program's files."""
    stale = tmp_path / "scratch" / "hf-export"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    code, out = _run(buckets, tmp_path, "write")
    assert code != 0 and "File exists" in out
    assert not (tmp_path / "program-args").exists(), "the program never ran"
    assert _objects(buckets) == {}


@pytest.mark.parametrize("mode", ["serve", "serve-then-exit-0"], ids=["program-exits-143", "program-exits-0"])
def test_a_stop_while_the_program_runs_reaches_it_and_uploads_nothing(
    mode: str, buckets: Buckets, tmp_path: Path
) -> None:
    """The program is the script's child now: SIGTERM (the pod stopped) is passed on at once, and
    even a program that then exits 0 has its output left unpublished: the script ends 143."""
    child = _start(buckets, tmp_path, mode)
    deadline = time.monotonic() + ceiling(30)
    while not (tmp_path / "up").exists():
        assert time.monotonic() < deadline and child.poll() is None, "the program did not start"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGTERM)
    out, _ = child.communicate(timeout=ceiling(30))
    assert child.returncode == 143, out
    assert _objects(buckets) == {}


def test_the_done_rule_wants_every_listed_file_at_its_size(buckets: Buckets) -> None:
    files = {
        "config.json": b'{"model_type": "gemma4"}',
        "model-00001-of-00002.safetensors": os.urandom(4000),
        "model-00002-of-00002.safetensors": os.urandom(4000),
        layout.HF_INDEX: json.dumps(INDEX).encode(),
    }
    exported.export(buckets.artifacts, RUN, files)
    store = buckets.store("artifacts")
    run = layout.RunLayout(buckets.artifacts, RUN)
    assert stored_outputs.export_completeness(store, RUN).complete

    store.put(run.hf_dir + "model-00002-of-00002.safetensors", os.urandom(3999))
    resized = stored_outputs.export_completeness(store, RUN)
    assert not resized.complete and resized.missing == (run.hf_dir + "model-00002-of-00002.safetensors",)
    store.delete(run.hf_dir + "model-00002-of-00002.safetensors")
    assert not stored_outputs.export_completeness(store, RUN).complete
