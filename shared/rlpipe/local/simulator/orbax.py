"""An Orbax checkpoint as MaxText's programs leave it on GCS, file by file and in Orbax's order.

Orbax on GCS writes in place and ``commit_success.txt`` last (docs/design.md#stages-and-what-done-means, reference/manifests.md
§4): a PyTree item is its per-array zarr v2 directories, then its sharding and metadata files; a
step adds ``_CHECKPOINT_METADATA``; each item and step is finalized by its own commit file.

Its own module because the conversion and the RL trainer both save checkpoints
(``rlpipe.local.simulator.maxtext``, ``.train_rl``), and a step is finalized by the same rule for
both (:func:`committed_steps`). Tiny contents, real names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from rlpipe.local.simulator.gcs_io import join
from rlpipe.local.simulator.program import ProgramContext

COMMIT_FILE = "commit_success.txt"  # Orbax: the step (or item) is finalized
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
PYTREE_METADATA = "_METADATA"
SHARDING = "_sharding"
ARRAY_METADATA = "array_metadatas/process_0"

SIMULATED_NOTE = "written by the rlpipe cluster simulator (simulated; not real MaxText output)"


def json_bytes(doc: object) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def _zarray() -> bytes:
    return json_bytes(
        {
            "chunks": [2, 2],
            "compressor": {"id": "zstd", "level": 1},
            "dtype": "bfloat16",
            "fill_value": None,
            "filters": None,
            "order": "C",
            "shape": [2, 2],
            "zarr_format": 2,
        }
    )


def pytree_files(arrays: list[str]) -> list[tuple[str, bytes]]:
    """An Orbax PyTree item without OCDBT or zarr3: per-array zarr v2 directories, then the
    sharding file, the per-process array metadata and finally the tree metadata."""
    files: list[tuple[str, bytes]] = []
    for array in arrays:
        files.append((f"{array}/.zarray", _zarray()))
        files.append((f"{array}/0.0", bytes(8)))  # one 2x2 bfloat16 chunk of zeros
    files.append(
        (
            SHARDING,
            json_bytes(
                {a: {"sharding_type": "SingleDeviceSharding", "device_str": "TFRT_CPU_0"} for a in arrays}
            ),
        )
    )
    files.append(
        (
            ARRAY_METADATA,
            json_bytes(
                {
                    "array_metadatas": [
                        {"array_metadata": {"param_name": a, "write_shape": [2, 2]}} for a in arrays
                    ]
                }
            ),
        )
    )
    files.append(
        (
            PYTREE_METADATA,
            json_bytes(
                {
                    "tree_metadata": {a: {"value_metadata": {"value_type": "jax.Array"}} for a in arrays},
                    "use_zarr3": False,
                    "_simulated": SIMULATED_NOTE,
                }
            ),
        )
    )
    return files


def checkpoint_metadata(now_ns: int, custom: Mapping[str, object]) -> bytes:
    return json_bytes(
        {
            "init_timestamp_nsecs": now_ns,
            "commit_timestamp_nsecs": now_ns,
            "metrics": {},
            "performance_metrics": {},
            "custom_metadata": dict(custom),
            "_simulated": SIMULATED_NOTE,
        }
    )


def commit_marker(path: str) -> bytes:
    return f"Checkpoint commit was successful to {path}\n".encode()


def write_all(
    ctx: ProgramContext,
    base: str,
    files: list[tuple[str, bytes]],
    seconds: float,
    *,
    peak_after: int | None = None,
) -> None:
    per_file = seconds / max(len(files), 1)
    for i, (name, data) in enumerate(files):
        ctx.pause(per_file)
        ctx.write(join(base, name), data)
        if peak_after is not None and i + 1 == peak_after:
            ctx.hook("peak")


def committed_steps(ctx: ProgramContext, actor_dir: str) -> list[int]:
    """Steps whose directory holds ``commit_success.txt`` (Orbax's own "finalized?" test)."""
    pattern = re.compile(re.escape(actor_dir.rstrip("/")) + r"/(\d+)/" + re.escape(COMMIT_FILE) + "$")
    return sorted(int(m.group(1)) for uri in ctx.list(actor_dir) if (m := pattern.match(uri)))


def now_ns(ctx: ProgramContext) -> int:
    """The program's clock in nanoseconds, as Orbax stamps a checkpoint's metadata."""
    return int(ctx.now() * 1e9)
