"""rlpipe's own script steps before each MaxText program, played from the container's environment.

The ``rlpipe-pin``/``rlpipe-fetch`` steps (``core/pinning.py``) read the repo at the pinned sha;
the head's ``inputs`` step stages the run's files and the pinned data (``.inputs``). Its own module
because all three programs (``rlpipe.local.simulator.maxtext``, ``.train_rl``) start with them.
"""

from __future__ import annotations

from rlpipe.local.simulator.gcs_io import join
from rlpipe.local.simulator.orbax import SIMULATED_NOTE, json_bytes
from rlpipe.local.simulator.program import Arguments, ProgramContext, ProgramExit
from rlpipe.local.simulator.publisher import hub_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
HF_SINGLE = "model.safetensors"
# rlpipe's own script steps before the program (core/pinning.py): what they read and write.
PIN_MARK, FETCH_MARK = "rlpipe-pin:", "rlpipe-fetch:"
PINNED_MANIFEST = "rlpipe-pinned.json"
PINNED_REPO_FILES = ("config.json", "generation_config.json", *TOKENIZER_FILES)


def pinned_steps(ctx: ProgramContext, args: Arguments) -> None:
    """rlpipe's script steps before the program: pin the repo at the sha, or fetch the pinned files."""
    if "pin" in args.steps:
        repo, rev = args.env.get("RLPIPE_HF_REPO", "?"), args.env.get("RLPIPE_HF_REVISION", "?")
        dest, local = args.env.get("RLPIPE_PINNED_URI", ""), args.env.get("RLPIPE_SNAPSHOT_DIR", "?")
        ctx.log(f"{PIN_MARK} downloading {repo} at {rev} into {local}")
        if not dest:
            raise ProgramExit(1, message="KeyError: 'RLPIPE_PINNED_URI'")
        for name in PINNED_REPO_FILES:
            ctx.write(join(dest, name), json_bytes({"_simulated": SIMULATED_NOTE}))
        files = [{"path": n, "copied": True} for n in PINNED_REPO_FILES]
        if (card := hub_file(ctx, repo, rev, "README.md")) is not None:  # type: ignore[arg-type]
            ctx.write(join(dest, "README.md"), card)
            files.append({"path": "README.md", "copied": True})
        files.append({"path": HF_SINGLE, "size": 0})
        ctx.write(join(dest, PINNED_MANIFEST), json_bytes({"hf_repo": repo, "revision": rev, "files": files}))
        ctx.log(f"{PIN_MARK} copied {len(PINNED_REPO_FILES)} files and {PINNED_MANIFEST} to {dest}")
    if "fetch" in args.steps:
        src, local = args.env.get("RLPIPE_PINNED_URI", ""), args.env.get("RLPIPE_PINNED_DIR", "?")
        names = ctx.list(src) if src else []
        if join(src, PINNED_MANIFEST) not in names:
            raise ProgramExit(
                1, message=f"{FETCH_MARK} no pinned files at {src} ({PINNED_MANIFEST} is missing)"
            )
        ctx.log(f"{FETCH_MARK} {len(names)} files from {src} in {local}")
    if "inputs" in args.steps:  # the head's own files verified, the pinned data staged
        from rlpipe.local.simulator.inputs import stage_inputs

        stage_inputs(ctx, args)
