"""Retry authority, through the real functions (functions-framework processes, real CloudEvents and
HTTP, fake-gcs-server, the real ExecutionsClient against a recording Executions server):

- a retry goes through the stage function, whose callers Cloud Run checks; the same key sent
  many times makes one round and one execution, and the identity on the call is recorded;
- a retry document dropped in the requests bucket or published on the requests topic (which anyone
  who may submit can do) starts nothing: intake rejects it with a record saying where retries go.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Failure, RunRecord, Source
from tests.conftest import Buckets, minimal_request
from tests.control.lifecycle.test_intake import (  # noqa: F401  (fixtures: the intake processes, shared)
    PLANTED,
    TOPIC,
    _error_records,
    _upload,
    buckets,
    executions,
    functions,
    module_buckets,
    module_executions,
    module_functions,
)
from tests.harness.functions import FunctionServer, gcs_event, post, pubsub_event
from tests.harness.id_tokens import STAGE_URL, Issuer

KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def stage(buckets: Buckets, executions: Any, tmp_path: Path, token_issuer: Issuer) -> Iterator[SignedStage]:
    env = buckets.env(
        RLPIPE_WORKFLOWS_ENDPOINT=executions.target,
        RLPIPE_HF_TOKEN=PLANTED,
        RLPIPE_STAGE_AUDIENCE=STAGE_URL,
        RLPIPE_ID_TOKEN_CERTS_URL=token_issuer.certs_url,
    )
    server = FunctionServer("stage", "http", env, tmp_path).start()
    yield SignedStage(server, token_issuer)
    server.stop()


@dataclass(frozen=True)
class SignedStage:
    """The stage function, and the issuer whose tokens it verifies."""

    server: FunctionServer
    issuer: Issuer

    @property
    def url(self) -> str:
        return self.server.url

    def logs(self) -> str:
        return self.server.logs()


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


def _retry(stage: SignedStage, run_id: str, key: str = KEY, **fields: Any) -> requests.Response:
    body = {"op": "retry", "run_id": run_id, "key": key, "reason": "the node pool is fixed", **fields}
    headers = {"Authorization": f"Bearer {stage.issuer.token('rlpipe-operator@p.iam.gserviceaccount.com')}"}
    return requests.post(stage.url, json=body, headers=headers, timeout=30)


def test_one_key_sent_many_times_makes_one_round_and_one_execution_and_records_the_caller(
    buckets: Buckets, executions: Any, stage: SignedStage
) -> None:
    run_id = _failed_run(buckets, "rretryin0001")
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: _retry(stage, run_id, **{"from": "train", "by": "al"}), range(6)))
    assert {a.status_code for a in answers} == {200}, stage.logs()[-3000:]
    assert sorted(a.json()["outcome"] for a in answers) == ["duplicate"] * 5 + ["started"]
    assert {a.json()["round"] for a in answers} == {2}
    assert executions.creates() == [{"run_id": run_id}], "one execution for one retry"
    record = buckets.ledger().get(run_id)
    assert record is not None and record.state == "accepted" and record.round == 2
    [round_] = record.rounds
    assert (round_.by, round_.from_stage, round_.reason) == ("al", "train", "the node pool is fixed")
    assert round_.caller == "rlpipe-operator@p.iam.gserviceaccount.com", "what Google verified"
    assert round_.key == f"call:{KEY}"
    assert round_.previous_failure is not None and round_.previous_failure["stage"] == "train"
    assert record.key == f"request:{run_id}", "the same run, not a new request"

    # The round is running now: another key is refused with the reason, and starts nothing.
    again = _retry(stage, run_id, key="f" * 32)
    assert again.status_code == 422 and "still running" in again.json()["error"]["message"]
    assert len(executions.creates()) == 1


def test_malformed_and_refused_calls_say_what_to_fix_without_echoing(
    buckets: Buckets, executions: Any, stage: SignedStage
) -> None:
    done = _failed_run(buckets, "rretryin0003", state="succeeded")
    cases = [
        (done, {"key": "short"}, 400, "key must be"),
        (done, {"reason": " "}, 400, "reason is required"),
        (done, {"from": "everything"}, 400, "from must be one of"),
        (done, {"extra": PLANTED}, 400, "unknown field"),
        (done, {}, 422, "nothing to retry"),
        ("rnosuchrun99", {}, 422, "no run rnosuchrun99"),
        (f"r{PLANTED}", {}, 400, "run_id must be a run id"),
    ]
    for run_id, fields, code, words in cases:
        answer = _retry(stage, run_id, **fields)
        assert answer.status_code == code and words in answer.json()["error"]["message"], answer.text
        assert PLANTED not in answer.text
    assert executions.creates() == []
    assert PLANTED not in stage.logs(), "secrets stay out of the logs"
    record = buckets.ledger().get(done)
    assert record is not None and record.round == 1


def test_a_retry_document_dropped_or_published_is_rejected_and_starts_nothing(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    run_id = _failed_run(buckets, "rretryin0002", state="cancelled")
    doc = json.dumps({"retry": {"run_id": run_id, "reason": "anyone may drop a file"}}).encode()
    generation, size = _upload(buckets, "requests/retry-1.json", doc)
    assert (
        post(
            functions["object"].url, gcs_event(buckets.requests, "requests/retry-1.json", generation, size)
        ).status_code
        == 200
    )
    assert post(functions["message"].url, pubsub_event(TOPIC, doc, "m-retry-1")).status_code == 200
    assert executions.creates() == []
    record = buckets.ledger().get(run_id)
    assert record is not None and record.state == "cancelled" and record.round == 1 and not record.rounds
    errors = _error_records(buckets)
    assert len(errors) == 2
    for error in errors:
        assert "rlpipe retry" in error["message"] and "stage function" in error["message"]
