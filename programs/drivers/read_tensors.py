"""Every tensor of two Hugging Face folders, and how far apart the ones of the same name are.

Runs in the programs venv (``safetensors.numpy``: no torch). Job on stdin: ``{"input": FOLDER,
"output": FOLDER}``; result on stdout: for each folder, each tensor's shape and dtype (by name,
over every ``*.safetensors`` file in it), and for each name in both, the largest absolute
difference of the values (compared in float32) and the largest absolute value of each.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, which safetensors' numpy reader needs)
import numpy as np
from safetensors import safe_open


def tensors(folder: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="numpy") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has keys(), not iteration)
                out[name] = f.get_tensor(name)
    return out


def describe(found: dict[str, np.ndarray]) -> dict[str, Any]:
    return {name: {"shape": list(a.shape), "dtype": str(a.dtype)} for name, a in sorted(found.items())}


def main() -> None:
    job = json.load(sys.stdin)
    given, made = tensors(Path(job["input"])), tensors(Path(job["output"]))
    diffs = {}
    for name in sorted(set(given) & set(made)):
        a, b = given[name].astype(np.float32), made[name].astype(np.float32)
        if a.shape != b.shape:
            continue
        diffs[name] = {
            "max_abs_diff": float(np.max(np.abs(a - b))),
            "max_abs": float(np.max(np.abs(a))),
            "max_abs_out": float(np.max(np.abs(b))),
        }
    json.dump(
        {"input": describe(given), "output": describe(made), "diffs": diffs}, sys.stdout, sort_keys=True
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
