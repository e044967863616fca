"""What we write and answer about control operations: one redaction path, and no echo of a
caller's text (the issue's items 7 and 8)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.control.logs import Logger
from rlpipe.control.settings import Settings
from rlpipe.control.stage_http import handle
from rlpipe.core import identity
from tests.conftest import Buckets

PLANTED = "hf_PLANTEDsecretTOKENvalue0123456789abcd"


def test_a_retry_document_is_written_through_the_one_redacting_writer(buckets: Buckets) -> None:
    """`rlpipe retry --reason/--by` once wrote a token into the requests bucket unmasked."""
    from rlpipe.cli.retry import submit_document
    from rlpipe.control import retry

    settings = Settings(requests_bucket=buckets.requests, project="rlpipe-test")
    doc = retry.document("rabcdefghijk", reason=f"token is {PLANTED}", from_stage=None, by=PLANTED)
    where, _key = submit_document(settings, doc, "rabcdefghijk", storage_client=buckets.client)
    name = where.split("/", 3)[3]
    stored = buckets.client.bucket(buckets.requests).blob(name).download_as_bytes().decode()
    assert PLANTED not in stored and "[REDACTED]" in stored
    json.loads(stored)  # still a document intake can read


@pytest.mark.parametrize(
    "run_id",
    [f"<script>{PLANTED}</script>", "r" + "a" * 500, "../../etc/passwd", 987654321987, None, "RABCDEFGHIJK"],
)
def test_stage_refuses_a_malformed_run_id_without_echoing_it(
    run_id: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlpipe.control import services

    monkeypatch.setattr(services, "stage_service", lambda log: object())  # never reached
    body, status = handle({"op": "plan", "run_id": run_id, "execution_id": "e"}, Logger("stage"))
    assert status == 400
    text = json.dumps(body) + capsys.readouterr().out
    assert str(run_id) not in text or run_id is None
    assert PLANTED not in text


def test_every_run_id_intake_makes_is_well_formed() -> None:
    assert all(identity.is_run_id(identity.run_id_for(f"request:{i}")) for i in range(1000))
