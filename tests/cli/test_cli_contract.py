"""The CLI's contract with scripts (docs/cli.md): exit codes and --json schemas, each checked by
running `python -m rlpipe.cli.main` as a subprocess against a real ledger in fake-gcs-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import jsonschema
import pytest

from rlpipe.cli.exit_codes import ExitCode
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Admission, Failure, GateRecord, RunRecord, Source
from tests.conftest import ROOT, Buckets, minimal_request
from tests.harness.cli import run_main
from tests.harness.functions import FunctionServer
from tests.reconcile.test_reconcile_chain import (  # noqa: F401  (fixtures)
    GONE_PREFIX,
    Chain,
    chain_fixture,
    kube_server,
    local_workflows,
)

NULLABLE_STR = {"type": ["string", "null"]}
NULLABLE_NUM = {"type": ["number", "null"]}

# docs/cli.md, "list --json"
LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["runs", "next_page_token"],
    "additionalProperties": False,
    "properties": {
        "next_page_token": NULLABLE_STR,
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "run_id",
                    "state",
                    "stage",
                    "attempt",
                    "created_at",
                    "team",
                    "model",
                    "labels",
                    "post_mean_reward",
                    "reward_change",
                    "terminal",
                ],
                "properties": {
                    "run_id": {"type": "string"},
                    "state": {"type": "string"},
                    "stage": NULLABLE_STR,
                    "attempt": {"type": "integer"},
                    "created_at": {"type": "string"},
                    "team": {"type": "string", "pattern": "^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$"},
                    "model": NULLABLE_STR,
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "post_mean_reward": NULLABLE_NUM,
                    "reward_change": NULLABLE_NUM,
                    "terminal": {"type": "boolean"},
                },
            },
        },
    },
}

POINT = {"type": "object", "additionalProperties": {"type": ["number", "string", "boolean"]}}
NULLABLE_BOOL = {"type": ["boolean", "null"]}
SELECT_RULE: dict[str, Any] = {
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["metric", "direction"],
            "properties": {
                "metric": {"enum": ["post_mean_reward", "reward_gain", "post_accuracy"]},
                "direction": {"enum": ["max", "min"]},
            },
        },
    ]
}

# docs/plan.md, `sweep` of `plan --json` (present only for a request with a sweep)
PLAN_SWEEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["size", "max_parallel", "select", "provisioning", "children", "total"],
    "properties": {
        "size": {"type": "integer", "minimum": 1},
        "max_parallel": {"type": "integer", "minimum": 1},
        "select": SELECT_RULE,
        "provisioning": {"enum": ["reservation", "on-demand", "spot", "flex-start"]},
        "children": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["index", "point", "overrides", "final_step", "chip_hours", "cost"],
                "properties": {
                    "index": {"type": "integer"},
                    "point": POINT,
                    "overrides": {"type": "string"},
                    "run_id": {"type": "string", "pattern": "^r[a-z2-7]{11}$"},
                    "final_step": {"type": "integer"},
                    "chip_hours": NULLABLE_NUM,
                    "cost": NULLABLE_NUM,
                },
            },
        },
        "total": {
            "type": "object",
            "additionalProperties": False,
            "required": ["chip_hours", "cost"],
            "properties": {"chip_hours": NULLABLE_NUM, "cost": NULLABLE_NUM},
        },
        "early_stop": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["rule", "steps", "fraction_of_none", "chip_hours", "best_case", "exact"],
                    "properties": {
                        "rule": {"enum": ["median", "asha"]},
                        "eta": {"type": ["integer", "null"]},
                        "min_step": {"type": ["integer", "null"]},
                        "judged_at": {"type": ["array", "null"], "items": {"type": "integer"}},
                        "final_step": {"type": ["integer", "null"]},
                        "steps": {
                            "type": "object",
                            "required": ["none", "best", "worst"],
                            "properties": {k: {"type": "integer"} for k in ("none", "best", "worst")},
                        },
                        "fraction_of_none": {"type": "object", "required": ["best", "worst"]},
                        "chip_hours": {"type": ["object", "null"]},
                        "best_case": {"type": "string"},
                        "exact": {"type": "boolean"},
                        "assumption": {"type": "string"},
                        "stop_delay": {
                            "type": ["object", "null"],
                            "additionalProperties": False,
                            "required": [
                                "poll_seconds",
                                "steps_per_stopped_child",
                                "best_steps",
                                "best_fraction",
                            ],
                            "properties": {
                                "poll_seconds": {"type": "number"},
                                "steps_per_stopped_child": {"type": ["integer", "null"]},
                                "best_steps": {"type": ["integer", "null"]},
                                "best_fraction": {"type": ["number", "null"]},
                            },
                        },
                    },
                },
            ]
        },
    },
}

# docs/cli.md, "status --json": `sweep` of a sweep's parent, of a child, or null
SWEEP_PARENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "role",
        "size",
        "max_parallel",
        "select",
        "selection",
        "cancelled",
        "children_read",
        "children",
    ],
    "properties": {
        "role": {"const": "parent"},
        "size": {"type": "integer"},
        "max_parallel": {"type": "integer"},
        "select": SELECT_RULE,
        "selection": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["run_id", "index", "metric", "direction", "value", "reason", "at", "table"],
                    "properties": {
                        "run_id": NULLABLE_STR,
                        "index": {"type": ["integer", "null"]},
                        "value": NULLABLE_NUM,
                        "reason": {"type": "string"},
                        "at": {"type": "string"},
                        "table": {"type": "array", "items": {"type": "object"}},
                    },
                },
            ]
        },
        "early_stop": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "required": ["rule"],
                    "properties": {"rule": {"enum": ["median", "asha"]}},
                },
            ]
        },
        "cancelled": {"type": "boolean"},
        "children_read": {"type": "boolean"},
        "children": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "index",
                    "run_id",
                    "point",
                    "overrides",
                    "state",
                    "waiting",
                    "post_mean_reward",
                    "selected",
                ],
                "properties": {
                    "index": {"type": "integer"},
                    "run_id": {"type": "string"},
                    "point": POINT,
                    "overrides": {"type": "string"},
                    "state": NULLABLE_STR,
                    "waiting": NULLABLE_STR,
                    "post_mean_reward": NULLABLE_NUM,
                    "selected": NULLABLE_BOOL,
                    "stopped": {
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["step", "rule", "reason"],
                                "properties": {
                                    "step": {"type": ["integer", "null"]},
                                    "rule": {"enum": ["median", "asha"]},
                                    "reason": {"type": "string"},
                                },
                            },
                        ]
                    },
                },
            },
        },
    },
}
SWEEP_CHILD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["role", "parent", "index", "size", "point", "overrides", "waiting", "selected", "stopped"],
    "properties": {
        "role": {"const": "child"},
        "parent": {"type": "string"},
        "index": {"type": "integer"},
        "size": {"type": "integer"},
        "point": POINT,
        "overrides": {"type": "string"},
        "waiting": NULLABLE_STR,
        "selected": NULLABLE_BOOL,
        "stopped": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["trained_to", "reason"],
            "properties": {"trained_to": {"type": ["integer", "null"]}, "reason": NULLABLE_STR},
        },
    },
}

# docs/cli.md, "status --json" (also the `run` of watch --json's final line)
STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "run_id",
        "state",
        "stage",
        "attempt",
        "failure",
        "execution",
        "progress",
        "results",
        "gate",
        "chip_hours",
        "cost_estimate",
        "stages",
        "round",
        "rounds",
        "lineage",
        "terminal",
        "sweep",
        "team",
        "waiting",
        "admission",
        "stuck",
    ],
    "properties": {
        "run_id": {"type": "string"},
        "state": {"type": "string"},
        "stage": NULLABLE_STR,
        "attempt": {"type": "integer"},
        "failure": {"type": ["object", "null"]},
        "execution": NULLABLE_STR,
        "progress": {"type": ["object", "null"]},
        "results": {"type": ["object", "null"]},
        "gate": {"type": ["object", "null"]},
        "chip_hours": {"type": "number"},
        "cost_estimate": {"type": ["object", "null"]},
        "stages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["stage", "attempts", "phase", "seconds", "failure"],
                "properties": {
                    "stage": {"type": "string"},
                    "attempts": {"type": "integer"},
                    "phase": {"type": "string"},
                    "seconds": NULLABLE_NUM,
                    "failure": NULLABLE_STR,
                },
            },
        },
        "round": {"type": "integer"},
        "rounds": {"type": "array", "items": {"type": "object", "required": ["round", "by", "at"]}},
        "lineage": {"type": "object"},
        "terminal": {"type": "boolean"},
        "sweep": {"oneOf": [{"type": "null"}, SWEEP_PARENT_SCHEMA, SWEEP_CHILD_SCHEMA]},
        "team": {"type": "string"},
        "waiting": NULLABLE_STR,
        "stuck": NULLABLE_STR,
        "admission": {
            "oneOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["waits_for", "reason", "since"],
                    "properties": {
                        "waits_for": {
                            "enum": ["team-place", "team-budget", "sweep-slot", "conversion", "selection"]
                        },
                        "reason": {"type": "string"},
                        "since": {"type": "string"},
                    },
                },
            ]
        },
        "links": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

# docs/cli.md, "watch --json"
WATCH_CHANGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type", "run_id", "state", "stage", "attempt", "phase", "terminal", "at"],
    "properties": {
        "type": {"const": "change"},
        "run_id": {"type": "string"},
        "state": {"type": "string"},
        "stage": NULLABLE_STR,
        "attempt": {"type": "integer"},
        "phase": {"type": "string"},
        "terminal": {"type": "boolean"},
        "at": {"type": "string"},
    },
}
WATCH_FINAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type", "run"],
    "properties": {"type": {"const": "final"}, "run": STATUS_SCHEMA},
}


def _record(run_id: str, state: str, *, labels: dict[str, str] | None = None, created: str = "") -> RunRecord:
    request = validate_request(minimal_request(**({"labels": labels} if labels else {}))).model_dump(
        mode="json"
    )
    r = RunRecord(run_id=run_id, key=f"request:{run_id}", source=Source(kind="cli"), request=request)
    r.state = state  # type: ignore[assignment]
    if created:
        r.created_at = created
    if state == "gated":
        r.gate = GateRecord(passed=False, reasons=["post mean_reward 0.5627 below min_post_mean_reward 0.6"])
        r.failure = Failure(tag="gated", message="gate failed", stage="gate")
    if state == "failed":
        r.failure = Failure(tag="permanent", message="train exited 1", stage="train")
    return r


def rlpipe(buckets: Buckets, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """The command's exit code, stdout and stderr, through its ``main`` (tests/harness/cli.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RLPIPE_LOCAL",)}
    env.update(buckets.env(**{"RLPIPE_TARGET": "gcp", "RLPIPE_STAGE_URL": "http://127.0.0.1:9/", **extra}))
    return run_main(list(args), env)


