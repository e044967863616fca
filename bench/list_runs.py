"""7. `rlpipe list` against a bucket full of checkpoints: requests and seconds, next to a full walk.

**What:** the HTTP requests and the wall time of `rlpipe list` (``cli.runs.list_runs``: paged run
ids from a delimiter listing, then one GET per ledger, concurrently) with a few runs, before and
after one run gains ``--list-objects`` checkpoint objects.

**Baseline, same run:** the listing it replaced: every object name under ``runs/`` (no
delimiter), then the ledgers one by one. Both talk to fake-gcs-server through the real
``google-cloud-storage`` client; requests are counted on the client's HTTP session.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import Section, count_requests, table


def _full_walk(ledger: Any) -> list[Any]:
    """The old `rlpipe list`: every name under runs/, then each ledger in turn."""
    return [r for r in (ledger.get(run_id) for run_id in ledger.list_run_ids()) if r is not None]


def run(args: argparse.Namespace) -> Section:
    import os

    from rlpipe.cli import runs
    from rlpipe.control.adapters.blobstore import BlobStore, make_client
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.core.runs.record import RunRecord, Source
    from rlpipe.local.gcs import FakeGcs

    started = time.monotonic()
    n_runs, n_objects = args.list_runs, args.list_objects
    rows: list[list[str]] = []
    data: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, FakeGcs(Path(tmp)) as gcs:
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        client = make_client("bench")
        bucket = client.create_bucket("bench-artifacts").name
        ledger = Ledger(BlobStore(client, bucket))
        for i in range(n_runs):
            ledger.claim(
                RunRecord(run_id=f"rbench{i:06d}", key=str(i), source=Source(kind="cli"), request={})
            )
        seen = count_requests(client)

        def measure(label: str) -> None:
            for name, fn in (
                ("rlpipe list", lambda: runs.list_runs(ledger)),
                ("full walk (baseline)", lambda: _full_walk(ledger)),
            ):
                seen.clear()
                t0 = time.perf_counter()
                found = fn()
                elapsed = time.perf_counter() - t0
                assert len(found) == n_runs, (name, len(found))
                rows.append([label, name, str(len(seen)), f"{elapsed:.3f} s"])
                data[f"{label}/{name}"] = {"requests": len(seen), "seconds": elapsed}

        measure(f"{n_runs} runs, no checkpoints")
        store = BlobStore(client, bucket)
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda i: store.put(
                        f"runs/rbench000000/trained/rl/checkpoints/actor/{i // 100}/model_params/s{i}", b"x"
                    ),
                    range(n_objects),
                )
            )
        measure(f"{n_runs} runs, {n_objects} checkpoint objects")
    body = (
        __doc__.split("\n\n", 1)[1]
        + "\n\n"
        + table(["bucket", "listing", "HTTP requests", "wall time"], rows)
        + "\n\n**Reading it:** the requests of `rlpipe list` do not change with the checkpoint objects;"
        " the full walk reads every checkpoint name. fake-gcs-server answers a listing in one page whatever"
        " its size, so here the walk's cost shows as time, not requests; GCS pages at 1,000 names"
        " (Objects: list, maxResults), so there the walk also makes one request per 1,000 names.\n"
    )
    new = data[f"{n_runs} runs, {n_objects} checkpoint objects/rlpipe list"]
    old = data[f"{n_runs} runs, {n_objects} checkpoint objects/full walk (baseline)"]
    headline = [
        (
            f"`rlpipe list` requests with {n_objects:,} checkpoint objects",
            str(new["requests"]),
            f"full walk: {old['requests']}",
        )
    ]
    return Section(
        "list",
        "7. `rlpipe list` over a bucket of checkpoints",
        body,
        headline,
        data,
        time.monotonic() - started,
    )


if __name__ == "__main__":
    section = run(argparse.Namespace(list_runs=3, list_objects=10_000))
    print(section.body)
