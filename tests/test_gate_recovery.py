"""A gated run ends `gated` whoever finishes it, and a promote that never started its execution can
be repeated (found in review: a retried round, a failed finish, a lost write response)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.cli.promote import NotPromotable, promote
from rlpipe.control.ledger import GateRecord, RunRecord, Source
from rlpipe.control.orchestrator import ExecutionInfo
from rlpipe.reconcile.rules import execution_failure
from tests.conftest import Buckets


def gated_record(run_id: str = "rgated000001") -> RunRecord:
    r = RunRecord(run_id=run_id, key="k", source=Source(kind="cli"), request={"model": "m"}, state="accepted")
    return r


def test_a_retried_round_whose_train_was_done_can_end_gated() -> None:
    r = gated_record()  # a retry reopened it: accepted; plan went straight to the gate
    r.set_state("gated")
    assert r.terminal


def test_the_reconciler_keeps_the_gates_tag_when_it_finishes_from_a_failed_execution() -> None:
    error = json.dumps(
        {"tags": ["gated"], "message": "gate failed: post mean_reward 0.4 below 0.5", "stage": "gate"}
    )
    info = ExecutionInfo(name="projects/p/locations/l/workflows/w/executions/e", state="FAILED", error=error)
    failure = execution_failure(info, gated_record())
    assert (failure["tag"], failure["stage"]) == ("gated", "gate")


def test_a_promote_whose_start_failed_can_be_repeated_and_starts_once(buckets: Buckets) -> None:
    ledger = buckets.ledger()
    r = gated_record()
    r.state = "gated"
    r.gate = GateRecord(passed=False, reasons=["post mean_reward 0.4000 below min_post_mean_reward 0.5"])
    assert ledger.claim(r)
    started: list[str] = []

    def broken_start(run_id: str) -> Any:
        raise ConnectionError("Workflows unreachable")

    with pytest.raises(ConnectionError):
        promote(ledger, r.run_id, by="alice", reason="reviewed", start=broken_start)
    # The override is recorded, the run is no longer gated, and nothing started: promote again.
    promote(ledger, r.run_id, by="alice", reason="reviewed", start=started.append)
    assert started == [r.run_id]
    record = ledger.get(r.run_id)
    assert (
        record is not None and record.lineage.promoted is not None and record.lineage.promoted.by == "alice"
    )
    # Once an execution is recorded, a further promote is refused.
    record.execution.name = "projects/p/locations/l/workflows/w/executions/e2"

    def set_execution(x: RunRecord) -> str:
        x.execution.name = "projects/p/locations/l/workflows/w/executions/e2"
        return "execution-started"

    ledger.update(r.run_id, set_execution)
    with pytest.raises(NotPromotable, match="training"):
        promote(ledger, r.run_id, by="bob", reason="again", start=started.append)
