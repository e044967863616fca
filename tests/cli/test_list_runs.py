"""`rlpipe list` reads ledgers, not the bucket: its request count does not grow with checkpoints."""

from __future__ import annotations

from typing import Any

from rlpipe.cli import runs
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.runs.record import RunRecord, Source
from tests.conftest import Buckets


def _counting(client: Any) -> list[str]:
    """Record every HTTP request the storage client sends (its session is a requests.Session)."""
    seen: list[str] = []
    session = client._http
    original = session.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(f"{method} {url}")
        return original(method, url, *args, **kwargs)

    session.request = request
    return seen


def _claim(ledger: Ledger, run_id: str) -> None:
    ledger.claim(RunRecord(run_id=run_id, key=run_id, source=Source(kind="cli"), request={"model": "m"}))


def test_listing_costs_the_same_requests_with_or_without_thousands_of_checkpoint_objects(
    buckets: Buckets,
) -> None:
    store = buckets.store("state")
    ledger = Ledger(store)
    for run_id in ("rlist0000001", "rlist0000002", "rlist0000003"):
        _claim(ledger, run_id)
    seen = _counting(buckets.client)

    before = [r.run_id for r in runs.list_runs(ledger, page_size=2)]
    requests_before = len(seen)
    for i in range(150):
        store.put(f"runs/rlist0000002/trained/rl/checkpoints/actor/{i}/model_params/shard", b"x")
    seen.clear()
    after = [r.run_id for r in runs.list_runs(ledger, page_size=2)]

    assert sorted(before) == sorted(after) == ["rlist0000001", "rlist0000002", "rlist0000003"]
    assert len(seen) == requests_before  # pages of run ids + one GET per ledger, whatever else is there
    assert not [r for r in seen if "checkpoints" in r]


def test_a_rejected_requests_prefix_without_a_ledger_is_skipped(buckets: Buckets) -> None:
    store = buckets.store("state")
    ledger = Ledger(store)
    _claim(ledger, "rlist0000009")
    store.put("runs/rrejected0001/error.json", b"{}")
    assert [r.run_id for r in runs.list_runs(ledger)] == ["rlist0000009"]
