"""``make programs``: run the real MaxText programs on what rlpipe renders, and store what they did.

For each part (``programs.parts``) whose result is missing under its current key, run it with the
programs venv (``programs/venv.sh``): its runner stages the part's inputs where its localized argv
points (``rlpipe.local.simulator.testbed``) and runs the program or driver (``programs.process``);
``result.json`` goes under ``<cache>/results/<part>-<key>/``, with whatever the part keeps beside it.
A program that refuses or fails is a result like any other (exit code, error, log): this command
fails only when the tier itself cannot run (no venv, a driver that crashed). The pytest tests read
the results; they are what fails.

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
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from programs import parts, process
from programs.cases import PROGRAMS, ROOT
from programs.process import TierError

CACHE = Path(os.environ.get("PROGRAMS_CACHE", ROOT / ".cache" / "programs"))
KEEP_RESULTS = 4  # per part: the newest few (worktrees sharing the cache may be on other keys)


def venv_python(cache: Path = CACHE) -> Path:
    python = cache / "venv" / "bin" / "python"
    if not (cache / "venv" / ".stamp").exists() or not python.exists():
        raise TierError(f"no programs venv at {cache / 'venv'}: run programs/venv.sh (make programs does)")
    return python


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
    if part.runner is None:
        raise TierError(f"part {name} names no runner (programs.parts)")
    scratch = final.with_name(final.name + f".tmp-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    work = scratch / "work"
    work.mkdir(parents=True)
    print(f"programs: running {name} (key {parts.key(name)})", file=sys.stderr, flush=True)
    started = time.monotonic()
    run = process.Run(work, scratch, python, lambda other: parts.result_dir(cache, other))
    result: dict[str, Any] = part.runner(part.job, run)
    seconds = round(time.monotonic() - started, 1)
    result = {"part": name, "key": parts.key(name), "wall_seconds": seconds, **result}
    (scratch / "result.json").write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")
    shutil.rmtree(work, ignore_errors=True)  # what a later part reads, the runner kept beside the result
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
        for name in parts.part_names():
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
    corpus: list[dict[str, Any]] = process.driver(python, "read_config.py", job, work)["corpus"]
    return corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="programs.run", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run every part whose result is missing (the default)")
    run.add_argument("--only", nargs="*", choices=parts.part_names())
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
