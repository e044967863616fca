"""What the programs tier puts before MaxText: every argv rlpipe renders, as the stages' containers get it.

Each case is one stage of one request, rendered by rlpipe's own ``core.manifests.render`` (what
``rlpipe render`` prints and the control plane creates), with the container's ``args`` taken from
the rendered object. Requests: every file in ``examples/`` (a sweep's children each), and a bare
request per preset. The run id and bucket are fixed, so the same repository renders the same argv
and the result's key (``programs.keys``) changes only when rlpipe's rendering does.

Runs in rlpipe's own interpreter (3.11, ``.venv``); the MaxText side never imports rlpipe.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlpipe.core import commands, identity
from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.presets import PRESET_NAMES
from rlpipe.core.request import Request, load_request
from rlpipe.core.request.policy import Policy
from rlpipe.core.sweep import children

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BUCKET = "programs-tier"  # the bucket name the cases render with; no program reaches it
RUN_ID = "rprograms0001"
HF_REVISION = "0" * 40  # a pinned sha, as plan resolves one
# The stages that run a MaxText program, and the program's module (argv[0] is its file).
PROGRAMS: dict[str, str] = {
    "convert": commands.CONVERT_MODULE,
    "train": commands.TRAIN_MODULE,
    "export": commands.EXPORT_MODULE,
}
PRESET_MODEL = {"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"}


@dataclass(frozen=True)
class Case:
    """One stage of one request: its rendered container args, and the request they came from."""

    name: str  # "<request>/<stage>", e.g. "gemma4-26b-v6e-32/train"
    stage: str
    request: Request
    args: list[str]
    env: dict[str, str]  # the container's M_* variables: pyconfig reads them as overrides

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stage": self.stage,
            "module": PROGRAMS[self.stage],
            "args": self.args,
            "env": self.env,
        }


def container(obj: dict[str, Any]) -> dict[str, Any]:
    """The container that runs the program: a Job's only one, a JobSet head's main one."""
    spec = obj["spec"]
    if obj["kind"] == "JobSet":
        spec = spec["replicatedJobs"][0]["template"]["spec"]
    container: dict[str, Any] = spec["template"]["spec"]["containers"][0]
    return container


def _maxtext_env(container: dict[str, Any]) -> dict[str, str]:
    return {
        e["name"]: e["value"]
        for e in container.get("env", [])
        if e["name"].startswith("M_") and isinstance(e.get("value"), str)
    }


def requests() -> dict[str, Request]:
    """Every request the tier judges, by name: examples (sweep children as ``<file>#<index>``), presets."""
    found: dict[str, Request] = {}
    policy = Policy(allow_user_code=True)  # the custom-reward example brings its own rewards
    for path in sorted(EXAMPLES.glob("*.yaml")):
        req = load_request(path.read_bytes(), source=str(path), policy=policy)
        if req.sweep is not None:
            for child in children(req, policy):
                found[f"{path.stem}#{child.index}"] = child.request
        else:
            found[path.stem] = req
    for preset in PRESET_NAMES:
        doc = {**PRESET_MODEL, "preset": preset}
        found[f"preset-{preset}"] = load_request(yaml.safe_dump(doc), source=f"preset {preset}")
    return found


def cases() -> list[Case]:
    ctx = RenderContext(run_id=RUN_ID, bucket=BUCKET, hf_revision=HF_REVISION)
    out = []
    for name, req in requests().items():
        for stage in identity.MAXTEXT_STAGES:
            found = container(render(req, stage, 1, ctx))
            out.append(Case(f"{name}/{stage}", stage, req, list(found["args"]), _maxtext_env(found)))
    return out


def main() -> None:
    json.dump([c.as_json() for c in cases()], sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
