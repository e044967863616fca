"""3. The ``artifact_event`` fast path: how cheaply a non-signal object is dismissed.

Every object a checkpoint writes in the artifacts bucket fires ``artifact_event``; all but a
handful are not completion signals and must cost nothing. The names are generated like the
object list of a 26B MaxText checkpoint (``checkpoint_names``): the conversion's step 0 in the
conversion cache and one RL training step (``model_params`` + ``optimizer_state``), Orbax without
OCDBT/zarr3, i.e. one directory per array with ``.zarray`` and zarr v2 chunk files (``0``,
``0.0``, ``3.0.0`` ... one per shard), ``_METADATA``, ``_sharding``, ``array_metadatas/process_N``,
``_CHECKPOINT_METADATA`` and the ``commit_success.txt`` files (the signals, left out of the rates).
The tree's shape (layers, experts, the sharding grid) is an approximation of Gemma 4 26B A4B on a
v6e-32, not its exact parameter list: what matters here is the names' form and volume.

Measured in-process, per event, and compared with the time to build the CloudEvent alone (what
any delivery of the object costs before the function runs):

* ``match_artifact(name)``: the library's decision;
* the real function: ``functions_framework.create_app(target="artifact_event", ...)``'s Flask test
  client receiving each event as a binary-mode CloudEvent (headers + body built beforehand).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.common import ROOT, Section, say, secs, table

BUCKET = "rlpipe-artifacts"
LAYERS = 30  # decoder layers of the approximated tree
EXPERTS_SHARDS = 32  # an expert weight split over the v6e-32's 32 chips
HEAD_SHARDS = 8


def _array_tree(prefix: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(array path, chunk grid) for one parameter tree, scan_layers=false (one array per layer)."""
    yield f"{prefix}token_embedder.embedding", (EXPERTS_SHARDS, 1)
    yield f"{prefix}decoder.decoder_norm.scale", (1,)
    for i in range(LAYERS):
        layer = f"{prefix}decoder.layers_{i}."
        for norm in ("pre_self_attention_norm", "post_self_attention_norm", "pre_ffw_norm", "post_ffw_norm"):
            yield f"{layer}{norm}.scale", (1,)
        for proj in ("query", "key", "value", "out"):
            yield f"{layer}self_attention.{proj}.kernel", (1, HEAD_SHARDS, 1)
        yield f"{layer}mlp.gate.kernel", (1, 1)  # the router
        for w in ("wi_0", "wi_1", "wo"):
            yield f"{layer}mlp.{w}", (EXPERTS_SHARDS, 1, 1)  # experts × embed × mlp
            yield f"{layer}mlp.shared_experts.{w}.kernel", (1, HEAD_SHARDS)


def _chunks(grid: tuple[int, ...]) -> Iterator[str]:
    """zarr v2 chunk keys: '0', '0.0', '31.0.0' ..."""

    def walk(dims: tuple[int, ...]) -> Iterator[list[int]]:
        if not dims:
            yield []
            return
        for i in range(dims[0]):
            for rest in walk(dims[1:]):
                yield [i, *rest]

    for index in walk(grid):
        yield ".".join(str(i) for i in index)


def _pytree(base: str, arrays: list[tuple[str, tuple[int, ...]]], *, single_chunk: bool) -> list[str]:
    names = []
    for array, grid in arrays:
        names.append(f"{base}{array}/.zarray")
        shape = tuple(1 for _ in grid) if single_chunk else grid  # the CPU conversion writes one shard
        names += [f"{base}{array}/{chunk}" for chunk in _chunks(shape)]
    names += [f"{base}_sharding", f"{base}array_metadatas/process_0", f"{base}_METADATA"]
    return names


def checkpoint_names(
    run_id: str = "rbenchfastpth", cache_key: str = "k" + "0" * 31, step: int = 50
) -> list[str]:
    """Every object name of one conversion (step 0) and one RL checkpoint step, in write order."""
    conv = f"cache/maxtext/{cache_key}/{run_id}-a1/0/"
    names = _pytree(f"{conv}items/", list(_array_tree("params.params.")), single_chunk=True)
    names += [f"{conv}items/commit_success.txt", f"{conv}_CHECKPOINT_METADATA", f"{conv}commit_success.txt"]
    actor = f"runs/{run_id}/trained/rl/checkpoints/actor/{step}/"
    params = list(_array_tree(""))
    names += _pytree(f"{actor}model_params/", params, single_chunk=False)
    optimizer = [
        (f"opt_state.{i}.{moment}.{a}", g) for i, moment in ((0, "mu"), (0, "nu")) for a, g in params
    ]
    names += _pytree(f"{actor}optimizer_state/", optimizer, single_chunk=False)
    names += [
        f"runs/{run_id}/trained/rl/tensorboard/events.out.tfevents.{1796000000 + i}.pathways-head"
        for i in range(3)
    ]
    names += [f"{actor}_CHECKPOINT_METADATA", f"{actor}commit_success.txt"]
    return names


def _per_call(fn: Callable[[], int], min_seconds: float) -> tuple[float, int]:
    """Seconds per item: run ``fn`` (which processes n items and returns n) until min_seconds pass."""
    items, started = 0, time.perf_counter()
    while True:
        items += fn()
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return elapsed / items, items


