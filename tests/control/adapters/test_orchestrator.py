"""The production ExecutionsClient, pointed at a local gRPC Executions server."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from rlpipe.control.adapters.orchestrator import Orchestrator
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.failures import PermanentFailure, TransientFailure


def _orch(executions: Any) -> Orchestrator:
    return Orchestrator(
        Settings(project="p1", location="europe-west4", workflow="wf", workflows_endpoint=executions.target)
    )


def test_start_get_cancel(executions: Any) -> None:
    orch = _orch(executions)
    name = orch.start("rstart000001")
    assert name.startswith("projects/p1/locations/europe-west4/workflows/wf/executions/")
    [(op, request)] = executions.calls
    assert op == "create" and json.loads(request.execution.argument) == {"run_id": "rstart000001"}
    info = orch.get(name)
    assert info is not None and info.state == "ACTIVE"
    assert orch.cancel(name) is True
    assert orch.get(name).state == "CANCELLED"  # type: ignore[union-attr]
    assert orch.cancel(name) is False, "cancelling an ended execution is not an error"
    assert orch.get(name + "-missing") is None


@pytest.mark.parametrize(
    ("code", "error"),
    [(grpc.StatusCode.UNAVAILABLE, TransientFailure), (grpc.StatusCode.PERMISSION_DENIED, PermanentFailure)],
)
def test_start_failures_are_classified(
    executions: Any, code: grpc.StatusCode, error: type[Exception]
) -> None:
    executions.fail_next.extend([code] * 10)
    with pytest.raises(error):
        _orch(executions).start("rfail0000001")