@pytest.fixture
def ledger(buckets: Buckets) -> Any:
    ledger = buckets.ledger()
    for run_id, state, labels, created in (
        ("rfailed00001", "failed", {"team": "a"}, "2026-12-01T10:00:00.000000Z"),
        ("rgated000001", "gated", {"team": "a", "tier": "x"}, "2026-12-02T10:00:00.000000Z"),
        ("rsucceeded01", "succeeded", {"team": "b"}, "2026-12-03T10:00:00.000000Z"),
        ("rrunning0001", "training", None, "2026-12-04T10:00:00.000000Z"),
        ("rcancelled01", "cancelled", None, "2026-11-20T10:00:00.000000Z"),
    ):
        assert ledger.claim(_record(run_id, state, labels=labels, created=created))
    return ledger


def test_plan_json_of_a_sweep_follows_its_schema_and_an_invalid_sweep_is_invalid_input(tmp_path: Any) -> None:
    def plan(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLPIPE_")}
        return subprocess.run(
            [sys.executable, "-m", "rlpipe.cli.main", "plan", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**env, **extra},
            check=False,
            timeout=120,
        )

    prices = '{"v6e": {"reservation": {"price": 2, "source": "contract test", "read": "2026-12-01"}}}'
    done = plan("examples/sweep-lr.yaml", "--json", "--step-seconds", "30", RLPIPE_PRICES=prices)
    assert done.returncode == ExitCode.OK, done.stderr
    sweep = json.loads(done.stdout)["sweep"]
    jsonschema.validate(sweep, PLAN_SWEEP_SCHEMA)
    assert sweep["size"] == len(sweep["children"]) == 4 and [c["index"] for c in sweep["children"]] == [
        0,
        1,
        2,
        3,
    ]
    assert all("run_id" in c for c in sweep["children"]) and None not in sweep["total"].values()
    single = plan("examples/gemma4-26b-v6e-32.yaml", "--json")
    assert single.returncode == ExitCode.OK and "sweep" not in json.loads(single.stdout)
    bad = tmp_path / "bad-sweep.yaml"
    bad.write_text(
        "model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\nsweep:\n  grid:\n    tpu.type: [v6e-32, v6e-64]\n"
    )
    refused = plan(str(bad), "--json")
    assert refused.returncode == ExitCode.INVALID_INPUT and refused.stdout == ""
    assert "sweep.grid.tpu.type" in refused.stderr


def test_status_json_of_a_sweeps_parent_and_child_follows_the_schema(buckets: Buckets) -> None:
    from rlpipe.core.runs.record import Lineage, SweepMember, SweepParent

    ledger = buckets.ledger()
    request = validate_request(
        minimal_request(sweep={"grid": {"training.learning_rate": [1e-5, 2e-5]}, "max_parallel": 1})
    ).model_dump(mode="json")
    points = [{"training.learning_rate": 1e-5}, {"training.learning_rate": 2e-5}]
    parent = RunRecord(
        run_id="rsweepparent",
        key="request:sweep",
        source=Source(kind="cli"),
        request=request,
        state="training",
        sweep=SweepParent(children=["rsweepchild0", "rsweepchild1"], points=points, max_parallel=1),
    )
    assert ledger.claim(parent)
    for index, (state, waiting) in enumerate((("training", None), ("accepted", "queued: no slot"))):
        child = _record(f"rsweepchild{index}", state)
        child.lineage = Lineage(
            sweep=SweepMember(parent="rsweepparent", index=index, size=2, point=points[index])
        )
        if waiting is not None:
            child.admission = Admission(
                waits_for="sweep-slot", reason=waiting, since="2026-12-03T10:00:00.000000Z"
            )
        if index == 0:
            child.results = {"post": {"mean_reward": 0.58}}
        assert ledger.claim(child)
    done = rlpipe(buckets, "status", "rsweepparent", "--json")
    assert done.returncode == ExitCode.OK, done.stderr
    info = json.loads(done.stdout)
    jsonschema.validate(info, STATUS_SCHEMA)
    jsonschema.validate(info["sweep"], SWEEP_PARENT_SCHEMA)
    rows = info["sweep"]["children"]
    assert [(r["run_id"], r["state"], r["waiting"], r["post_mean_reward"]) for r in rows] == [
        ("rsweepchild0", "training", None, 0.58),
        ("rsweepchild1", "accepted", "queued: no slot", None),
    ]
    done = rlpipe(buckets, "status", "rsweepchild1", "--json")
    assert done.returncode == ExitCode.OK, done.stderr
    info = json.loads(done.stdout)
    jsonschema.validate(info, STATUS_SCHEMA)
    jsonschema.validate(info["sweep"], SWEEP_CHILD_SCHEMA)
    assert (info["sweep"]["parent"], info["sweep"]["index"], info["sweep"]["waiting"]) == (
        "rsweepparent",
        1,
        "queued: no slot",
    )


def test_the_exit_code_table_is_the_documented_one() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert {c.name: c.value for c in ExitCode} == {
        "OK": 0,
        "INVALID_INPUT": 1,
        "USAGE": 2,
        "NOT_FOUND": 3,
        "REFUSED_BY_STATE": 4,
        "RUN_FAILED": 5,
        "RUN_GATED": 6,
        "INTERNAL_ERROR": 70,
        "TRANSIENT": 75,
    }
    for code in ExitCode:
        assert f"| `{code.value}` | `{code.name}` |" in doc, code
        assert code.__doc__ or ExitCode.__doc__


@pytest.mark.parametrize(
    ("run_id", "code", "state"),
    [
        ("rfailed00001", ExitCode.RUN_FAILED, "failed"),
        ("rcancelled01", ExitCode.RUN_FAILED, "cancelled"),
        ("rgated000001", ExitCode.RUN_GATED, "gated"),
        ("rsucceeded01", ExitCode.OK, "succeeded"),
        ("rrunning0001", ExitCode.TRANSIENT, "training"),  # still running when --timeout ran out
    ],
)
def test_watch_json_of_a_run_exits_per_the_table(
    buckets: Buckets, ledger: Any, run_id: str, code: int, state: str
) -> None:
    done = rlpipe(buckets, "watch", run_id, "--json", "--timeout", "1", "--interval", "0.2")
    assert done.returncode == code, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    *changes, final = lines
    assert changes, "at least the first state seen is a change"
    for line in changes:
        jsonschema.validate(line, WATCH_CHANGE_SCHEMA)
    jsonschema.validate(final, WATCH_FINAL_SCHEMA)
    assert len(changes) == 1, "an unchanged run prints no second change line"
    assert changes[0]["state"] == final["run"]["state"] == state and final["run"]["run_id"] == run_id


def test_status_json_and_the_not_found_codes(buckets: Buckets, ledger: Any) -> None:
    done = rlpipe(buckets, "status", "rgated000001", "--json")
    assert done.returncode == ExitCode.OK, done.stderr
    jsonschema.validate(json.loads(done.stdout), STATUS_SCHEMA)
    assert json.loads(done.stdout)["sweep"] is None  # no sweep's parent or child
    for args in (
        ("status", "rnosuchrunaa"),
        ("status", "rnosuchrunaa", "--json"),
        ("watch", "rnosuchrunaa", "--accept-timeout", "0.5", "--interval", "0.1"),
        ("watch", "rnosuchrunaa", "--json", "--accept-timeout", "0.5", "--interval", "0.1"),
        ("retry", "rnosuchrunaa", "--reason", "again"),
        ("promote", "rnosuchrunaa", "--reason", "ship"),
        ("report", "rnosuchrunaa"),
        ("cancel", "rnosuchrunaa"),
    ):
        done = rlpipe(buckets, *args)
        assert done.returncode == ExitCode.NOT_FOUND, (args, done.returncode, done.stderr)
        if "--json" in args:  # the error is the one JSON object on stdout
            error = json.loads(done.stdout)["error"]
            assert (error["code"], error["name"]) == (3, "NOT_FOUND") and "no run rnosuchrunaa" in error[
                "message"
            ]
        else:
            assert "no run rnosuchrunaa" in done.stderr and done.stdout == "", args


def test_an_id_no_delivery_could_make_is_not_found_at_once(buckets: Buckets, ledger: Any) -> None:
    """A mistyped id (a digit run_id_for never writes, a capital) is named as such: `watch` does not
    wait for it to be accepted (it waited an hour)."""
    for args in (("status", "rN0such-run1"), ("watch", "rnosuchrun01", "--accept-timeout", "3600")):
        done = rlpipe(buckets, *args)
        assert done.returncode == ExitCode.NOT_FOUND, (args, done.stderr)
        assert "is not an id rlpipe makes" in done.stderr, args


def test_refused_by_state_invalid_input_usage_and_transient(
    buckets: Buckets, ledger: Any, tmp_path: Any
) -> None:
    for args in (
        ("retry", "rsucceeded01", "--reason", "again"),
        ("retry", "rrunning0001", "--reason", "again"),
        ("promote", "rfailed00001", "--reason", "ship"),
    ):
        done = rlpipe(buckets, *args)
        assert done.returncode == ExitCode.REFUSED_BY_STATE, (args, done.stderr)
        assert done.stdout == "" and args[1] in done.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: gemma4-26b\n")
    assert rlpipe(buckets, "validate", str(bad)).returncode == ExitCode.INVALID_INPUT
    assert (
        rlpipe(buckets, "list", "--page-token", "Not/A-Token", "--limit", "2").returncode
        == ExitCode.INVALID_INPUT
    )
    assert rlpipe(buckets, "list", "--state", "sleeping").returncode == ExitCode.USAGE  # argparse
    prices = rlpipe(buckets, "plan", "examples/gemma4-26b-v6e-32.yaml", RLPIPE_PRICES="{not json")
    assert prices.returncode == ExitCode.USAGE, prices.stderr  # a deployment setting invalid
    # The stage function does not answer (nothing listens on port 9): try again later.
    cancel = rlpipe(buckets, "cancel", "rrunning0001")
    assert cancel.returncode == ExitCode.TRANSIENT, cancel.stderr
    assert "try again" in cancel.stderr
    promote = rlpipe(buckets, "promote", "rgated000001", "--reason", "ship")
    assert promote.returncode == ExitCode.TRANSIENT, promote.stderr
    retried = rlpipe(buckets, "retry", "rfailed00001", "--reason", "again")
    assert retried.returncode == ExitCode.TRANSIENT, retried.stderr
    assert "did not answer" in retried.stderr


def _list(buckets: Buckets, *args: str) -> dict[str, Any]:
    done = rlpipe(buckets, "list", "--json", *args)
    assert done.returncode == ExitCode.OK, done.stderr
    out = json.loads(done.stdout)
    jsonschema.validate(out, LIST_SCHEMA)
    return out


def test_list_filters(buckets: Buckets, ledger: Any) -> None:
    def ids(*args: str) -> list[str]:
        return [r["run_id"] for r in _list(buckets, *args)["runs"]]

    everything = _list(buckets)
    assert everything["next_page_token"] is None
    assert [r["run_id"] for r in everything["runs"]] == [
        "rrunning0001",
        "rsucceeded01",
        "rgated000001",
        "rfailed00001",
        "rcancelled01",
    ]  # newest first
    assert ids("--state", "failed") == ["rfailed00001"]
    assert ids("--state", "failed", "--state", "gated") == ["rgated000001", "rfailed00001"]
    assert ids("--label", "team=a") == ["rgated000001", "rfailed00001"]
    assert ids("--label", "team=a", "--label", "tier=x") == ["rgated000001"]  # all must match
    assert ids("--label", "team=c") == []
    assert ids("--since", "2026-12-02T10:00:00Z") == ["rrunning0001", "rsucceeded01", "rgated000001"]
    assert ids("--since", "2026-12-02") == ["rrunning0001", "rsucceeded01", "rgated000001"]
    assert ids("--since", "1h") == []  # every run here was created days ago
    assert ids("--state", "succeeded", "--label", "team=b", "--since", "2026-12-01") == ["rsucceeded01"]
    table = rlpipe(buckets, "list", "--state", "gated")
    assert table.returncode == 0 and "rgated000001" in table.stdout and "rfailed00001" not in table.stdout


def test_list_pages_with_a_token_until_none(buckets: Buckets, ledger: Any) -> None:
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        out = _list(buckets, "--limit", "2", *(("--page-token", token) if token else ()))
        pages += 1
        assert len(out["runs"]) <= 2
        seen += [r["run_id"] for r in out["runs"]]
        token = out["next_page_token"]
        if token is None:
            break
        assert pages < 5, "the token moves forward"
    assert pages == 3 and sorted(seen) == sorted(set(seen)) and len(seen) == 5
    # a filtered page counts matches only
    first = _list(buckets, "--limit", "1", "--label", "team=a")
    rest = _list(buckets, "--limit", "1", "--label", "team=a", "--page-token", first["next_page_token"])
    assert {r["run_id"] for r in first["runs"] + rest["runs"]} == {"rfailed00001", "rgated000001"}
    assert rest["next_page_token"] is not None or len(rest["runs"]) == 1
    table = rlpipe(buckets, "list", "--limit", "2")
    assert "more: rlpipe list --limit 2 --page-token " in table.stdout


# docs/cli.md, "reconcile --dry-run --json"
RECONCILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "examined",
        "workloads",
        "actions",
        "errors",
        "round_complete",
        "stopped",
        "seconds",
        "dry_run",
        "outcomes",
        "problems",
    ],
    "properties": {
        "examined": {"type": "integer"},
        "workloads": {"type": "integer"},
        "actions": {"type": "object", "additionalProperties": {"type": "integer"}},
        "errors": {"type": "integer"},
        "round_complete": {"type": "boolean"},
        "stopped": {"enum": ["budget", None]},
        "seconds": {"type": "number"},
        "dry_run": {"type": "boolean"},
        "outcomes": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["run_id", "status", "detail", "action", "found", "do"],
                "properties": {
                    "run_id": {"type": "string"},
                    "status": {"type": "string"},
                    "detail": {"type": ["string", "null"]},
                    "action": NULLABLE_STR,
                    "found": {"type": ["string", "null"]},
                    "do": {"type": ["string", "null"]},
                },
            },
        },
        "problems": {"type": "array"},
    },
}

