"""What we write and answer about control operations: one redaction path, and no echo of a
caller's text (the issue's items 7 and 8)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.control.adapters.identities import WORKFLOW_IDENTITY_ENV
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.stage_http import handle
from rlpipe.core import identity
from tests.conftest import Buckets

PLANTED = "hf_PLANTEDsecretTOKENvalue0123456789abcd"
WORKFLOW = "rlpipe-workflow@my-project.iam.gserviceaccount.com"


def test_a_rounds_reason_and_by_are_written_through_the_one_redacting_writer(buckets: Buckets) -> None:
    """`rlpipe retry --reason/--by` once wrote a token into the requests bucket unmasked; a retry
    now goes to the stage function, and what it records lands in the ledger, masked."""
    from rlpipe.control.lifecycle import retry_rounds
    from rlpipe.core.request import validate_request
    from rlpipe.core.runs.record import Failure, RunRecord, Source
    from tests.conftest import minimal_request

    ledger = buckets.ledger()
    record = RunRecord(
        run_id="rabcdefghijk",
        key="request:rabcdefghijk",
        source=Source(kind="cli"),
        request=validate_request(minimal_request()).model_dump(mode="json"),
        state="failed",
        failure=Failure(tag="permanent", message="exit code 1"),
    )
    assert ledger.claim(record)
    decision = retry_rounds.start_round(
        ledger, "rabcdefghijk", by=PLANTED, reason=f"token is {PLANTED}", from_stage=None, key="call:k"
    )
    assert decision.outcome == "started"
    stored = buckets.store("state").read(ledger.layout("rabcdefghijk").ledger).data.decode()
    assert PLANTED not in stored and "[REDACTED]" in stored
    events = [
        buckets.store("state").read(n).data.decode()
        for n in buckets.store("state").list("runs/rabcdefghijk/")
    ]
    assert not any(PLANTED in e for e in events)
    json.loads(stored)  # still a ledger that reads back


@pytest.mark.parametrize(
    "run_id",
    [f"<script>{PLANTED}</script>", "r" + "a" * 500, "../../etc/passwd", 987654321987, None, "RABCDEFGHIJK"],
)
def test_stage_refuses_a_malformed_run_id_without_echoing_it(
    run_id: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlpipe.control import services

    monkeypatch.setattr(services, "stage_service", lambda log: object())  # never reached
    monkeypatch.setenv(WORKFLOW_IDENTITY_ENV, WORKFLOW)
    body, status = handle(
        {"op": "plan", "run_id": run_id, "execution_id": "e"}, Logger("stage"), caller=WORKFLOW
    )
    assert status == 400
    text = json.dumps(body) + capsys.readouterr().out
    assert str(run_id) not in text or run_id is None
    assert PLANTED not in text


def test_every_run_id_intake_makes_is_well_formed() -> None:
    assert all(identity.is_run_id(identity.run_id_for(f"request:{i}")) for i in range(1000))
