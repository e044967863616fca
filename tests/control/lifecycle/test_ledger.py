"""The run ledger on a real fake-gcs-server: one claim, compare-and-swap, append-only history."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlpipe.control.adapters import blobstore, interleave
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.runs.record import IllegalTransition, RunRecord, Source
from tests.conftest import Buckets


def _record(run_id: str = "rledger00001") -> RunRecord:
    return RunRecord(
        run_id=run_id, key=f"request:{run_id}", source=Source(kind="cli"), request={"model": "m"}
    )


def test_claim_succeeds_exactly_once_under_concurrency(buckets: Buckets) -> None:
    ledger = Ledger(buckets.store("state"))
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: ledger.claim(_record()), range(32)))
    assert results.count(True) == 1
    history = ledger.history("rledger00001")
    assert [e["event"] for e in history] == ["accepted"]


def test_concurrent_updates_are_never_lost(buckets: Buckets) -> None:
    ledger = Ledger(buckets.store("state"), sleep=lambda s: None)
    ledger.claim(_record())
    barrier = threading.Barrier(6)

    def add_attempt(i: int) -> None:
        barrier.wait()
        ledger.edit("rledger00001", lambda r: r.callbacks.__setitem__(f"k{i}", str(i)) or f"cb{i}")

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(add_attempt, range(6)))
    record, _ = ledger.load("rledger00001")
    assert record.callbacks == {f"k{i}": str(i) for i in range(6)}, "every CAS writer's change survives"
    assert record.seq == 7
    events = ledger.history("rledger00001")
    assert [e["seq"] for e in events] == list(range(1, 8)), "one history object per successful write"


def test_a_stale_generation_is_refused(buckets: Buckets) -> None:
    store = buckets.store("state")
    ledger = Ledger(store)
    ledger.claim(_record())
    _, generation = ledger.load("rledger00001")
    ledger.edit("rledger00001", lambda r: "touch")
    with pytest.raises(blobstore.PreconditionFailed):
        store.replace(ledger.layout("rledger00001").ledger, b"{}", generation)


def test_illegal_transitions_raise() -> None:
    record = _record()
    record.set_state("converting")
    with pytest.raises(IllegalTransition):
        record.set_state("exporting")  # training was skipped
    record.set_state("failed")
    with pytest.raises(IllegalTransition):
        record.set_state("training")  # terminal is terminal
    cache_hit = _record()
    cache_hit.set_state("training")  # accepted → training is legal when conversion is cached


def test_history_objects_are_never_rewritten(buckets: Buckets) -> None:
    store = buckets.store("state")
    ledger = Ledger(store)
    ledger.claim(_record())
    first = store.read(ledger.layout("rledger00001").event(1, "accepted"))
    ledger._event("rledger00001", 1, "accepted", {"state": "forged"})
    again = store.read(ledger.layout("rledger00001").event(1, "accepted"))
    assert again.generation == first.generation and again.data == first.data


def test_error_record_is_written_once(buckets: Buckets) -> None:
    ledger = Ledger(buckets.store("state"))
    assert ledger.write_error("rerror000001", {"problems": [{"path": "model"}], "message": "bad"})
    assert not ledger.write_error("rerror000001", {"problems": [], "message": "other"})
    assert buckets.store("state").read("runs/rerror000001/error.json").json()["message"] == "bad"


def test_update_hands_back_what_the_written_application_decided_not_a_lost_one(buckets: Buckets) -> None:
    """A compare-and-swap that loses applies the change again to the newer record: the caller gets
    the decision of the application that was written, and only that one's (nothing a lost
    application decided survives, so no caller has to clear what it collected)."""
    ledger = Ledger(buckets.store("state"), sleep=lambda s: None)
    ledger.claim(_record())
    name = ledger.layout("rledger00001").ledger
    seen: list[dict[str, str]] = []

    def another_writer() -> None:  # once: a sibling's write lands between our read and our write
        if not seen:
            data = json.loads(ledger.store.read(name).data)
            data["callbacks"] = {"x": "1"}
            ledger.store.put(name, json.dumps(data).encode())

    def change(r: RunRecord) -> tuple[str | None, dict[str, str]]:
        seen.append(dict(r.callbacks))
        r.callbacks["mine"] = "2"
        return "mine", dict(r.callbacks)

    with interleave.hooked("ledger.update:read", another_writer):
        record, decided = ledger.update("rledger00001", change)
    assert seen == [{}, {"x": "1"}]  # applied twice: the first write lost to the sibling's
    assert decided == {"x": "1", "mine": "2"} == record.callbacks
    assert ledger.get("rledger00001").callbacks == decided  # type: ignore[union-attr]

    # Nothing to do: no write, and the decision still comes back with the record as read.
    unchanged, why = ledger.update("rledger00001", lambda r: (None, f"already {len(r.callbacks)}"))
    assert why == "already 2" and unchanged.seq == record.seq


def test_the_ledger_speaks_only_to_its_storage_door() -> None:
    """Every read and write of the ledger goes through ``BlobStore`` (control/adapters/blobstore.py),
    where the Google client's errors and retries are turned into the door's own: the ledger never
    reaches the client itself, nor imports a Google library."""
    import ast
    from pathlib import Path

    import rlpipe.control.lifecycle.ledger as module

    tree = ast.parse(Path(str(module.__file__)).read_text())
    reached = [
        n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in ("client", "_bucket")
    ]
    imported = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom | ast.Import)
        and any(
            name.startswith("google")
            for name in ([n.module or ""] if isinstance(n, ast.ImportFrom) else [a.name for a in n.names])
        )
    ]
    assert reached == [] and imported == [], (reached, imported)
