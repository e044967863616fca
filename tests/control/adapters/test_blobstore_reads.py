"""Reads that overlap writes, on a GCS stand-in as strict as GCS about generations."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from rlpipe.control.adapters import blobstore
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.runs.record import RunRecord, Source
from tests.conftest import Buckets


def _write(store: blobstore.BlobStore, name: str, body: dict[str, Any], generation: int | None = None) -> int:
    data = json.dumps(body).encode()
    return store.create(name, data) if generation is None else store.replace(name, data, generation)  # type: ignore[return-value]


def test_the_stand_in_refuses_a_superseded_generation_like_gcs(buckets: Buckets) -> None:
    store = buckets.store("artifacts")
    first = _write(store, "x.json", {"n": 1})
    _write(store, "x.json", {"n": 2}, first)
    bucket = buckets.client.bucket(buckets.artifacts)

    with pytest.raises(gexc.NotFound):
        bucket.blob("x.json", generation=first).download_as_bytes()
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("x.json").download_as_bytes(if_generation_match=first)


def test_metadata_then_media_tears_on_the_stand_in(buckets: Buckets) -> None:
    # The read BlobStore used to make: metadata, then the generation it named. A write in between
    # makes the second request 404, as on GCS; this is the failure the single download avoids.
    store = buckets.store("artifacts")
    first = _write(store, "run.json", {"n": 1})
    meta = buckets.client.bucket(buckets.artifacts).get_blob("run.json")
    _write(store, "run.json", {"n": 2}, first)
    with pytest.raises((gexc.NotFound, gexc.PreconditionFailed)):
        meta.download_as_bytes(if_generation_match=meta.generation)


def test_a_read_returns_bytes_and_the_generation_they_belong_to_while_a_writer_races(
    buckets: Buckets,
) -> None:
    store = buckets.store("artifacts")
    generation = _write(store, "race.json", {"n": 0})
    written = {generation: 0}
    stop = threading.Event()

    def writer() -> None:
        nonlocal generation
        for n in range(1, 80):
            generation = _write(store, "race.json", {"n": n}, generation)
            written[generation] = n
        stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    reads: list[blobstore.Blob] = []
    while not stop.is_set():
        reads.append(store.read("race.json"))  # never NotFound, however the writes fall
    thread.join()
    assert len(reads) > 5
    for blob in reads:
        assert written[blob.generation] == blob.json()["n"]


def test_a_ledger_read_during_updates_never_reports_a_missing_ledger(buckets: Buckets) -> None:
    ledger = Ledger(buckets.store("state"))
    ledger.claim(RunRecord(run_id="rtear0000001", key="k", source=Source(kind="cli"), request={}))
    done = threading.Event()

    def updater() -> None:
        for i in range(40):
            ledger.note("rtear0000001", f"n{i}", {})
        done.set()

    thread = threading.Thread(target=updater)
    thread.start()
    seen = 0
    while not done.is_set():
        assert ledger.get("rtear0000001") is not None
        seen += 1
    thread.join()
    assert seen > 5


def test_a_read_is_bounded_by_size_before_the_whole_object_arrives(buckets: Buckets) -> None:
    store = buckets.store("requests")
    store.put("big.yaml", b"x" * 5000)
    with pytest.raises(blobstore.TooLarge, match="over 100 bytes"):
        store.read("big.yaml", max_bytes=100)
    store.put("empty.yaml", b"")
    assert store.read("empty.yaml").data == b""