def run(args: argparse.Namespace) -> Section:
    from cloudevents.conversion import to_binary
    from functions_framework import create_app

    from rlpipe.control.adapters.events import match_artifact
    from rlpipe.local.shim import storage_event

    started = time.monotonic()
    names = checkpoint_names()
    signals = [n for n in names if match_artifact(n) is not None]
    plain = [n for n in names if match_artifact(n) is None]
    say(
        f"fast path: {len(names)} object names ({len(signals)} signals), {args.fastpath_events} through the function"
    )

    def objects(sample: list[str]) -> list[dict[str, Any]]:
        return [
            {
                "name": n,
                "bucket": BUCKET,
                "generation": str(1796000000000000 + i),
                "size": "8",
                "contentType": "application/octet-stream",
            }
            for i, n in enumerate(sample)
        ]

    all_objects = objects(plain)
    sample = plain[:: max(1, len(plain) // args.fastpath_events)][: args.fastpath_events]
    sample_objects = objects(sample)
    min_s = args.fastpath_seconds

    def match_all() -> int:
        for name in plain:
            match_artifact(name)
        return len(plain)

    def build_all() -> int:
        for i, obj in enumerate(all_objects):
            storage_event(BUCKET, obj, f"e{i}")
        return len(all_objects)

    def build_binary_all() -> int:
        for i, obj in enumerate(sample_objects):
            to_binary(storage_event(BUCKET, obj, f"e{i}"))
        return len(sample_objects)

    app = create_app(
        target="artifact_event", source=str(ROOT / "functions" / "main.py"), signature_type="cloudevent"
    )
    client = app.test_client()
    prepared = [to_binary(storage_event(BUCKET, obj, f"e{i}")) for i, obj in enumerate(sample_objects)]
    before_modules = set(sys.modules)
    statuses: list[int] = []

    def post_all() -> int:
        for headers, body in prepared:
            statuses.append(client.post("/", headers=headers, data=body).status_code)
        return len(prepared)

    # Three rounds each, interleaved; the median round is reported.
    rounds: dict[str, list[float]] = {"match": [], "build": [], "build+binary": [], "function": []}
    for _ in range(3):
        rounds["match"].append(_per_call(match_all, min_s)[0])
        rounds["build"].append(_per_call(build_all, min_s)[0])
        rounds["build+binary"].append(_per_call(build_binary_all, min_s)[0])
        rounds["function"].append(_per_call(post_all, min_s)[0])
    per = {k: statistics.median(v) for k, v in rounds.items()}
    new_modules = sorted(m for m in set(sys.modules) - before_modules if m.startswith(("rlpipe", "google")))
    ok = set(statuses) == {200} and not new_modules

    base = per["build"]
    rows = [
        [
            "build the CloudEvent (`CloudEvent(attributes, data)`, as the shim does): **baseline**",
            secs(base),
            f"{1 / base:,.0f}",
            "×1",
        ],
        [
            "`match_artifact(name)` alone",
            secs(per["match"]),
            f"{1 / per['match']:,.0f}",
            f"×{per['match'] / base:.3g}",
        ],
        [
            "build + serialize to binary mode (`to_binary`)",
            secs(per["build+binary"]),
            f"{1 / per['build+binary']:,.0f}",
            f"×{per['build+binary'] / base:.3g}",
        ],
        [
            "the real function: test client POST of a prepared binary CloudEvent → `artifact_event`",
            secs(per["function"]),
            f"{1 / per['function']:,.0f}",
            f"×{per['function'] / base:.3g}",
        ],
    ]
    kinds = {
        "zarr chunks": sum(1 for n in plain if n.rsplit("/", 1)[-1].replace(".", "").isdigit()),
        ".zarray": sum(1 for n in plain if n.endswith("/.zarray")),
        "_METADATA / _sharding / array_metadatas / _CHECKPOINT_METADATA": sum(
            1 for n in plain if n.endswith(("_METADATA", "_sharding")) or "/array_metadatas/" in n
        ),
        "item commit_success.txt (not a signal)": sum(1 for n in plain if n.endswith("commit_success.txt")),
        "other (tensorboard)": sum(1 for n in plain if "/tensorboard/" in n),
    }
    body = (
        f"{len(names):,} object names for one conversion + one training checkpoint step ({len(signals)} of them "
        f"signals: {', '.join(f'`{s.split(chr(47), 3)[-1]}`' for s in signals)}); the rates use the "
        f"{len(plain):,} non-signal names ({', '.join(f'{v:,} {k}' for k, v in kinds.items())}). "
        f"Example: `{plain[len(plain) // 2]}`.\n\n"
        f"Per event, median of 3 rounds of ≥ {min_s:g} s each; the function row posts {len(sample):,} names "
        "(every n-th), the other rows use all of them.\n\n"
        + table(["per non-signal object", "time per event", "events / s", "vs building the CloudEvent"], rows)
        + f"\n\nChecks: every POST answered 200: {set(statuses) == {200}}; modules the function imported while "
        f"handling them (rlpipe/google): {new_modules or 'none'}. A training checkpoint of this size fires "
        f"~{len(plain):,} events; at the function row's rate one instance dismisses them in "
        f"{secs(len(plain) * per['function'])} of CPU, of which `match_artifact` is {secs(len(plain) * per['match'])}."
    )
    headline = [
        (
            "`artifact_event` per non-signal object (in-process, real function)",
            f"{secs(per['function'])} ({1 / per['function']:,.0f}/s)",
            f"×{per['function'] / base:.3g} the cost of building the CloudEvent; `match_artifact` alone "
            f"{secs(per['match'])} (×{per['match'] / base:.2g})",
        ),
    ]
    data = {
        "names": len(names),
        "signals": signals,
        "non_signal": len(plain),
        "sample": len(sample),
        "per_event_seconds": per,
        "rounds": rounds,
        "kinds": kinds,
        "new_modules": new_modules,
    }
    return Section(
        "fastpath",
        "3. `artifact_event` fast path",
        body,
        headline,
        data=data,
        seconds=time.monotonic() - started,
        ok=ok,
    )


if __name__ == "__main__":
    print(run(argparse.Namespace(fastpath_events=3000, fastpath_seconds=0.5)).body)
