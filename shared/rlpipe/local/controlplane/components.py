"""Where the real components' binaries are, which versions they are, and why one may be missing.

``components/build.sh`` (``make components``) builds them from their Go modules into a git-ignored
cache; ``components/versions.env`` is the one place their versions are named.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
COMPONENTS = ROOT / "components"
VERSIONS_FILE = COMPONENTS / "versions.env"
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "jobset",
    "kueue",
)
BUILD_HINT = "run `make components` (needs Go and the Go module proxy; about 16 minutes cold)"


def bin_dir() -> Path:
    return Path(os.environ.get("COMPONENTS_BIN") or ROOT / ".cache" / "components" / "bin")


@cache
def versions() -> dict[str, str]:
    out = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def missing_reason(names: tuple[str, ...] = BINARIES) -> str | None:
    """Why the real control plane cannot start here, or None when it can."""
    absent = [n for n in names if not (bin_dir() / n).is_file()]
    if not absent:
        return None
    go = "" if shutil.which("go") else " (and Go is not installed)"
    return f"{', '.join(absent)} not built in {bin_dir()}{go}: {BUILD_HINT}"


def binary(name: str) -> Path:
    path = bin_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {BUILD_HINT}")
    return path


@cache
def module_dir(module: str, version: str) -> Path:
    """The module's source in Go's module cache (its CRDs and webhook manifests live there)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=COMPONENTS / "jobset",
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
    )
    return Path(json.loads(out.stdout)["Dir"])
