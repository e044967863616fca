"""Reconcile: one pass over 1,000 ledgers on the real chain, and what bounded concurrency buys.

The chain is the tests' (``tests/reconcile/test_reconcile_chain.py``): fake-gcs-server reached by the real
storage client, the Kubernetes API double reached by the real kubernetes client, and the local
Workflows engine serving the Executions API to the real ``ExecutionsClient``. The world:

* 1,000 ledgers (written concurrently, one object each): 700 terminal, 200 ``training`` with an
  ACTIVE execution and a current JobSet, 50 whose execution no longer exists, 50 claims that never
  started (10 minutes old, expired start lease);
* 20 orphan JobSets of unknown runs.

Measured, in this order (dry runs are read-only, so they repeat on the same world):

1. a dry run at concurrency 1, 4, 8 (the default) and 16: the read path (list pages, read ledgers,
   get executions, list workloads, read requests for deadlines); concurrency 1 is the baseline;
2. the same dry run with ``--gcs-latency-ms`` (default 20) added to every storage request, at
   concurrency 1 and 8: on loopback the pass is CPU-bound in the client libraries, so this is
   where a bound on concurrent reads shows what it buys against a real bucket's round trips
   (the latency is injected by a requests adapter on the storage client's session, and labelled);
3. the real pass at the default concurrency (no injected latency): the same reads plus 120 repairs
   (50 runs failed, 50 executions started, 20 JobSets deleted), each with its history event;
4. a steady-state pass right after: nothing left to do.

Figures are wall-clock seconds on this machine; they are reported, never asserted
(``tests/reconcile/test_reconcile.py`` asserts the behaviour).

    .venv/bin/python -m bench.reconcile_1000 [--ledgers 1000] [--gcs-latency-ms 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONCURRENCIES = (1, 4, 8, 16)


def world(n: int) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, int]]:
    """Ledger specs for ``n`` runs in the proportions of the module docstring."""
    from tests.reconcile.test_reconcile_chain import GONE_PREFIX

    active, gone, stranded = n // 5, n // 20, n // 20
    specs: list[tuple[str, dict[str, Any]]] = []
    for i in range(n):
        run_id = f"rbench{i:06d}"
        if i < active:
            specs.append((run_id, {"state": "training", "attempts": (("train", 1, 600),)}))
        elif i < active + gone:
            specs.append((run_id, {"state": "training", "execution": GONE_PREFIX + run_id}))
        elif i < active + gone + stranded:
            specs.append((run_id, {"state": "accepted", "age": 600, "lease_until": time.time() - 300}))
        else:
            specs.append((run_id, {"state": "succeeded" if i % 2 else "failed"}))
    return specs, {
        "active": active,
        "gone": gone,
        "stranded": stranded,
        "terminal": n - active - gone - stranded,
    }


def slow_storage(client: Any, latency: float) -> None:
    """Add ``latency`` seconds to every request of a storage client (its pool sized for 16 threads)."""
    from requests.adapters import HTTPAdapter

    class Slow(HTTPAdapter):
        def send(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(latency)
            return super().send(*args, **kwargs)

    adapter = Slow(pool_connections=4, pool_maxsize=32)
    client._http.mount("http://", adapter)
    client._http.mount("https://", adapter)


def measure(n: int, latency_ms: float = 20.0) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    from rlpipe.control.adapters.blobstore import make_client
    from rlpipe.local.gcs import FakeGcs
    from rlpipe.local.kube_api import KubeApiServer
    from tests.reconcile.test_reconcile_chain import Chain, chain_settings, workflows_engine

    out: dict[str, Any] = {"ledgers": n}
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        gcs = FakeGcs(Path(tmp)).start()
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        try:
            with KubeApiServer() as kube, workflows_engine() as workflows:
                client = make_client("rlpipe-bench")
                suffix = uuid.uuid4().hex[:8]
                artifacts = client.create_bucket(f"bench-artifacts-{suffix}").name
                state = client.create_bucket(f"bench-state-{suffix}").name
                requests = client.create_bucket(f"bench-requests-{suffix}").name
                from rlpipe.control.adapters.blobstore import BlobStore

                chain = Chain(
                    BlobStore(client, state),
                    kube,
                    workflows,
                    chain_settings(artifacts, requests, kube, workflows, state=state),
                )
                specs, mix = world(n)
                out["mix"] = mix
                active = [
                    run_id
                    for run_id, spec in specs
                    if spec["state"] == "training" and "execution" not in spec
                ]
                started = time.monotonic()
                with ThreadPoolExecutor(16) as pool:
                    names = dict(zip(active, pool.map(chain.start, active), strict=True))
                by_id = dict(specs)
                for run_id in active:
                    by_id[run_id]["execution"] = names[run_id]
                chain.runs(specs)
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda r: chain.workload(r, "train", 1), active))
                    list(pool.map(lambda i: chain.workload(f"rorphan{i:05d}", "train", 1), range(20)))
                out["setup_seconds"] = time.monotonic() - started

                dry: dict[int, dict[str, Any]] = {}
                for concurrency in CONCURRENCIES:
                    report, seconds = _timed(chain, concurrency, dry_run=True)
                    dry[concurrency] = {
                        "seconds": seconds,
                        "examined": report.examined,
                        "planned": len(report.outcomes),
                        "complete": report.round_complete,
                    }
                out["dry_run"] = dry
                slow_client = make_client("rlpipe-bench")
                slow_storage(slow_client, latency_ms / 1000)
                slow = Chain(BlobStore(slow_client, state), kube, workflows, chain.settings)
                out["latency_ms"] = latency_ms
                out["dry_run_latency"] = {}
                for concurrency in (1, 8):
                    report, seconds = _timed(slow, concurrency, dry_run=True)
                    out["dry_run_latency"][concurrency] = {
                        "seconds": seconds,
                        "examined": report.examined,
                        "planned": len(report.outcomes),
                    }
                report, seconds = _timed(chain, 8, dry_run=False)
                out["real"] = {
                    "seconds": seconds,
                    "examined": report.examined,
                    "actions": report.counts(),
                    "errors": len(report.errors),
                    "complete": report.round_complete,
                }
                report, seconds = _timed(chain, 8, dry_run=False)
                out["steady"] = {
                    "seconds": seconds,
                    "examined": report.examined,
                    "actions": len(report.outcomes),
                }
        finally:
            gcs.stop()
    return out


def _timed(chain: Any, concurrency: int, *, dry_run: bool) -> tuple[Any, float]:
    import io

    from rlpipe.control.adapters.logs import Logger

    reconciler = chain.reconciler(concurrency=concurrency)
    reconciler.log = Logger("reconcile", stream=io.StringIO())  # the figures, not 1,000 log lines
    reconciler.repairs.log = reconciler.log
    began = time.monotonic()
    report = reconciler.run_pass(dry_run=dry_run)
    return report, time.monotonic() - began


def render(m: dict[str, Any]) -> str:
    n = m["ledgers"]
    base = m["dry_run"][1]["seconds"]
    lines = [
        f"reconcile, {n} ledgers ({', '.join(f'{v} {k}' for k, v in m['mix'].items())}), "
        f"20 orphan JobSets; setup {m['setup_seconds']:.1f}s",
        "",
        "| pass | concurrency | seconds | ledgers/s | vs dry run at concurrency 1 | outcome |",
        "|---|---|---|---|---|---|",
    ]
    for c, d in m["dry_run"].items():
        lines.append(
            f"| dry run | {c} | {d['seconds']:.2f} | {n / d['seconds']:.0f} | ×{base / d['seconds']:.2f} "
            f"| {d['examined']} examined, {d['planned']} planned, round complete: {d['complete']} |"
        )
    slow = m["dry_run_latency"]
    for c, d in slow.items():
        lines.append(
            f"| dry run, +{m['latency_ms']:g} ms per GCS request | {c} | {d['seconds']:.2f} "
            f"| {n / d['seconds']:.0f} | ×{slow[1]['seconds'] / d['seconds']:.2f} (vs 1 with latency) "
            f"| {d['examined']} examined, {d['planned']} planned |"
        )
    real, steady = m["real"], m["steady"]
    acts = ", ".join(f"{k} {v}" for k, v in real["actions"].items())
    lines.append(
        f"| real | 8 | {real['seconds']:.2f} | {n / real['seconds']:.0f} | ×{base / real['seconds']:.2f} "
        f"| {real['examined']} examined; {acts}; errors {real['errors']} |"
    )
    lines.append(
        f"| steady state | 8 | {steady['seconds']:.2f} | {n / steady['seconds']:.0f} "
        f"| ×{base / steady['seconds']:.2f} | {steady['examined']} examined, {steady['actions']} actions |"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> Any:
    """For a ``bench`` runner that collects ``bench.common.Section`` objects."""
    from bench.common import Section

    started = time.monotonic()
    m = measure(getattr(args, "ledgers", 1000), getattr(args, "gcs_latency_ms", 20.0))
    real = m["real"]["seconds"]
    slow = m["dry_run_latency"]
    headline = [
        (
            "reconcile pass, 1,000 ledgers (120 repairs)",
            f"{real:.1f} s",
            f"read path with +{m['latency_ms']:g} ms per GCS request: {slow[8]['seconds']:.1f} s at "
            f"concurrency 8 vs {slow[1]['seconds']:.1f} s at 1",
        )
    ]
    return Section(
        "reconcile",
        "Reconcile: one pass over 1,000 ledgers",
        render(m),
        headline,
        data=m,
        seconds=time.monotonic() - started,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=1000)
    parser.add_argument(
        "--gcs-latency-ms",
        type=float,
        default=20.0,
        help="latency added to each storage request in the second set of dry runs",
    )
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = parser.parse_args(argv)
    m = measure(args.ledgers, args.gcs_latency_ms)
    print(render(m))
    if args.json:
        print(json.dumps(m, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
