"""rlpipe's own script steps, run for real: the export's manifest step, and (real programs) fetch.

Once the played to_huggingface has written its files into the pod's own disk (its
``base_output_directory`` is a local directory), the container's script uploads exactly those
files and writes the export manifest last (``core/export_manifest.py``). The simulator does not
imitate that step: it runs it, the ``python3 -c`` program taken from the container's own script
(``program.script_programs``), in a subprocess with the container's environment, its local
directory mapped to where the pod's disk lies on this machine, against the GCS emulator. Its lines
become the pod's log; its exit code, when not 0, the container's. When a pod's program runs for
real (``.real_programs``), the fetch step before it (``core/pinning.py``: the pinned files from GCS
into the pod's disk) runs the same way, since the real program reads what it fetched.

The simulator reads the manifest step's environment only to say, before the step runs, which
objects the workload is about to write (the event shim asks who wrote an object as soon as it
appears).
"""

from __future__ import annotations

import os

from rlpipe.local.simulator.gcs_io import join
from rlpipe.local.simulator.program import Arguments, ProgramContext, ProgramExit, run_source

ENV_DIR, ENV_URI, ENV_MANIFEST = "RLPIPE_EXPORT_DIR", "RLPIPE_EXPORT_URI", "RLPIPE_EXPORT_MANIFEST"
ENV_PINNED_DIR = "RLPIPE_PINNED_DIR"  # where the fetch step puts the pinned files (core/pinning.py)
# A step moves a handful of small files (the tiny fixture's, or the simulator's) against a local
# emulator: longer is stuck.
TIMEOUT_SECONDS = 120.0


def run_script_step(ctx: ProgramContext, args: Arguments, step: str, local_dirs: tuple[str, ...]) -> None:
    """Run the script's ``step`` program with the container's environment, each variable of
    ``local_dirs`` (a container path) mapped to the pod's disk; ``ProgramExit`` with its code when
    it fails. Its lines are the pod's log."""
    source = args.step_programs.get(step)
    if not source:
        raise ProgramExit(1, message=f"the script's {step} step has no program to run")
    env = dict(args.env)
    missing = [name for name in local_dirs if not env.get(name)]
    if missing:
        raise ProgramExit(1, message=f"KeyError: {missing[0]!r}")
    process_env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        **env,
        **{name: str(ctx.local_path(env[name])) for name in local_dirs},
        "TMPDIR": str(ctx.local_path(env.get("TMPDIR") or "/tmp")),
        "STORAGE_EMULATOR_HOST": os.environ.get("STORAGE_EMULATOR_HOST", ""),
        "GOOGLE_CLOUD_PROJECT": os.environ.get("GOOGLE_CLOUD_PROJECT", "rlpipe-local"),
    }
    os.makedirs(process_env["TMPDIR"], exist_ok=True)
    code = run_source(ctx.log, source, [], process_env, TIMEOUT_SECONDS, f"the {step} step")
    if code != 0:
        raise ProgramExit(code)


def run_manifest_step(ctx: ProgramContext, args: Arguments) -> None:
    """Run the script's manifest step; raises ``ProgramExit`` with its code when it fails."""
    env = dict(args.env)
    missing = [name for name in (ENV_DIR, ENV_URI, ENV_MANIFEST) if not env.get(name)]
    if missing:
        raise ProgramExit(1, message=f"KeyError: {missing[0]!r}")
    local = ctx.local_path(env[ENV_DIR])
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    writes = [*(join(env[ENV_URI], name) for name in names), env[ENV_MANIFEST]]
    for uri in writes:
        ctx.claim(uri)
    run_script_step(ctx, args, "manifest", (ENV_DIR,))
    for uri in writes:
        ctx.note("file", uri)


def run_fetch_step(ctx: ProgramContext, args: Arguments) -> None:
    """Run the script's fetch step: the pinned files into the pod's disk."""
    run_script_step(ctx, args, "fetch", (ENV_PINNED_DIR,))
