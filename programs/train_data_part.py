"""The ``train_data`` part: train_rl's own data pipeline and reward loading on staged data shapes.

Each shape gets its own folder with what the head's script would have staged there (the pinned
tokenizer, the user's reward file, the parquet its argv points at); one driver process
(``drivers/train_data.py``) then runs train_rl's functions on every shape.
"""

from __future__ import annotations

from typing import Any

from programs import process


def run(job: dict[str, Any], run: process.Run) -> dict[str, Any]:
    shapes = []
    for shape in job["shapes"]:
        resolved = process.resolve(shape, run.work / shape["name"])
        process.stage(resolved["stage_folders"], resolved["stage_files"], resolved["tables"])
        shapes.append(resolved)
    return process.driver(run.python, "train_data.py", {"shapes": shapes}, run.work)
