"""``make programs``: run the real MaxText programs on what rlpipe renders, and store what they did.

For each part (``programs.parts``) whose result is missing under its current key, stage the part's
inputs where its localized argv points (``programs.testbed``), run it with the programs venv
(``programs/venv.sh``), and write ``result.json`` under ``<cache>/results/<part>-<key>/``. A
program that refuses or fails is a result like any other (exit code, error, log tail): this
command fails only when the tier itself cannot run (no venv, a driver that crashed). The pytest
tests read the results; they are what fails.

    .venv/bin/python -m programs.run                 # every part whose result is missing
    .venv/bin/python -m programs.run corpus FILE     # MaxText's reading of each key=value of FILE

Runs in rlpipe's interpreter (it renders the argv); the programs run in the venv's.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from programs import parts, testbed
from programs.cases import PROGRAMS, ROOT
from rlpipe.local.hub.parquet import parquet_bytes

CACHE = Path(os.environ.get("PROGRAMS_CACHE", ROOT / ".cache" / "programs"))
PROGRAM_TIMEOUT = 3 * 3600  # a hang guard only: the converters take minutes on two loaded cores
LOG_TAIL = 80
KEEP_RESULTS = 4  # per part: the newest few (worktrees sharing the cache may be on other keys)


class TierError(RuntimeError):
    """The tier could not run (as opposed to a program that refused or failed: a result)."""


def venv_python(cache: Path = CACHE) -> Path:
    python = cache / "venv" / "bin" / "python"
    if not (cache / "venv" / ".stamp").exists() or not python.exists():
        raise TierError(f"no programs venv at {cache / 'venv'}: run programs/venv.sh (make programs does)")
    return python


def _resolve(value: Any, work: str) -> Any:
    if isinstance(value, str):
        return testbed.resolve(value, work)
    if isinstance(value, list):
        return [_resolve(v, work) for v in value]
    if isinstance(value, dict):
        return {testbed.resolve(k, work): _resolve(v, work) for k, v in value.items()}
    return value


def _program_env(work: Path) -> dict[str, str]:
    """The environment a program runs in: nothing fetched from the Hub, scratch under ``work``."""
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("M_", "HF_", "JAX_", "XLA_"))}
    env.update(
        TMPDIR=str(work / "tmp"),
        HOME=str(work / "home"),
        HF_HOME=str(work / "hf-home"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        JAX_PLATFORMS="cpu",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _stage(files: dict[str, str], tables: dict[str, Any] | None = None) -> None:
    """Put what each stage's script would have put at the paths its argv names."""
    for dest, what in files.items():
        target = Path(dest)
        if what in ("fixture", "fixture-source"):
            chosen = parts.fixture_files() if what == "fixture" else parts.source_files()
            target.mkdir(parents=True, exist_ok=True)
            for f in chosen:
                shutil.copy2(f, target / f.name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / what, target)
    for pattern, table in (tables or {}).items():
        folder = Path(pattern.rpartition("/")[0])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{0:05d}.parquet").write_bytes(parquet_bytes(table))  # layout.data_file's name


