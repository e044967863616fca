"""A gated run ends `gated` whoever finishes it, and a promote that never started its execution can
be repeated (found in review: a retried round, a failed finish, a lost write response)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.control.adapters.orchestrator import ExecutionInfo
from rlpipe.control.lifecycle.promotion import NotPromotable, promote
from rlpipe.core.runs.record import GateRecord, RunRecord, Source
from rlpipe.reconcile.rules import execution_failure
from tests.conftest import Buckets
from tests.harness.id_tokens import Issuer


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

    ledger.edit(r.run_id, set_execution)
    with pytest.raises(NotPromotable, match="training"):
        promote(ledger, r.run_id, by="bob", reason="again", start=started.append)


@pytest.fixture
def stage_app(
    buckets: Buckets, executions: Any, monkeypatch: pytest.MonkeyPatch, signed_calls: Issuer
) -> Any:
    from functions_framework import create_app

    from rlpipe.control import services
    from tests.conftest import ROOT

    for key, value in buckets.env(RLPIPE_WORKFLOWS_ENDPOINT=executions.target).items():
        monkeypatch.setenv(key, value)
    services.reset()
    yield create_app(
        target="stage", source=str(ROOT / "functions" / "main.py"), signature_type="http"
    ).test_client()
    services.reset()


def test_promote_is_decided_by_the_stage_function_not_by_a_ledger_write_from_the_cli(
    buckets: Buckets, executions: Any, stage_app: Any, signed_calls: Issuer
) -> None:
    """Operators hold only read access to the state bucket (iam.tf); `rlpipe promote` asks the
    stage function, which records the override and starts the run's next execution once."""
    from rlpipe.core.request import validate_request
    from tests.conftest import minimal_request

    ledger = buckets.ledger()
    r = gated_record("rgated000002")
    r.request = validate_request(minimal_request()).model_dump(mode="json")
    r.state = "gated"
    r.gate = GateRecord(passed=False, reasons=["post mean_reward 0.4000 below min_post_mean_reward 0.5"])
    assert ledger.claim(r)

    def call(**body: Any) -> Any:
        token = signed_calls.token("alice@example.com")  # her own account, listed in var.stage_invokers
        return stage_app.post(
            "/",
            json={"op": "promote", "run_id": "rgated000002", **body},
            headers={"X-Serverless-Authorization": f"Bearer {token}"},
        )

    assert call(by="", reason="reviewed").status_code == 400
    assert call(by="alice", reason="x" * 5000).status_code == 400
    answer = call(by="alice", reason="reviewed by the team")
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["by"] == "alice" and answer.get_json()["state"] == "training"
    record = ledger.get("rgated000002")
    assert record is not None and record.lineage.promoted is not None
    assert record.lineage.promoted.reason == "reviewed by the team"
    assert record.lineage.promoted.caller == "alice@example.com", "who Google says called"
    assert len(executions.creates()) == 1
    refused = call(by="bob", reason="again")  # started, no longer gated: refused with the reason
    assert refused.status_code == 422 and "only a gated run" in json.dumps(refused.get_json())
    assert len(executions.creates()) == 1
