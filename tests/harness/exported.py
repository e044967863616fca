"""An export as the export Job leaves it in the bucket, made by the Job's own last step.

The step (``core/export_manifest.py``) runs here exactly as the export script ships it: its
``python3 -c`` program, read from the script line with ``shlex``, in a subprocess whose storage
client reaches fake-gcs-server (``STORAGE_EMULATOR_HOST``, set by the ``buckets`` fixture). So a
test's export has the manifest the real step writes, not one a test spelled itself.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from rlpipe.core import export_manifest, layout


def step_source() -> str:
    """The step's program text, as bash hands it to ``python3 -c``."""
    words = shlex.split(export_manifest.manifest_line())
    assert words[:3] == ["exec", "python3", "-c"] and len(words) == 4, words[:3]
    return words[3]


def run_step(bucket: str, run_id: str, local: Path) -> subprocess.CompletedProcess[str]:
    """The step over ``local`` (the program's directory), for run ``run_id`` in ``bucket``."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RLPIPE_", "HF_"))},
        "GOOGLE_CLOUD_PROJECT": "rlpipe-test",
        **{e["name"]: e["value"] for e in export_manifest.env(layout.RunLayout(bucket, run_id))},
        export_manifest.ENV_DIR: str(local),
    }
    assert env.get("STORAGE_EMULATOR_HOST"), "the step would write to real GCS"
    # No timeout of its own: waiting with one polls with time.sleep, which some tests count
    # (tests/publisher/test_publisher.py's no_sleep); the suite's per-test timeout bounds it instead.
    return subprocess.run([sys.executable, "-c", step_source()], env=env, capture_output=True, text=True)


def export(bucket: str, run_id: str, files: Mapping[str, bytes]) -> None:
    """``files`` written as to_huggingface writes them, then uploaded by the step with the manifest."""
    with tempfile.TemporaryDirectory(prefix="rlpipe-export-") as tmp:
        local = Path(tmp, "hf-export")
        for name, data in files.items():
            (local / name).parent.mkdir(parents=True, exist_ok=True)
            (local / name).write_bytes(data)
        done = run_step(bucket, run_id, local)
    assert done.returncode == 0, done.stdout + done.stderr
