"""The publish Job's program, run for real: the simulator executes the manifest's own
``python3 -c <source>`` in a subprocess, with the container's arguments and environment, against
the GCS emulator and the Hub double (``HF_ENDPOINT``), instead of imitating it.

What differs from a cluster, and why: ``--tmpdir`` (a container path) becomes a fresh local
directory, and ``secretKeyRef`` values are read from the API double's Secrets, as the kubelet
would. Its output becomes the pod's log line by line.
"""

from __future__ import annotations

import base64
import os
import tempfile
from typing import Any, Protocol

from rlpipe.local.kube_api import KubeApiError
from rlpipe.local.simulator.program import Arguments, ProgramExit, run_source

# A publish that would take longer than this on the local stack is stuck (the Hub double answers
# in milliseconds); the pod then fails like a program that hangs until its deadline.
TIMEOUT_SECONDS = 600.0


class Context(Protocol):
    workload: Any
    env: Any

    def log(self, line: str) -> None: ...


def _secret(env: Any, namespace: str, name: str, key: str) -> str:
    try:
        secret = env.kube.get("secrets", name, namespace=namespace)
    except KubeApiError as exc:
        # The kubelet leaves such a pod in CreateContainerConfigError; here the program cannot run.
        raise ProgramExit(1, "Error", f"secret {namespace}/{name} not found ({exc.code})") from None
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        raise ProgramExit(1, "Error", f"secret {namespace}/{name} has no key {key!r}")
    return base64.b64decode(raw).decode("utf-8")


def run_publish(ctx: Context, args: Arguments) -> int:
    program = ctx.workload.program
    hub_url = getattr(ctx.env, "hub_url", "")
    if not hub_url:
        raise ProgramExit(
            1, "Error", "no Hub double to publish to (the simulator was started without hub_url)"
        )
    argv = list(program.argv)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        **dict(args.env),
        "HF_ENDPOINT": hub_url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "STORAGE_EMULATOR_HOST": os.environ.get("STORAGE_EMULATOR_HOST", ""),
    }
    namespace = ctx.workload.namespace
    for variable, name, key in program.secret_env:
        env[variable] = _secret(ctx.env, namespace, name, key)
    with tempfile.TemporaryDirectory(prefix="rlpipe-publish-") as tmp:
        if "--tmpdir" in argv:
            argv[argv.index("--tmpdir") + 1] = tmp
        env["TMPDIR"] = tmp
        return run_source(ctx.log, program.source, argv, env, TIMEOUT_SECONDS, "the publisher")


def hub_file(ctx: Context, repo: str, revision: str, name: str) -> bytes | None:
    """One small file of ``repo`` at ``revision`` from the Hub double (the simulated pin copies the
    model card as the real one copies every non-weight file), or None without a Hub double."""
    import requests

    hub_url = getattr(getattr(ctx, "env", None), "hub_url", "")
    if not hub_url:
        return None
    answer = requests.get(f"{hub_url}/{repo}/resolve/{revision}/{name}", timeout=10)
    return answer.content if answer.ok else None
