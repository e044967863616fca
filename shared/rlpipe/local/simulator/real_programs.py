"""MaxText's converters run for real inside the simulator's convert and export pods (PROGRAMS=real).

With :class:`RealPrograms` set (``rlpipe local up --programs real``, ``make demo PROGRAMS=real``), a
convert or export pod does not play its program: it runs the pod's own argv, mapped exactly as the
programs tier maps it (``.testbed``: the bucket a folder, container paths under the pod's disk, the
fixture's size), with the programs venv's interpreter (``programs/venv.sh``), on the tiny Gemma 4
fixture (``tests/fixtures/tiny_gemma4``). Around it, what the container's script does:

* convert: the pin step, played with real bytes (the Hub double serves placeholders, not a model):
  the fixture is the snapshot the step would have downloaded at the pinned sha, in the pod's disk
  where ``--hf_model_path`` points, and its files but the weights go to the pinned URI with
  ``rlpipe-pinned.json`` last, as the step writes them; then ``to_maxtext``; then, once it exited 0,
  every file it wrote under the bucket's folder is uploaded under the same name, the commit markers
  last, deepest first (on GCS Orbax writes in place and finalizes a step with its
  ``commit_success.txt``);
* export: the fetch step, run for real (the script's own program, ``.export_step``); the checkpoint
  ``load_parameters_path`` names, downloaded into the bucket's folder; the directory the script
  makes; ``to_huggingface``; the manifest step, run for real, as in a played export.

The program's own lines are the pod's log, marked ``[real]``; the played steps' lines stay
``[simulated]``. A stop (the workload deleted) stops the program. Train stays played: with real
programs its checkpoints hold the parameters it loaded, unchanged (``.train_rl``), so the real
export reads a checkpoint a real program wrote. Only a fault at ``start`` strikes a real program.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from rlpipe.local.simulator import testbed
from rlpipe.local.simulator.export_step import ENV_DIR, run_fetch_step, run_manifest_step
from rlpipe.local.simulator.gcs_io import join, split_uri
from rlpipe.local.simulator.orbax import COMMIT_FILE
from rlpipe.local.simulator.pinning import PIN_MARK, PINNED_MANIFEST
from rlpipe.local.simulator.program import Program, ProgramContext, ProgramExit
from rlpipe.local.simulator.publisher import hub_file
from rlpipe.local.simulator.timing import WorkloadGone

STAGES = ("convert", "export")
WEIGHT_SUFFIXES = (".safetensors",)  # what the pin step downloads but does not copy to GCS
PROGRESS = "%|"  # a tqdm progress bar's redraw: not a log line
STOP_GRACE_SECONDS = 10.0  # a stopped program's SIGTERM, then SIGKILL
LOG_TAIL = 20  # lines of a failed program's log repeated in its error


@dataclass(frozen=True)
class RealPrograms:
    """What running the converters for real needs: the programs venv's interpreter (MaxText 0.2.4,
    Python >= 3.12) and the model's files (the tiny Gemma 4 fixture)."""

    python: Path
    fixture: Path
    stages: tuple[str, ...] = STAGES

    def describe(self) -> str:
        return f"{', '.join(self.stages)} run the real MaxText programs with {self.python}"


class RealContext(ProgramContext, Protocol):
    """What a real run needs of its pod beyond a played program's: the work folder of the pod's
    disk, a log line of the real program's own, and whether the pod was stopped."""

    def work_dir(self) -> Path: ...
    def log_real(self, line: str) -> None: ...
    def stopped(self) -> bool: ...


# The demo's one change to what rlpipe renders: to_maxtext saves each array whole rather than in 16
# chunks (its own option, to_maxtext.py:1173-1181). The tiny fixture then converts to about 700
# files instead of 10,787, each of which the demo uploads, copies into train's final checkpoint and
# downloads for export through fake-gcs-server, with an event each: a 22-minute demo took 4
# minutes. The programs tier (make programs) runs the rendered argv as it is, 16 chunks.
DEMO_CONVERT_SHARDING = "--simulated_cpu_devices_count=1"


def run(ctx: RealContext, program: Program, real: RealPrograms) -> int:
    """The pod's convert or export, its MaxText program run for real; its exit code."""
    stage = program.stage
    if stage not in real.stages:
        raise ProgramExit(1, message=f"{program.module} is not one of the programs run for real")
    ctx.hook("start")
    work = ctx.work_dir()
    args = testbed.converter_args(list(program.argv))
    argv = [testbed.resolve(a, str(work)) for a in args]
    base = testbed.value_of(list(program.argv), "base_output_directory")
    if stage == "convert":
        _pin_from_fixture(ctx, program, real.fixture)
        argv = [DEMO_CONVERT_SHARDING, *argv]
        code = _run_program(ctx, real.python, program.module, argv, work)
        _upload_bucket_folder(ctx, work / testbed.BUCKET_DIR, split_uri(base)[0])
    else:
        if "fetch" in program.args.steps:
            run_fetch_step(ctx, program.args)
        load = testbed.value_of(list(program.argv), "load_parameters_path")
        _download(ctx, load, Path(testbed.resolve(testbed.local_path(load), str(work))))
        _make_export_dir(ctx, program.args.env.get(ENV_DIR, base))
        code = _run_program(ctx, real.python, program.module, argv, work)
        if code == 0 and "manifest" in program.args.steps:
            run_manifest_step(ctx, program.args)
    return code


# ---- the steps around the program ----------------------------------------------------------------


