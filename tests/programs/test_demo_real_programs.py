"""``make demo PROGRAMS=real``: the demo's convert and export run the programs venv's programs.

The real converters take minutes, so here the programs venv (``PROGRAMS_CACHE``, as ``make
programs`` lays it out) holds a stand-in interpreter: run as ``python -m <module> <args>``, it does
in a moment what to_maxtext and to_huggingface do to the files (checking it was given what they
read), and records every call. Everything else is the demo's own path: the option, the stack's
setting, the simulator running the pod's own argv through the tier's mapping (``testbed``), the pin
step filling the snapshot from the fixture, the upload of what convert wrote, train's checkpoint
holding the loaded parameters, the real fetch and manifest steps around export. The run must
succeed, the stand-in must have been run for both converters with the mapped argv, and the demo
must say, at the start and in its summary, that they were real. Also: where real programs cannot
run, the demo refuses at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlpipe.core import export_manifest, pinning
from rlpipe.local.simulator import testbed
from tests.conftest import ROOT
from tests.harness.demos import run_demo_here
from tests.harness.patience import ceiling

STAND_IN = r'''
"""Stand-in for the programs venv's python: to_maxtext and to_huggingface on the files, in a moment."""
import json, os, shutil, sys
from pathlib import Path

assert sys.argv[1] == "-m", sys.argv
module, argv = sys.argv[2], sys.argv[3:]
with open(Path(__file__).resolve().parent.parent.parent / "ran.jsonl", "a") as ran:
    ran.write(json.dumps({"module": module, "argv": argv}) + "\n")
values = dict(a.lstrip("-").split("=", 1) for a in argv if "=" in a)
if module.endswith(".to_maxtext"):
    snapshot = Path(values["hf_model_path"])
    assert (snapshot / "model.safetensors").is_file(), f"no snapshot at {snapshot}"
    step = Path(values["base_output_directory"]) / "0"
    array = step / "items" / "params.params.decoder.decoder_norm.scale"
    array.mkdir(parents=True)
    (array / ".zarray").write_text("{}")
    (array / "0").write_bytes(b"\0" * 8)
    (step / "items" / "_METADATA").write_text("{}")
    (step / "items" / "commit_success.txt").write_text("done")
    (step / "_CHECKPOINT_METADATA").write_text("{}")
    (step / "commit_success.txt").write_text("done")
    print("INFO:absl:Conversion complete. Checkpoint saved to " + values["base_output_directory"])
elif module.endswith(".to_huggingface"):
    load = Path(values["load_parameters_path"])
    assert (load / "params.params.decoder.decoder_norm.scale" / ".zarray").is_file(), f"no checkpoint at {load}"
    source = Path(values["hf_model_path"])
    out = Path(values["base_output_directory"])
    assert out.is_dir() and not any(out.iterdir()), f"{out} is not the fresh directory the script makes"
    shutil.copy(source / "tokenizer.json", out / "tokenizer.json")
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"\0" * 64)
    print("I0102 15:04:05.123456 1 to_huggingface.py:464] saved in HuggingFace format at " + str(out))
else:
    sys.exit(f"the stand-in plays no {module}")
'''


def _programs_cache(tmp_path: Path) -> Path:
    """``$PROGRAMS_CACHE`` with a built venv whose interpreter is the stand-in."""
    cache = tmp_path / "programs"
    (cache / "venv" / "bin").mkdir(parents=True)
    python = cache / "venv" / "bin" / "python"
    python.write_text(f"#!{sys.executable}\n{STAND_IN}")
    python.chmod(0o755)
    (cache / "venv" / ".stamp").write_text("stand-in\n")
    return cache


def _calls(cache: Path) -> list[dict[str, Any]]:
    path = cache / "ran.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_the_demo_runs_convert_and_export_through_the_programs_venv_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = _programs_cache(tmp_path)
    monkeypatch.setenv("PROGRAMS_CACHE", str(cache))
    code, out = run_demo_here(capsys, programs="real", root=tmp_path / "demo")
    assert code == 0, out[-3000:]
    calls = _calls(cache)
    assert [c["module"].rsplit(".", 1)[1] for c in calls] == ["to_maxtext", "to_huggingface"], calls
    for call in calls:  # the pod's own argv, mapped as the tier maps it
        assert call["argv"][-len(testbed.TINY_MODEL_KEYS) :] == list(testbed.TINY_MODEL_KEYS)
    convert, export = (dict(a.lstrip("-").split("=", 1) for a in c["argv"] if "=" in a) for c in calls)
    assert convert["hf_model_path"].endswith(f"/{testbed.FS_DIR}{pinning.SNAPSHOT_DIR}")
    # the demo's one change: to_maxtext saves each array whole (its own option), export none
    assert convert["simulated_cpu_devices_count"] == "1" and "simulated_cpu_devices_count" not in export
    assert f"/{testbed.BUCKET_DIR}/cache/maxtext/" in convert["base_output_directory"]
    assert export["base_output_directory"].endswith(f"/{testbed.FS_DIR}{export_manifest.LOCAL_DIR}")
    assert "with the REAL MaxText converters for convert and export" in out
    assert f"programs    convert, export: REAL, run by {cache / 'venv' / 'bin' / 'python'}" in out


def test_real_programs_are_refused_before_anything_starts_where_no_python_3_12_exists(tmp_path: Path) -> None:
    """`make demo PROGRAMS=real` asks first: with no Python >= 3.12 (PROGRAMS_PYTHON names one
    that is not), it stops naming the fix, before building the programs venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPIPE_")}
    env["PROGRAMS_PYTHON"] = "/bin/false"
    done = subprocess.run(
        ["make", "--no-print-directory", "demo", "PROGRAMS=real"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=ceiling(60),
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "need Python 3.12 or 3.13" in said and "pyenv install 3.12" in said, said
    assert "venv.sh" not in done.stdout and "Traceback" not in said


def test_real_programs_are_refused_on_the_real_control_plane() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlpipe.cli.main",
            "demo",
            "--check",
            "--cluster",
            "real",
            "--programs",
            "real",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=ceiling(60),
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--cluster double" in done.stderr
