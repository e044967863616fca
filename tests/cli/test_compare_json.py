"""`rlpipe compare --json`: the page's numbers as data, held to the schema docs/cli.md documents."""

from __future__ import annotations

import argparse
import json
from typing import Any

import jsonschema
import pytest

from rlpipe.cli import compare_command
from rlpipe.core.runs.record import RunRecord
from tests.report.test_compare import FAST, GCP, RUN, SLOW, runs

_METRIC = {
    "type": "object",
    "required": ["pre", "post"],
    "properties": {"pre": {"type": ["number", "null"]}, "post": {"type": ["number", "null"]}},
    "additionalProperties": False,
}
# docs/cli.md, "compare --json"
COMPARE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["runs", "differences", "selected", "reason", "early_stop"],
    "additionalProperties": False,
    "properties": {
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "run_id",
                    "state",
                    "model",
                    "selected",
                    "metrics",
                    "chip_hours",
                    "cost",
                    "stopped",
                ],
                "additionalProperties": False,
                "properties": {
                    "run_id": {"type": "string"},
                    "state": {"type": "string"},
                    "model": {"type": "string"},
                    "selected": {"type": "boolean"},
                    "metrics": {
                        "type": "object",
                        "required": ["mean_reward", "accuracy", "format_accuracy"],
                        "additionalProperties": _METRIC,
                    },
                    "chip_hours": {"type": "number", "minimum": 0},
                    "cost": {"type": "string"},
                    "stopped": {
                        "type": ["object", "null"],
                        "required": ["rule", "step", "trained_to", "reason"],
                        "additionalProperties": False,
                        "properties": {
                            "rule": {"enum": ["median", "asha", None]},
                            "step": {"type": ["integer", "null"]},
                            "trained_to": {"type": ["integer", "null"]},
                            "reason": {"type": "string"},
                        },
                    },
                },
            },
        },
        "differences": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "values"],
                "additionalProperties": False,
                "properties": {
                    "key": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "selected": {"type": ["string", "null"]},
        "reason": {"type": ["string", "null"]},
        "early_stop": {
            "type": ["object", "null"],
            "required": ["chip_hours_used", "chip_hours_without_estimate", "not_estimated", "how"],
            "additionalProperties": False,
            "properties": {
                "chip_hours_used": {"type": "number", "minimum": 0},
                "chip_hours_without_estimate": {"type": ["number", "null"], "minimum": 0},
                "not_estimated": {"type": "array", "items": {"type": "string"}},
                "how": {"type": "string"},
            },
        },
    },
}


def test_compare_json_has_every_runs_numbers_and_only_the_differing_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    records = {r["run_id"]: RunRecord.model_validate(r) for r in runs()}

    class FakeLedger:
        def get(self, run_id: str) -> Any:
            return records.get(run_id)

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    compare_command.register(sub, settings=lambda: GCP, ledger=lambda settings: FakeLedger())
    args = parser.parse_args(["compare", RUN, FAST, SLOW, "--json", "--select", FAST, "--reason", "best"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, COMPARE_SCHEMA)
    assert [r["run_id"] for r in out["runs"]] == [RUN, FAST, SLOW]
    assert [r["selected"] for r in out["runs"]] == [False, True, False]
    assert (out["selected"], out["reason"]) == (FAST, "best")
    for run in out["runs"]:
        results = records[run["run_id"]].results
        assert run["metrics"]["mean_reward"] == {
            "pre": results["pre"]["mean_reward"],
            "post": results["post"]["mean_reward"],
        }
    keys = {d["key"] for d in out["differences"]}
    assert "training.learning_rate" in keys and "model" not in keys
    lr = next(d for d in out["differences"] if d["key"] == "training.learning_rate")
    assert lr["values"] == ["2e-05", "5e-05", "1e-06"]
