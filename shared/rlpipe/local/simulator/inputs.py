"""The training head's first step, played: the run's own files checked by sha256, the pinned data
staged from the Hub double (or verified), and the staged split's size as ``datasets`` would load it.

The real step is ``rlpipe.core.staging``'s program, shipped in the manifest; the simulator reads
the same environment (``RLPIPE_USER_FILES``, ``RLPIPE_DATA_PLAN``), does the same checks in the
same order and prints the same kind of lines, in-process (a subprocess per attempt would cost
every simulated run a second). ``tests/publisher/test_staging_program.py`` runs the real program against
the same emulators. No test yet compares what the two write (the staged objects and the
manifest) side by side.

Then, as train_rl: ``hf_train_files`` is loaded with ``datasets.load_dataset("parquet",
data_files=...)`` (maxtext 0.2.4 ``train_rl.py:176-190``); a pattern that matches no file raises
``FileNotFoundError`` there, and the number of rows is what the data pipeline trims and batches.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rlpipe.core import staging
from rlpipe.local.simulator.parquet_rows import NotParquet, num_rows
from rlpipe.local.simulator.program import Arguments, ProgramContext, ProgramExit


def _say(ctx: ProgramContext, text: str) -> None:
    ctx.log(f"{staging.MARK} {text}")


def _hub_bytes(ctx: ProgramContext, repo: str, sha: str, path: str) -> bytes:
    import requests

    hub_url = getattr(getattr(ctx, "env", None), "hub_url", "")
    if not hub_url:
        raise ProgramExit(staging.EXIT_TRANSIENT, message="no Hub to stage the data from (no hub_url)")
    answer = requests.get(f"{hub_url}/datasets/{repo}/resolve/{sha}/{path}", timeout=30)
    if not answer.ok:
        raise ProgramExit(
            staging.EXIT_TRANSIENT,
            message=f"{staging.MARK} staging failed on the way (HTTP {answer.status_code} for {repo}@{sha[:12]}/{path})",
        )
    return bytes(answer.content)


def _user_files(ctx: ProgramContext, env: dict[str, str]) -> None:
    for f in json.loads(env.get(staging.ENV_USER_FILES) or "[]"):
        data = ctx.read(f["uri"])
        if data is None:
            message = f"{staging.MARK} {f['role']}: the run's copy {f['uri']} is gone; not running without it"
            raise ProgramExit(staging.EXIT_NOT_PINNED, message=message)
        got = hashlib.sha256(data).hexdigest()
        if got != f["sha256"]:
            message = (
                f"{staging.MARK} {f['role']}: {f['uri']} has sha256 {got}, the run recorded {f['sha256']}; "
                "not running other code than intake checked"
            )
            raise ProgramExit(staging.EXIT_NOT_PINNED, message=message)
        _say(ctx, f"{f['role']}: {f['uri']} (sha256 {got[:12]}) verified, at {f['local']}")


def _only_pinned(ctx: ProgramContext, plan: dict[str, Any]) -> None:
    """No other object under the staged splits: ``hf_train_files`` is a glob train_rl reads whole."""
    wanted = {f["target"] for f in plan["files"]} | {plan["manifest"]}
    for uri in ctx.list(plan["dest"]):
        if uri not in wanted:
            message = f"{staging.MARK} {uri} is not a file plan pinned, and train_rl would read it"
            raise ProgramExit(staging.EXIT_NOT_PINNED, message=message)


def _data(ctx: ProgramContext, env: dict[str, str]) -> None:
    plan: dict[str, Any] | None = json.loads(env.get(staging.ENV_DATA_PLAN) or "null")
    if not plan:
        return
    files, total = plan["files"], sum(int(f["size"]) for f in plan["files"])
    if ctx.exists(plan["manifest"]):
        for f in files:
            data = ctx.read(f["target"])
            if data is None:
                message = f"{staging.MARK} {f['target']}, staged from {f['repo']}@{f['sha'][:12]}/{f['path']}, is gone"
                raise ProgramExit(staging.EXIT_NOT_PINNED, message=message)
            if (f.get("sha256") and hashlib.sha256(data).hexdigest() != f["sha256"]) or len(data) != f[
                "size"
            ]:
                message = f"{staging.MARK} {f['target']} is not the file staged from {f['repo']}@{f['sha'][:12]}/{f['path']}"
                raise ProgramExit(staging.EXIT_NOT_PINNED, message=message)
        _only_pinned(ctx, plan)
        _say(ctx, f"data: {len(files)} staged files ({total} bytes) verified against the pinned commits")
        return
    done = 0
    for i, f in enumerate(files, 1):
        data = _hub_bytes(ctx, f["repo"], f["sha"], f["path"])
        if (f.get("sha256") and hashlib.sha256(data).hexdigest() != f["sha256"]) or len(data) != f["size"]:
            message = f"{staging.MARK} datasets/{f['repo']}@{f['sha']}/{f['path']} is not what plan pinned"
            raise ProgramExit(staging.EXIT_NOT_PINNED, message=message)
        ctx.write(f["target"], data)
        done += len(data)
        _say(
            ctx,
            f"data: staged {i}/{len(files)} datasets/{f['repo']}@{f['sha']}/{f['path']} ({done}/{total} bytes)",
        )
    _only_pinned(ctx, plan)
    ctx.write(plan["manifest"], json.dumps({"files": files}, indent=1, sort_keys=True))
    _say(ctx, f"data: {len(files)} files staged at {plan['dest']}")


def stage_inputs(ctx: ProgramContext, args: Arguments) -> None:
    """The step itself (raises ``ProgramExit`` 2 or 75 as the real one exits)."""
    env = dict(args.env)
    _user_files(ctx, env)
    _data(ctx, env)


def staged_rows(ctx: ProgramContext, args: Arguments) -> int | None:
    """The rows of ``hf_train_files`` as ``load_dataset("parquet", ...)`` reads them; None when
    train_rl is not pointed at files (the simulator's own tests). No file: ``FileNotFoundError``."""
    pattern = args.get("hf_train_files")
    if not pattern:
        return None
    prefix, _, suffix = pattern.rpartition("*")
    names = [u for u in ctx.list(prefix) if u.endswith(suffix) and "/" not in u[len(prefix) :]]
    if not names:
        raise ProgramExit(1, message=f"FileNotFoundError: Unable to find '{pattern}'")
    rows = 0
    for name in sorted(names):
        try:
            rows += num_rows(ctx.read(name) or b"")
        except NotParquet as exc:
            raise ProgramExit(1, message=f"ArrowInvalid: {name}: {exc}") from None
    return rows
