"""In-container patches the tutorials apply before training, as named, versioned entries.

The tutorials edit installed Python files inside the image with a one-line `python3 -c` before
`train_rl` starts. Free text in a shell command cannot be reviewed, pinned or tested, so each
patch is a registry entry: a name, a version, the image it was written for, the file (or module)
it edits, and the exact old and new text. The script that applies it is generated from a fixed
template, with every value `shlex.quote`d, and it fails loudly when the text to patch is missing
(the tutorials' own one-liners silently do nothing then, and training later fails in a confusing
way).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Literal

PatchKind = Literal["regex-substitution", "literal-replacement"]


@dataclass(frozen=True)
class Workaround:
    """One in-container patch, identified as ``name@version``."""

    name: str
    version: int
    description: str
    written_for_image: str
    kind: PatchKind
    pattern: str
    replacement: str
    target_file: str | None = None
    target_module: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def python_source(self) -> str:
        """Python that applies the patch idempotently and exits 3 when the target text is absent.

        String literals are JSON-encoded (double quotes), so the whole program quotes as one
        readable single-quoted shell word.
        """
        q = json.dumps
        if self.target_file is not None:
            locate = f"p = pathlib.Path({q(self.target_file)})"
            imports = "import pathlib, re, sys"
        else:
            locate = f"p = pathlib.Path(importlib.import_module({q(self.target_module)}).__file__)"
            imports = "import importlib, pathlib, re, sys"
        if self.kind == "regex-substitution":
            apply = f"new, n = re.subn({q(self.pattern)}, {q(self.replacement)}, src)"
        else:
            apply = f"n = src.count({q(self.pattern)}); new = src.replace({q(self.pattern)}, {q(self.replacement)})"
        done_check = f"{q(self.replacement)} in src"
        status = '"applied" if n else ("already applied" if ok else "TARGET TEXT NOT FOUND")'
        return "; ".join(
            [
                imports,
                locate,
                "src = p.read_text()",
                apply,
                f"ok = n > 0 or {done_check}",
                "p.write_text(new) if n else None",
                f"print({q('rlpipe workaround ' + self.ref + ':')}, {status}, p)",
                "sys.exit(0 if ok else 3)",
            ]
        )

    def shell_line(self) -> str:
        """One line of the container script; the Python source is a single quoted word."""
        return f"python3 -c {shlex.quote(self.python_source())}"


_IMAGE_0_2_4 = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4"

REGISTRY: dict[str, Workaround] = {
    w.ref: w
    for w in (
        Workaround(
            name="adafactor-optimizer",
            version=1,
            description=(
                "Swap MaxText RL's optax.adamw(...) for optax.adafactor(learning_rate=learning_rate), "
                "as the v6e-32 tutorial does, so the optimizer state of Gemma 4 26B fits in 16 trainer chips."
            ),
            written_for_image=_IMAGE_0_2_4,
            kind="regex-substitution",
            target_file="/deps/src/maxtext/trainers/post_train/rl/utils_rl.py",
            pattern="optax[.]adamw[(][^)]+[)]",
            replacement="optax.adafactor(learning_rate=learning_rate)",
        ),
        Workaround(
            name="moe-permute-threshold",
            version=1,
            description=(
                "Raise tpu_inference's onehot_moe_permute_threshold default from 0 to 100000, "
                "as the v6e-64 tutorial does for the vLLM sampler's fused MoE kernel."
            ),
            written_for_image=_IMAGE_0_2_4,
            kind="literal-replacement",
            target_module="tpu_inference.layers.common.fused_moe_gmm",
            pattern="onehot_moe_permute_threshold: int = 0,",
            replacement="onehot_moe_permute_threshold: int = 100000,",
        ),
    )
}

_REF = re.compile(r"^[a-z][a-z0-9-]*@[1-9][0-9]*$")


def lookup(ref: str) -> Workaround:
    """Return the registry entry for ``name@version``; KeyError names the known entries."""
    if ref not in REGISTRY:
        raise KeyError(f"unknown workaround {ref!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[ref]


def is_valid_ref(ref: str) -> bool:
    return bool(_REF.match(ref)) and ref in REGISTRY