# docs/cli.md, "upstream check --json"
UPSTREAM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["dry_run", "checked_at", "entries"],
    "properties": {
        "dry_run": {"type": "boolean"},
        "checked_at": {"type": "string"},
        "entries": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["repo", "branch", "outcome", "sha", "detail", "reason"],
                "properties": {
                    "repo": NULLABLE_STR,
                    "branch": NULLABLE_STR,
                    "outcome": {"enum": ["released", "ignored", "waiting", "no-access", "error"]},
                    "sha": NULLABLE_STR,
                    "detail": {"type": "string"},
                    "reason": {"type": "string"},
                    "watch": {"type": "string"},
                    "run_id": {"type": "string"},
                    "wait_until": {"type": "string"},
                    "changed": {"type": "array", "items": {"type": "string"}},
                    "problems": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["path", "message", "fix"],
                            "properties": {
                                "path": {"type": "string"},
                                "message": {"type": "string"},
                                "fix": {"type": "string"},
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_reconcile_dry_run_json_follows_its_schema(chain: Chain, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from rlpipe.cli import reconcile as reconcile_cli

    chain.run("rcontract001", "training", execution=GONE_PREFIX + "x")
    parser = argparse.ArgumentParser()
    reconcile_cli.register(parser.add_subparsers(), settings=lambda: chain.settings)
    args = parser.parse_args(["reconcile", "--dry-run", "--json"])
    assert args.func(args) == ExitCode.OK
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, RECONCILE_SCHEMA)
    assert report["dry_run"] is True and [o["run_id"] for o in report["outcomes"]] == ["rcontract001"]
    assert report["outcomes"][0]["action"] is not None


def test_upstream_check_json_follows_its_schema_and_an_error_is_transient(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from rlpipe.cli.upstream import register
    from rlpipe.core.problems import Problem
    from rlpipe.upstream import service
    from rlpipe.upstream.poll_outcomes import EntryOutcome, PollReport

    released = EntryOutcome(
        "google/gemma",
        "main",
        "released",
        "would start run r1",
        sha="a" * 40,
        reason="new-release",
        watch="main@abc",
        run_id="rcontract002",
        changed=("model.safetensors",),
    )
    failed = EntryOutcome(
        "google/other",
        "main",
        "error",
        "the Hub did not answer",
        reason="unreachable",
        problems=(Problem("watch[1]", "no answer", "try again"),),
    )
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True), settings=lambda: None)
    for outcomes, code in (((released,), ExitCode.OK), ((released, failed), ExitCode.TRANSIENT)):
        report = PollReport(outcomes, dry_run=True, checked_at="2026-12-04T10:00:00.000000Z")
        monkeypatch.setattr(service, "check", lambda *a, report=report, **k: report)
        args = parser.parse_args(["upstream", "check", "--json"])
        assert args.func(args) == code
        out = json.loads(capsys.readouterr().out)
        jsonschema.validate(out, UPSTREAM_SCHEMA)
        assert [e["outcome"] for e in out["entries"]] == [o.outcome for o in outcomes]


def test_cancel_through_the_stage_function_ok_and_refused_by_state(
    buckets: Buckets, ledger: Any, executions: Any, kube: Any, tmp_path: Any, token_issuer: Any
) -> None:
    # The identities played as the local stack plays them: the stage function takes the
    # workflow's operations from WORKFLOW only, and the CLI calls as OPERATOR, with a token signed
    # by the issuer the function verifies against, for the audience it verifies.
    operator = "rlpipe-operator@rlpipe-test.iam.gserviceaccount.com"
    env = buckets.env(
        RLPIPE_WORKFLOWS_ENDPOINT=executions.target,
        RLPIPE_KUBE_URL=kube.url,
        RLPIPE_WORKFLOW_IDENTITY="rlpipe-workflow@rlpipe-test.iam.gserviceaccount.com",
        RLPIPE_LOCAL_OPERATOR_IDENTITY=operator,
        RLPIPE_LOCAL_SIGNING_KEY=str(token_issuer.key_path),
        RLPIPE_ID_TOKEN_CERTS_URL=token_issuer.certs_url,
        RLPIPE_STAGE_AUDIENCE="https://rlpipe-stage-123456.us-east5.run.app",
    )
    server = FunctionServer("stage", "http", env, tmp_path).start()
    try:
        # A CLI that calls as nobody (no operator identity to play) is refused, and says so.
        nobody = {**env, "RLPIPE_LOCAL_OPERATOR_IDENTITY": ""}
        refused = rlpipe(buckets, "cancel", "rrunning0001", RLPIPE_STAGE_URL=server.url, **nobody)
        assert refused.returncode == ExitCode.INVALID_INPUT, refused.stderr
        assert "needs a verified caller" in refused.stderr and "Traceback" not in refused.stderr
        assert buckets.ledger().get("rrunning0001").state == "training"
        done = rlpipe(buckets, "cancel", "rrunning0001", RLPIPE_STAGE_URL=server.url, **env)
        assert done.returncode == ExitCode.OK, done.stderr + server.logs()[-2000:]
        assert "run rrunning0001: cancelled" in done.stdout
        ended = rlpipe(buckets, "cancel", "rsucceeded01", RLPIPE_STAGE_URL=server.url, **env)
        assert ended.returncode == ExitCode.REFUSED_BY_STATE, ended.stderr
        assert "already ended succeeded" in ended.stderr
        # One answer, one line: no stdout line naming the state beside the refusal.
        assert ended.stdout == "" and len(ended.stderr.strip().splitlines()) == 1, (
            ended.stdout,
            ended.stderr,
        )
    finally:
        server.stop()
    assert buckets.ledger().get("rsucceeded01").state == "succeeded"
    cancelled = buckets.ledger().get("rrunning0001")
    assert cancelled.state == "cancelled" and cancelled.failure.caller == operator


def test_watch_json_prints_a_line_per_change_only() -> None:
    from types import SimpleNamespace

    from rlpipe.cli.watch import watch_json
    from rlpipe.core.runs.record import Attempt

    def at(state: str, stage: str | None, attempt: int, phase: str | None = None) -> RunRecord:
        r = _record("rchanges0001", state)
        r.stage, r.attempt = stage, attempt  # type: ignore[assignment]
        if stage and phase:
            r.attempts = [
                Attempt(
                    stage=stage,
                    attempt=attempt,
                    workload="w",
                    launched_at="2026-12-03T10:00:00.000000Z",
                    phase=phase,
                )  # type: ignore[arg-type]
            ]
        return r

    seen = [
        None,  # not accepted yet: no line
        at("accepted", None, 0),
        at("accepted", None, 0),  # unchanged: no line
        at("training", "train", 1, "queued"),
        at("training", "train", 1, "running"),  # the phase changed
        at("training", "train", 1, "running"),
        at("training", "train", 2, "running"),  # the attempt changed
        at("gated", "train", 2, "succeeded"),
    ]
    polls = iter(seen)
    lines: list[dict[str, Any]] = []
    record = watch_json(
        SimpleNamespace(get=lambda run_id: next(polls)), "rchanges0001", emit=lines.append, interval=0
    )
    assert record is not None and record.state == "gated"
    *changes, final = lines
    for line in changes:
        jsonschema.validate(line, WATCH_CHANGE_SCHEMA)
    jsonschema.validate(final, WATCH_FINAL_SCHEMA)
    assert [(c["state"], c["stage"], c["attempt"], c["phase"]) for c in changes] == [
        ("accepted", None, 0, "accepted"),
        ("training", "train", 1, "queued"),
        ("training", "train", 1, "running"),
        ("training", "train", 2, "running"),
        ("gated", "train", 2, "succeeded"),
    ]
    assert changes[-1]["terminal"] and final["run"]["state"] == "gated"
