"""Every log line is one JSON object with run_id, stage and attempt, and never carries a secret."""

from __future__ import annotations

import io
import json
import logging

from rlpipe.control.adapters.logs import JsonFormatter, Logger

TOKEN = "hf_" + "Z" * 34


def test_lines_are_json_with_run_context_and_no_token() -> None:
    out = io.StringIO()
    log = Logger("stage", out).bind(run_id="r1", stage="train", attempt=2)
    log.warning(
        f"auth failed with {TOKEN}",
        headers={"Authorization": "Bearer abc.def.ghi.jkl.mno.pqr"},
        nested=[{"hf_token": TOKEN}],
        tokenizer_path="google/x",
    )
    record = json.loads(out.getvalue())
    assert (record["run_id"], record["stage"], record["attempt"], record["severity"]) == (
        "r1",
        "train",
        2,
        "WARNING",
    )
    assert TOKEN not in out.getvalue() and "abc.def" not in out.getvalue()
    assert record["tokenizer_path"] == "google/x", "only secret-looking fields are masked"


def test_stdlib_records_use_the_same_format() -> None:
    record = logging.LogRecord(
        "rlpipe.cluster", logging.WARNING, __file__, 1, "retry %s with %s", ("get", TOKEN), None
    )
    line = json.loads(JsonFormatter().format(record))
    assert (
        line["component"] == "rlpipe.cluster"
        and TOKEN not in line["message"]
        and "retry get" in line["message"]
    )
