"""Training data staged where a rendered train manifest points train_rl (``hf_train_files``),
standing in for the head's staging step in tests that create a JobSet without a planned run."""

from __future__ import annotations

import json
from typing import Any

from rlpipe.local.hub_double.parquet import parquet_bytes


def head_args(obj: dict[str, Any]) -> dict[str, str]:
    """The key=value arguments of a JobSet's head container."""
    spec = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return dict(a.split("=", 1) for a in spec["containers"][0]["args"] if "=" in a and not a.startswith("--"))


def seed_training_data(client: Any, obj: dict[str, Any], rows: int | None = None) -> int:
    """One parquet file of ``rows`` question/answer examples (default: as many as the config
    trims to, num_batches × batch_size, so the data is plentiful) at the manifest's pattern."""
    if obj.get("kind") != "JobSet":
        return 0
    args = head_args(obj)
    pattern = args.get("hf_train_files")
    if not pattern:
        return 0
    count = rows if rows is not None else int(args.get("num_batches", "1")) * int(args.get("batch_size", "1"))
    _, _, bucket, name = pattern.split("/", 3)
    table = {"question": [f"q{i}" for i in range(count)], "answer": [json.dumps(["1"])] * count}
    client.bucket(bucket).blob(name.rpartition("*")[0] + "00000.parquet").upload_from_string(
        parquet_bytes(table)
    )
    return count
