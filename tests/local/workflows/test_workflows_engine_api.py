"""The Executions gRPC API, driven by the production ``ExecutionsClient``."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator

import grpc
import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud.workflows.executions_v1 import ExecutionsClient
from google.cloud.workflows.executions_v1.services.executions.transports import ExecutionsGrpcTransport
from google.cloud.workflows.executions_v1.types import Execution, ExecutionView

from rlpipe.local.workflows import LocalWorkflows, RealClock
from tests.harness.patience import ceiling
from tests.harness.workflow_clock import FakeClock

DEFINITION = """
main:
  params: [args]
  steps:
    - route:
        switch:
          - condition: ${args.mode == "fail"}
            next: fail
          - condition: ${args.mode == "wait"}
            next: wait
    - succeed:
        return:
          run_id: ${args.run_id}
          doubled: ${args.n * 2}
    - fail:
        raise:
          code: 409
          message: ${"run " + args.run_id + " conflicts"}
          tags: ["RunConflict"]
    - wait:
        try:
          steps:
            - create:
                call: events.create_callback_endpoint
                result: callback
            - block:
                call: events.await_callback
                args:
                  callback: ${callback}
                  timeout: 86400
        except:
          as: e
          steps:
            - handler_ran:
                return: "except must not run on cancel"
"""


@pytest.fixture
def served() -> Iterator[tuple[LocalWorkflows, ExecutionsClient]]:
    workflows = LocalWorkflows(
        textwrap.dedent(DEFINITION),
        workflow_id="pipeline",
        project="p1",
        clock=FakeClock(auto_advance_waits=False),
    )
    with workflows:
        channel = grpc.insecure_channel(workflows.grpc_target)
        transport = ExecutionsGrpcTransport(channel=channel, credentials=AnonymousCredentials())
        yield workflows, ExecutionsClient(transport=transport)
        channel.close()


def _finished(client: ExecutionsClient, name: str) -> Execution:
    deadline = time.monotonic() + ceiling(5)
    while time.monotonic() < deadline:
        execution = client.get_execution(name=name)
        if execution.state != Execution.State.ACTIVE:
            return execution
        time.sleep(0.01)
    raise AssertionError(f"{name} is still active")


def _wait_until_blocked(workflows: LocalWorkflows, name: str) -> None:
    deadline = time.monotonic() + ceiling(5)
    while time.monotonic() < deadline:
        if workflows.engine.get(name).current_step == ("main", "block"):
            return
        time.sleep(0.01)
    raise AssertionError("execution never reached the await step")


def test_create_get_and_list_with_the_real_client(served: tuple[LocalWorkflows, ExecutionsClient]) -> None:
    workflows, client = served
    parent = "projects/p1/locations/us-central1/workflows/pipeline"
    assert workflows.workflow_name == parent
    created = client.create_execution(
        parent=parent, execution=Execution(argument=json.dumps({"run_id": "r1", "n": 21, "mode": "ok"}))
    )
    assert created.name.startswith(parent + "/executions/")
    assert created.state == Execution.State.ACTIVE
    done = _finished(client, created.name)
    assert done.state == Execution.State.SUCCEEDED
    assert json.loads(done.result) == {"run_id": "r1", "doubled": 42}
    assert json.loads(done.argument) == {"run_id": "r1", "n": 21, "mode": "ok"}
    assert done.end_time >= done.start_time

    second = client.create_execution(
        parent=parent, execution=Execution(argument='{"run_id": "r2", "n": 1, "mode": "ok"}')
    )
    _finished(client, second.name)
    listed = list(client.list_executions(parent=parent))
    assert [e.name for e in listed] == [second.name, created.name]  # newest first
    assert listed[0].result == ""  # BASIC view by default: no argument/result
    full = list(client.list_executions(request={"parent": parent, "view": ExecutionView.FULL}))
    assert json.loads(full[1].result)["doubled"] == 42
    succeeded = list(client.list_executions(request={"parent": parent, "filter": 'state="SUCCEEDED"'}))
    assert len(succeeded) == 2


def test_failed_execution_exposes_error_payload_and_failing_step(
    served: tuple[LocalWorkflows, ExecutionsClient],
) -> None:
    workflows, client = served
    created = client.create_execution(
        parent=workflows.workflow_name, execution=Execution(argument='{"run_id": "r9", "mode": "fail"}')
    )
    done = _finished(client, created.name)
    assert done.state == Execution.State.FAILED
    assert json.loads(done.error.payload) == {
        "code": 409,
        "message": "run r9 conflicts",
        "tags": ["RunConflict"],
    }
    assert 'in step "fail", routine "main"' in done.error.context
    assert [(e.routine, e.step) for e in done.error.stack_trace.elements] == [("main", "fail")]


def test_cancel_stops_a_waiting_execution_without_running_except(
    served: tuple[LocalWorkflows, ExecutionsClient],
) -> None:
    # https://cloud.google.com/workflows/docs/reference/executions/rest/v1/projects.locations.workflows.executions/cancel
    workflows, client = served
    created = client.create_execution(
        parent=workflows.workflow_name, execution=Execution(argument='{"run_id": "r3", "mode": "wait"}')
    )
    _wait_until_blocked(workflows, created.name)
    cancelled = client.cancel_execution(name=created.name)
    assert cancelled.state == Execution.State.CANCELLED
    snapshot = workflows.engine.wait(created.name, timeout=ceiling(5))
    assert "handler_ran" not in snapshot.step_names()
    assert client.get_execution(name=created.name).state == Execution.State.CANCELLED
    with pytest.raises(exceptions.FailedPrecondition):
        client.cancel_execution(name=created.name)


def test_unknown_execution_and_workflow_are_not_found(
    served: tuple[LocalWorkflows, ExecutionsClient],
) -> None:
    workflows, client = served
    with pytest.raises(exceptions.NotFound):
        client.get_execution(name=workflows.workflow_name + "/executions/does-not-exist")
    with pytest.raises(exceptions.NotFound):
        client.create_execution(
            parent="projects/p1/locations/us-central1/workflows/other", execution=Execution()
        )
    with pytest.raises(exceptions.InvalidArgument):
        client.create_execution(parent=workflows.workflow_name, execution=Execution(argument="{not json"))


def test_cancel_interrupts_a_real_sleep_promptly() -> None:
    definition = "- nap:\n    call: sys.sleep\n    args:\n      seconds: 600\n- after:\n    return: 1\n"
    with LocalWorkflows(definition, clock=RealClock()) as workflows:
        started = workflows.engine.start()
        deadline = time.monotonic() + ceiling(5)
        while (
            workflows.engine.get(started.name).current_step != ("main", "nap") and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        workflows.engine.cancel(started.name)
        # The sleep is 600 s; the wait's ceiling is far below it, so ending at all is the proof.
        finished = workflows.engine.wait(started.name, timeout=ceiling(1))
        assert finished.state.name == "CANCELLED", finished.state
    assert "after" not in finished.step_names()
