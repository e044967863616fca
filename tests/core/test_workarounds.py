"""The generated patch scripts really patch, are idempotent, and fail loudly when the target moved."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from rlpipe.core import workarounds

ADAMW_SOURCE = "def make(learning_rate):\n    return optax.adamw(learning_rate=learning_rate, b1=0.9, weight_decay=0.1)\n"
MOE_SOURCE = "def kernel(x, *, onehot_moe_permute_threshold: int = 0, other: int = 1):\n    return x\n"


def _run(entry: workarounds.Workaround, env_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(env_path)} if env_path else {}
    script = entry.shell_line()
    return subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, env=env, check=False)


def test_adafactor_swap_patches_a_file(tmp_path: Path) -> None:
    target = tmp_path / "utils_rl.py"
    target.write_text(ADAMW_SOURCE)
    entry = dataclasses.replace(workarounds.lookup("adafactor-optimizer@1"), target_file=str(target))
    first = _run(entry)
    assert first.returncode == 0, first.stderr
    assert "optax.adafactor(learning_rate=learning_rate)" in target.read_text()
    assert "adamw" not in target.read_text()
    second = _run(entry)
    assert second.returncode == 0 and "already applied" in second.stdout


def test_moe_threshold_patches_the_installed_module(tmp_path: Path) -> None:
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fused.py").write_text(MOE_SOURCE)
    entry = dataclasses.replace(workarounds.lookup("moe-permute-threshold@1"), target_module="fakepkg.fused")
    result = _run(entry, env_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "onehot_moe_permute_threshold: int = 100000," in (pkg / "fused.py").read_text()


def test_missing_target_text_fails_the_container_instead_of_training_unpatched(tmp_path: Path) -> None:
    target = tmp_path / "utils_rl.py"
    target.write_text("def make():\n    return optax.sgd(0.1)\n")
    entry = dataclasses.replace(workarounds.lookup("adafactor-optimizer@1"), target_file=str(target))
    result = _run(entry)
    assert result.returncode == 3 and "TARGET TEXT NOT FOUND" in result.stdout


@pytest.mark.parametrize("ref", sorted(workarounds.REGISTRY))
def test_registry_entries_are_versioned_and_quoted_as_one_shell_word(ref: str) -> None:
    entry = workarounds.lookup(ref)
    assert entry.ref == ref and workarounds.is_valid_ref(ref)
    # The whole Python program is a single argument to python3 -c: bash sees exactly 3 words.
    words = subprocess.run(
        [sys.executable, "-c", "import shlex,sys; print(len(shlex.split(sys.argv[1])))", entry.shell_line()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert words == "3"


def test_lookup_names_known_entries() -> None:
    with pytest.raises(KeyError, match="adafactor-optimizer@1"):
        workarounds.lookup("nope@1")