def _listing(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (object names, as a bucket listing shows them) and its size."""
    if not folder.exists():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _tail(log: Path) -> list[str]:
    """The log's last lines, without progress bars (tqdm redraws with carriage returns)."""
    text = log.read_text(errors="replace").replace("\r", "\n")
    lines = [line for line in text.splitlines() if line.strip() and "%|" not in line]
    return lines[-LOG_TAIL:]


def _driver(python: Path, name: str, job: dict[str, Any], work: Path) -> dict[str, Any]:
    """A driver script of ``programs/drivers``: job on stdin, JSON result on stdout."""
    log = work / f"{name}.stderr"
    with log.open("w") as err:
        done = subprocess.run(
            [str(python), str(parts.DRIVERS / name)],
            input=json.dumps(job),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=work,
            env=_program_env(work),
            timeout=PROGRAM_TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        raise TierError(f"driver {name} exited {done.returncode}; see {log}:\n" + "\n".join(_tail(log)[-20:]))
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _program(python: Path, module: str, args: list[str], work: Path, name: str) -> dict[str, Any]:
    """One real MaxText program, as its container runs it (``python3 -m module "$@"``)."""
    log = work / f"{name}.log"
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [str(python), "-m", module, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=work,
            env=_program_env(work),
            timeout=PROGRAM_TIMEOUT,
            check=False,
        )
    return {
        "exit_code": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "log_tail": _tail(log),
    }


def run_config(part: parts.Part, work: Path, python: Path) -> dict[str, Any]:
    return _driver(python, "read_config.py", part.job, work)


def run_convert(part: parts.Part, work: Path, python: Path) -> dict[str, Any]:
    job = _resolve(part.job, str(work))
    _stage(job["stage_files"])
    result = _program(python, job["module"], job["args"], work, "convert")
    result["objects"] = _listing(Path(job["bucket"]))
    return result


def run_export(part: parts.Part, work: Path, python: Path, cache: Path) -> dict[str, Any]:
    job = _resolve(part.job, str(work))
    _stage(job["stage_files"])
    converted = (
        parts.result_dir(cache, "convert") / "work" / testbed.BUCKET_DIR / job["stage_converted"]["from"]
    )
    if not converted.is_dir():
        raise TierError(f"export reads the conversion's items, and {converted} is missing")
    shutil.copytree(converted, job["stage_converted"]["to"])
    result = _program(python, job["module"], job["args"], work, "export")
    output = Path(job["output"])
    result["objects"] = _listing(Path(job["bucket"]))
    for name in ("config.json", "model.safetensors.index.json"):
        if (output / name).exists():
            result[name] = json.loads((output / name).read_text())
    if result["exit_code"] == 0:
        result["tensors"] = _driver(
            python, "read_tensors.py", {"input": str(parts.FIXTURE), "output": str(output)}, work
        )
    return result


def run_train_data(part: parts.Part, work: Path, python: Path) -> dict[str, Any]:
    shapes = []
    for shape in part.job["shapes"]:
        shape_work = work / shape["name"]
        resolved = _resolve(shape, str(shape_work))
        _stage(resolved["stage_files"], resolved["tables"])
        shapes.append(resolved)
    return _driver(python, "train_data.py", {"shapes": shapes}, work)


def _prune(cache: Path, name: str) -> None:
    """Drop all but the newest results of a part (a conversion's folder is tens of MB)."""
    found = sorted((cache / "results").glob(f"{name}-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in found[KEEP_RESULTS:]:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One run at a time per cache: a second waits, then finds the results made."""
    (cache / "results").mkdir(parents=True, exist_ok=True)
    with (cache / "results" / ".run.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run_part(name: str, cache: Path, python: Path) -> bool:
    """Run one part unless its result exists; True when it ran."""
    final = parts.result_dir(cache, name)
    if (final / "result.json").exists():
        return False
    part = parts.parts()[name]
    scratch = final.with_name(final.name + f".tmp-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    work = scratch / "work"
    work.mkdir(parents=True)
    print(f"programs: running {name} (key {parts.key(name)})", file=sys.stderr, flush=True)
    started = time.monotonic()
    if name == "config":
        result = run_config(part, work, python)
    elif name == "convert":
        result = run_convert(part, work, python)
    elif name == "export":
        result = run_export(part, work, python, cache)
    else:
        result = run_train_data(part, work, python)
    seconds = round(time.monotonic() - started, 1)
    result = {"part": name, "key": parts.key(name), "wall_seconds": seconds, **result}
    (scratch / "result.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")
    if name != "convert":  # export reads convert's output; the others' work folders are not needed
        shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(scratch, final)
    _prune(cache, name)
    with (cache / "build-times.tsv").open("a") as times:
        times.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\t{name}\t{seconds}s\n")
    print(f"programs: {name} done in {seconds}s", file=sys.stderr, flush=True)
    return True


def run_all(cache: Path = CACHE, only: list[str] | None = None) -> None:
    python = venv_python(cache)
    with _locked(cache):
        for name in parts.PART_NAMES:
            if only and name not in only:
                continue
            if not run_part(name, cache, python):
                print(f"programs: {name} up to date ({parts.key(name)})", file=sys.stderr)


def read_corpus(path: Path, cache: Path = CACHE, module: str = PROGRAMS["train"]) -> list[dict[str, Any]]:
    """What MaxText's config reader makes of each ``key=value`` of a corpus file (value and type,
    or the error), each read alone after ``module``'s own config file."""
    python = venv_python(cache)
    job = {"cases": [], "corpus": {"module": module, "base": [], "items": parts.corpus_items(path)}}
    work = cache / "corpus-work"
    work.mkdir(parents=True, exist_ok=True)
    corpus: list[dict[str, Any]] = _driver(python, "read_config.py", job, work)["corpus"]
    return corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="programs.run", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run every part whose result is missing (the default)")
    run.add_argument("--only", nargs="*", choices=parts.PART_NAMES)
    corpus = sub.add_parser("corpus", help="MaxText's reading of each key=value line of a file")
    corpus.add_argument("file", type=Path)
    corpus.add_argument("--module", default=PROGRAMS["train"], choices=sorted(PROGRAMS.values()))
    args = parser.parse_args(argv)
    try:
        if args.command == "corpus":
            json.dump(read_corpus(args.file, module=args.module), sys.stdout, indent=1, sort_keys=True)
            sys.stdout.write("\n")
        else:
            run_all(only=getattr(args, "only", None))
    except TierError as exc:
        print(f"programs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
