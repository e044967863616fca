"""What a request may not put into a container's environment, and which images a deployment runs.

Why: ``training.command_env`` and ``pathways.env`` reach the container that runs our fixed
``bash -c`` script. bash reads some variables before the script's first line (``BASH_ENV`` is
sourced by a non-interactive shell; ``SHELLOPTS``/``BASHOPTS`` switch on options such as
``xtrace`` whose ``PS4`` is expanded; ``ENV`` in POSIX mode), and the dynamic loader obeys
``LD_PRELOAD`` and friends in every process. Any of them runs code of the requester's choosing
before ours (bash(1), "INVOCATION" and "Shell Variables"; ld.so(8), "ENVIRONMENT"). Values are
plain data: command substitution in one is refused too, though our scripts never ``eval`` them.

Images: a request could otherwise run any pinned image with the workload's service account and
the Hugging Face token; a deployment lists the registries it trusts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from rlpipe.core.problems import Problem

# Read by bash or the dynamic loader before (or while) our script runs.
FORBIDDEN_ENV_NAMES = frozenset(
    {
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "IFS",
        "CDPATH",
        "GLOBIGNORE",
        "BASH_XTRACEFD",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "LD_DEBUG_OUTPUT",
        "PYTHONSTARTUP",
        "PYTHONPATH",
        "PYTHONHOME",
    }
)
_FORBIDDEN_PREFIXES = ("BASH_FUNC_", "LD_")  # exported bash functions; any loader variable
_SUBSTITUTION = re.compile(r"\$\(|`|\$\{[^}]*[:@#%/^,]")

# The env maps of a request, as (field path, where the value sits in the merged document).
ENV_FIELDS = (
    ("training.command_env", ("training", "command_env")),
    ("pathways.env.workload", ("pathways", "env", "workload")),
    ("pathways.env.proxy", ("pathways", "env", "proxy")),
    ("pathways.env.resource_manager", ("pathways", "env", "resource_manager")),
    ("pathways.env.worker", ("pathways", "env", "worker")),
)
IMAGE_FIELDS = ("image", "pathways.proxy_image", "pathways.server_image", "pathways.worker_image")


def env_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    for path, where in ENV_FIELDS:
        env = _at(doc, where)
        if not isinstance(env, Mapping):
            continue
        for name, value in env.items():
            if not isinstance(name, str):
                continue
            if name.upper() in FORBIDDEN_ENV_NAMES or name.upper().startswith(_FORBIDDEN_PREFIXES):
                yield Problem(
                    f"{path}.{name}",
                    f"{name} is read by the shell or the loader before the pipeline's script runs",
                    "remove it; set what your program needs under another name",
                )
            elif isinstance(value, str) and _SUBSTITUTION.search(value):
                yield Problem(
                    f"{path}.{name}",
                    "the value contains shell substitution ($(...), backticks or ${...} operators)",
                    "give a literal value",
                )


def image_problems(doc: Mapping[str, Any], allowed_prefixes: Iterable[str]) -> Iterator[Problem]:
    """Images outside the deployment's allowed registries (an empty list allows none)."""
    allowed = tuple(p for p in allowed_prefixes if p)
    for path in IMAGE_FIELDS:
        image = _at(doc, tuple(path.split(".")))
        if isinstance(image, str) and not image.startswith(allowed):
            yield Problem(
                path,
                f"{image} is not from a registry this deployment runs",
                f"use an image under {' or '.join(allowed) or '(no registry is allowed)'}, "
                "or ask the operator to add its registry to RLPIPE_ALLOWED_IMAGE_PREFIXES",
            )


def _at(doc: Mapping[str, Any], where: tuple[str, ...]) -> Any:
    node: Any = doc
    for key in where:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node
