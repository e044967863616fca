"""How every part of the tier runs something in the programs venv: a MaxText program or a driver.

A program runs as its container runs it (``python -m <module> <args>``), its output kept as lines;
a driver (``programs/drivers/``) reads a JSON job on stdin and answers JSON on stdout. Both get
the same environment: nothing fetched from the Hub, scratch space under the run's work folder.
Also here: putting a stage's inputs where its localized argv points, and listing what a program
left. Every part's key covers this file (``programs.parts``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpipe.local.hub_double.parquet import parquet_bytes
from rlpipe.local.simulator import testbed

ROOT = Path(__file__).resolve().parent.parent
DRIVERS = Path(__file__).resolve().parent / "drivers"
PROGRAM_TIMEOUT = 3 * 3600  # a hang guard only: the converters take minutes on two loaded cores
LOG_LINES = 4000  # a program's whole log, but for progress bars (the converters print a few hundred)


class TierError(RuntimeError):
    """The tier could not run (as opposed to a program that refused or failed: a result)."""


@dataclass(frozen=True)
class Run:
    """One part's run: where it works (deleted after), what it keeps beside its result, the
    programs' interpreter, and where the parts it reads kept theirs."""

    work: Path
    keep: Path
    python: Path
    kept_by: Callable[[str], Path]


def resolve(value: Any, work: Path) -> Any:
    """A job with the run's folder in place of ``testbed.WORK``."""
    if isinstance(value, str):
        return testbed.resolve(value, str(work))
    if isinstance(value, list):
        return [resolve(v, work) for v in value]
    if isinstance(value, dict):
        return {testbed.resolve(k, str(work)): resolve(v, work) for k, v in value.items()}
    return value


def program_env(work: Path) -> dict[str, str]:
    """The environment a program runs in (``testbed.program_env``), its temporary folder made."""
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    return testbed.program_env(str(work), os.environ)


def stage(
    folders: dict[str, list[str]], files: dict[str, str] | None = None, tables: dict[str, Any] | None = None
) -> None:
    """Put what each stage's script would have put at the paths its argv names: ``folders`` maps a
    folder to the repository files copied into it, ``files`` a path to the one repository file
    copied there, ``tables`` a parquet pattern to the rows written where it points."""
    for dest, sources in folders.items():
        Path(dest).mkdir(parents=True, exist_ok=True)
        for source in sources:
            shutil.copy2(ROOT / source, Path(dest) / Path(source).name)
    for dest, source in (files or {}).items():
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / source, dest)
    for pattern, table in (tables or {}).items():
        folder = Path(pattern.rpartition("/")[0])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{0:05d}.parquet").write_bytes(parquet_bytes(table))  # layout.data_file's name


def listing(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (object names, as a bucket listing shows them) and its size."""
    if not folder.exists():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()
    }


def log_lines(log: Path, limit: int = LOG_LINES) -> list[str]:
    """The log's lines, without progress bars (tqdm redraws with carriage returns)."""
    text = log.read_text(errors="replace").replace("\r", "\n")
    lines = [line for line in text.splitlines() if line.strip() and "%|" not in line]
    return lines[-limit:]


def driver(python: Path, name: str, job: dict[str, Any], work: Path) -> dict[str, Any]:
    """A driver script of ``programs/drivers``: job on stdin, JSON result on stdout."""
    log = work / f"{name}.stderr"
    with log.open("w") as err:
        done = subprocess.run(
            [str(python), str(DRIVERS / name)],
            input=json.dumps(job),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=work,
            env=program_env(work),
            timeout=PROGRAM_TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        tail = "\n".join(log_lines(log)[-20:])
        raise TierError(f"driver {name} exited {done.returncode}; see {log}:\n{tail}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def program(python: Path, module: str, args: list[str], work: Path, name: str) -> dict[str, Any]:
    """One real MaxText program, as its container runs it (``python3 -m module "$@"``)."""
    log = work / f"{name}.log"
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [str(python), "-m", module, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=work,
            env=program_env(work),
            timeout=PROGRAM_TIMEOUT,
            check=False,
        )
    return {
        "exit_code": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "log": log_lines(log),
    }
