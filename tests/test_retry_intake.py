"""Retry control documents through the real intake functions (functions-framework processes, real
CloudEvents, fake-gcs-server, the real ExecutionsClient against a recording Executions server):
one round and one execution per delivery key, and a refused or malformed retry is acknowledged
(never a 5xx), logged and recorded."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlpipe.control.ledger import Failure, RunRecord, Source
from rlpipe.core.request import validate_request
from tests.conftest import Buckets, minimal_request
from tests.harness.functions import FunctionServer, gcs_event, post, pubsub_event
from tests.test_intake import PLANTED, TOPIC, _upload, functions  # noqa: F401


def _failed_run(buckets: Buckets, run_id: str, state: str = "failed") -> str:
    record = RunRecord(
        run_id=run_id,
        key=f"request:{run_id}",
        source=Source(kind="cli"),
        request=validate_request(minimal_request()).model_dump(mode="json"),
        state=state,  # type: ignore[arg-type]
    )
    record.execution.name = "projects/rlpipe-test/locations/l/workflows/w/executions/round-1"
    if state == "failed":
        record.failure = Failure(tag="permanent", message="exit code 1", stage="train", attempt=3)
    assert buckets.ledger().claim(record)
    return run_id


def _doc(run_id: str, **fields: Any) -> bytes:
    return json.dumps({"retry": {"run_id": run_id, "reason": "the node pool is fixed", **fields}}).encode()


def _logs(server: FunctionServer) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.logs().splitlines() if line.startswith("{")]


def test_a_retry_file_delivered_many_times_makes_one_round_and_one_execution(
    buckets: Buckets,
    executions: Any,
    functions: dict[str, FunctionServer],
) -> None:
    run_id = _failed_run(buckets, "rretryin0001")
    generation, size = _upload(
        buckets, "requests/retry-1.json", _doc(run_id, **{"from": "train", "by": "al"})
    )
    event = gcs_event(buckets.requests, "requests/retry-1.json", generation, size)
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: post(functions["object"].url, event).status_code, range(8)))
    assert set(codes) == {200}, functions["object"].logs()[-3000:]
    assert executions.creates() == [{"run_id": run_id}], "one execution for one retry delivery"
    record = buckets.ledger().get(run_id)
    assert record is not None and record.state == "accepted" and record.round == 2
    [round_] = record.rounds
    assert (round_.by, round_.from_stage, round_.reason) == ("al", "train", "the node pool is fixed")
    assert round_.key == f"gcs:{buckets.requests}/requests/retry-1.json#{generation}"
    assert round_.previous_failure is not None and round_.previous_failure["stage"] == "train"
    assert record.execution.name and record.execution.name.endswith("/executions/exec-1")
    assert record.key == f"request:{run_id}", "the same run, not a new request"
    assert buckets.ledger().list_run_ids() == [run_id]


def test_a_retry_message_redelivered_makes_one_round_and_a_new_message_another(
    buckets: Buckets,
    executions: Any,
    functions: dict[str, FunctionServer],
) -> None:
    run_id = _failed_run(buckets, "rretryin0002", state="cancelled")
    event = pubsub_event(TOPIC, _doc(run_id), "m-retry-1")
    assert post(functions["message"].url, event).status_code == 200
    assert post(functions["message"].url, event).status_code == 200  # Pub/Sub redelivers
    assert len(executions.creates()) == 1
    record = buckets.ledger().get(run_id)
    assert record is not None and record.round == 2
    assert record.rounds[0].by == f"{TOPIC} message m-retry-1", "who asked: where it came from"
    assert record.rounds[0].key == f"pubsub:{TOPIC}/m-retry-1"
    # The round is now running: a second, different retry is refused, not a second execution.
    assert post(functions["message"].url, pubsub_event(TOPIC, _doc(run_id), "m-retry-2")).status_code == 200
    assert len(executions.creates()) == 1 and buckets.ledger().get(run_id).round == 2  # type: ignore[union-attr]
    [note] = [e for e in buckets.ledger().history(run_id) if e["event"] == "retry-refused"]
    assert "still running" in note["reason"] and note["key"] == f"pubsub:{TOPIC}/m-retry-2"


def test_refused_and_malformed_retries_are_acknowledged_logged_and_noted(
    buckets: Buckets,
    executions: Any,
    functions: dict[str, FunctionServer],
) -> None:
    done = _failed_run(buckets, "rretryin0003", state="succeeded")
    cases = {
        "requests/succeeded.json": _doc(done, reason=f"try again {PLANTED}"),
        "requests/no-run.json": _doc("rnosuchrun99"),
        "requests/no-reason.yaml": f"retry:\n  run_id: {done}\n".encode(),
        "requests/bad-from.json": _doc(done, **{"from": "everything"}),
    }
    for name, data in cases.items():
        generation, size = _upload(buckets, name, data)
        event = gcs_event(buckets.requests, name, generation, size)
        assert post(functions["object"].url, event).status_code == 200, functions["object"].logs()[-2000:]
    assert executions.creates() == []
    record = buckets.ledger().get(done)
    assert record is not None and record.state == "succeeded" and record.round == 1
    notes = [e for e in buckets.ledger().history(done) if e["event"] == "retry-refused"]
    assert len(notes) == 3  # the two malformed ones name this run, too
    assert "nothing to retry" in notes[0]["reason"]
    assert "retry.reason is required" in notes[1]["reason"]
    assert "retry.from must be one of" in notes[2]["reason"]
    logs = _logs(functions["object"])
    refused = [
        rec for rec in logs if rec["message"] in ("retry refused", "retry document malformed; ignored")
    ]
    assert len(refused) == 4
    assert any("no run rnosuchrun99" in rec["reason"] for rec in refused)
    assert PLANTED not in functions["object"].logs(), "secrets stay out of the logs"
    assert not any(n.endswith("/error.json") for n in buckets.store("state").list("runs/"))