def _pin_from_fixture(ctx: RealContext, program: Program, fixture: Path) -> None:
    """The convert script's pin step with the fixture for the repo at the pinned sha: the snapshot
    in the pod's disk, the files but the weights (and the repo's card) in GCS, the manifest last."""
    env = program.args.env
    repo, rev = env.get("RLPIPE_HF_REPO", "?"), env.get("RLPIPE_HF_REVISION", "?")
    local, dest = env.get("RLPIPE_SNAPSHOT_DIR", ""), env.get("RLPIPE_PINNED_URI", "")
    if not local or not dest:
        raise ProgramExit(1, message="KeyError: 'RLPIPE_SNAPSHOT_DIR' or 'RLPIPE_PINNED_URI'")
    ctx.log(f"{PIN_MARK} downloading {repo} at {rev} into {local}")
    ctx.log(f"{PIN_MARK} (played: the tiny Gemma 4 fixture {fixture.name} is the repo's files at {rev})")
    snapshot = ctx.local_path(local)
    snapshot.mkdir(parents=True, exist_ok=True)
    files: list[dict[str, object]] = []
    for path in sorted(p for p in fixture.iterdir() if p.is_file()):
        data = path.read_bytes()
        (snapshot / path.name).write_bytes(data)
        entry: dict[str, object] = {"path": path.name, "size": len(data)}
        if not path.name.endswith(WEIGHT_SUFFIXES):
            entry.update(sha256=hashlib.sha256(data).hexdigest(), copied=True)
            ctx.write(join(dest, path.name), data)
        files.append(entry)
    card = hub_file(ctx, repo, rev, "README.md")  # type: ignore[arg-type]
    if card is not None:
        ctx.write(join(dest, "README.md"), card)
        files.append({"path": "README.md", "size": len(card), "copied": True})
    manifest = {"hf_repo": repo, "revision": rev, "files": sorted(files, key=lambda e: str(e["path"]))}
    ctx.write(join(dest, PINNED_MANIFEST), json.dumps(manifest, indent=1, sort_keys=True).encode())
    copied = sum(1 for e in files if e.get("copied"))
    ctx.log(f"{PIN_MARK} copied {copied} files and {PINNED_MANIFEST} to {dest}")


def _make_export_dir(ctx: RealContext, path: str) -> None:
    """The export script's ``mkdir "$RLPIPE_EXPORT_DIR"``: without -p, so a directory that is there
    already (something else wrote it) stops the script before the program runs."""
    try:
        ctx.local_path(path).mkdir(parents=True)
    except FileExistsError:
        raise ProgramExit(1, message=f"mkdir: cannot create directory '{path}': File exists") from None


def upload_order(names: list[str]) -> list[str]:
    """Object names in the order they become visible: every file first, then the commit markers,
    deepest first (an item's before its step's), so a step is complete once its marker is there."""

    def rank(name: str) -> tuple[int, int, str]:
        marker = name.rsplit("/", 1)[-1] == COMMIT_FILE
        return (1, -name.count("/"), name) if marker else (0, 0, name)

    return sorted(names, key=rank)


def _upload_bucket_folder(ctx: RealContext, folder: Path, bucket: str) -> None:
    """What the program wrote under the bucket's folder, to the bucket, under the same names."""
    names = (
        [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
        if folder.exists()
        else []
    )
    for name in upload_order(names):
        ctx.write(f"gs://{bucket}/{name}", (folder / name).read_bytes())
    ctx.log(f"rlpipe simulator: {len(names)} files the program wrote uploaded to gs://{bucket}/")


def _download(ctx: RealContext, prefix_uri: str, target: Path) -> None:
    """Every object under ``prefix_uri`` into ``target``, where the program reads it."""
    found = ctx.list(prefix_uri)
    base = prefix_uri.rstrip("/") + "/"
    for uri in found:
        data = ctx.read(uri)
        if data is None:
            continue
        path = target / uri[len(base) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    ctx.log(f"rlpipe simulator: {len(found)} objects of {prefix_uri} downloaded where the program reads them")


# ---- the program ---------------------------------------------------------------------------------


def _lines(stream: IO[bytes], out: queue.Queue[str | None]) -> None:
    """The program's output, line by line (a progress bar's redraws dropped), then None."""
    for raw in iter(stream.readline, b""):
        for line in raw.decode(errors="replace").replace("\r", "\n").splitlines():
            if line.strip() and PROGRESS not in line:
                out.put(line)
    out.put(None)


def _run_program(ctx: RealContext, python: Path, module: str, argv: list[str], work: Path) -> int:
    """``python -m module argv`` in ``work``, its lines into the pod's log as they come; a stopped
    pod stops it (SIGTERM to its process group, SIGKILL after a grace)."""
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    ctx.log(f"rlpipe simulator: running the real {module} ({python})")
    child = subprocess.Popen(
        [str(python), "-m", module, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=work,
        env=testbed.program_env(str(work), os.environ),
        start_new_session=True,
    )
    assert child.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(child.stdout, lines), daemon=True)
    reader.start()
    tail: list[str] = []
    while True:
        if ctx.stopped():
            _stop(child)
            raise WorkloadGone
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if line is None:
            break
        ctx.log_real(line)
        tail = [*tail[-(LOG_TAIL - 1) :], line]
    code = child.wait()
    reader.join(timeout=5)
    if code != 0:
        raise ProgramExit(code, message=f"{module} exited {code}; its last lines:\n" + "\n".join(tail))
    return code


def _stop(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    except ProcessLookupError:
        pass
