"""The timeout budget of docs/timeouts.md, read from the Terraform, the workflow and the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters import blobstore, orchestrator
from rlpipe.control.adapters.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "infra" / "terraform"
WORKFLOWS_HTTP_MAX = 1800  # Workflows reference, http.post: "timeout ... maximum 1800 seconds"


def _function_timeouts() -> dict[str, int]:
    text = (TERRAFORM / "functions.tf").read_text()
    found = dict(re.findall(r"\n\s{4}([a-z-]+) = \{.*?\n\s+timeout\s+= (\d+)", text, flags=re.DOTALL))
    return {name: int(value) for name, value in found.items()}


def _variable_default(name: str) -> Any:
    text = (TERRAFORM / "variables.tf").read_text()
    block = re.search(rf'variable "{name}" \{{(.*?)\n\}}', text, flags=re.DOTALL)
    assert block, name
    value = re.search(r"\n\s+default\s+= (\S+)", block.group(1))
    assert value, name
    return yaml.safe_load(value.group(1))


def _call_stage() -> dict[str, Any]:
    definition = yaml.safe_load((ROOT / "workflows" / "pipeline.yaml").read_text())
    return definition["call_stage"]


def _status_retries() -> int:
    text = (ROOT / "workflows" / "pipeline.yaml").read_text()
    status_call = re.search(r"op: status\n(?:.*\n){0,4}?\s+max_retries: (\d+)", text)
    assert status_call, "the wait loop's status call sets its own max_retries"
    return int(status_call.group(1))


def test_the_table_covers_every_function() -> None:
    timeouts = _function_timeouts()
    assert {"intake-object", "intake-message", "stage"} <= set(timeouts), timeouts


def test_the_start_lease_outlives_every_intake_function_and_every_call_its_holder_makes() -> None:
    lease = _variable_default("start_lease_seconds")
    assert Settings().start_lease_seconds == lease  # the local default is the deployed one
    timeouts = _function_timeouts()
    for name in ("intake-object", "intake-message"):
        assert lease > timeouts[name], f"{name}: a lease could lapse while its holder still runs"
    assert lease > orchestrator.API_TIMEOUT_SECONDS
    assert lease > blobstore.CALL_DEADLINE_SECONDS
    assert blobstore.REQUEST_TIMEOUT_SECONDS <= blobstore.CALL_DEADLINE_SECONDS


def test_the_workflow_waits_at_least_as_long_as_stage_may_run() -> None:
    post = _call_stage()["steps"][1]["post"]["try"]["steps"][0]["send"]["try"]
    http_timeout = post["args"]["timeout"]
    stage_timeout = _function_timeouts()["stage"]
    assert stage_timeout <= http_timeout <= WORKFLOWS_HTTP_MAX
    assert stage_timeout > blobstore.CALL_DEADLINE_SECONDS  # a ledger call fits in one stage call
    hub = re.search(r'RLPIPE_HUB_TIMEOUT_SECONDS\s+= "(\d+)"', (TERRAFORM / "functions.tf").read_text())
    assert hub and Settings().hub_timeout_seconds == float(hub.group(1))
    assert stage_timeout > 3 * float(hub.group(1))  # plan: revision, access check, cache read


@pytest.mark.parametrize("limit_seconds", [120])
def test_one_status_check_is_bounded(limit_seconds: int) -> None:
    post = _call_stage()["steps"][1]["post"]["try"]["steps"][0]["send"]["try"]
    worst = post["args"]["timeout"] * (1 + _status_retries())
    assert worst <= limit_seconds, f"a hung stage makes one status check last {worst} s"
