"""Callbacks: events.create_callback_endpoint / events.await_callback, over real HTTP."""

from __future__ import annotations

import textwrap
import time

import requests
from test_workflows_engine_support import result_of

from rlpipe.local.workflows import Engine, LocalWorkflows, State
from tests.harness.patience import ceiling
from tests.harness.workflow_clock import FakeClock

AWAIT_AND_RETURN = """
main:
  params: [args]
  steps:
    - create:
        call: events.create_callback_endpoint
        args:
          http_callback_method: METHOD
        result: callback
    - announce:
        call: sys.log
        args:
          text: ${callback.url}
    - wait:
        call: events.await_callback
        args:
          callback: ${callback}
          timeout: 3600
        result: request
    - done:
        return: ${request}
"""


def _wait_for_url(workflows: LocalWorkflows, name: str) -> str:
    deadline = time.monotonic() + ceiling(5)
    while time.monotonic() < deadline:
        logs = workflows.engine.get(name).logs
        if logs:
            return str(logs[0].payload)
        time.sleep(0.01)
    raise AssertionError("the workflow never logged its callback URL")


def test_await_callback_timeout_raises_timeout_error() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/events/await_callback (TimeoutError "In case of a timeout")
    definition = """
    - create:
        call: events.create_callback_endpoint
        result: callback
    - wait:
        try:
          call: events.await_callback
          args:
            callback: ${callback}
            timeout: 300
        except:
          as: e
          steps:
            - timed_out:
                return: ${e.tags}
    """
    clock = FakeClock(start=1000.0)
    assert result_of(definition, clock=clock) == ["TimeoutError"]
    assert clock.waits == [300]
    assert clock.now() == 1300.0  # the fake clock jumped to the deadline instead of waiting


def test_callback_sent_before_await_is_delivered_not_lost() -> None:
    # https://cloud.google.com/workflows/docs/reference/executions/rest/v1/projects.locations.workflows.executions.callbacks/list
    # (Callback.availablePayloads: "payloads received by the callback that have not been processed by a waiting execution step")
    definition = """
    main:
      steps:
        - create:
            call: events.create_callback_endpoint
            result: callback
        - send_early:
            call: http.post
            args:
              url: ${callback.url}
              body:
                verdict: done
            result: sent
        - wait:
            call: events.await_callback
            args:
              callback: ${callback}
              timeout: 60
            result: request
        - done:
            return: [ '${sent.code}', '${request.http_request.body}' ]
    """
    clock = FakeClock()
    with LocalWorkflows(textwrap.dedent(definition), clock=clock) as workflows:
        execution = workflows.engine.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert execution.result == [200, {"verdict": "done"}]


def test_callback_posted_over_http_resumes_the_execution_with_the_request() -> None:
    # https://cloud.google.com/workflows/docs/creating-callback-endpoints (the request's headers, body and query map are available)
    clock = FakeClock(auto_advance_waits=False)
    with LocalWorkflows(AWAIT_AND_RETURN.replace("METHOD", "POST"), clock=clock) as workflows:
        started = workflows.engine.start({"run": "r1"})
        url = _wait_for_url(workflows, started.name)
        assert url.startswith(workflows.callback_base_url + "/v1/" + started.name + "/callbacks/")
        response = requests.post(
            url, params={"attempt": "2"}, json={"stage": "convert", "ok": True}, timeout=5
        )
        assert response.status_code == 200
        execution = workflows.engine.wait(started.name)
    assert execution.state is State.SUCCEEDED, execution.error
    request = execution.result["http_request"]
    assert request["body"] == {"stage": "convert", "ok": True}
    assert request["method"] == "POST"
    assert request["query"] == {"attempt": ["2"]}
    assert request["headers"]["Content-Type"] == "application/json"
    assert execution.result["type"] == "HTTP"


def test_callback_answers_404_when_unknown_or_finished_and_405_for_other_methods() -> None:
    # https://cloud.google.com/workflows/docs/creating-callback-endpoints (an endpoint expects the specified HTTP method)
    clock = FakeClock(auto_advance_waits=False)
    with LocalWorkflows(AWAIT_AND_RETURN.replace("METHOD", "PUT"), clock=clock) as workflows:
        started = workflows.engine.start()
        url = _wait_for_url(workflows, started.name)
        assert requests.post(url, json={}, timeout=5).status_code == 405
        assert requests.put(url.rsplit("/", 1)[0] + "/unknown", json={}, timeout=5).status_code == 404
        assert requests.put(url, json={"n": 1}, timeout=5).status_code == 200
        finished = workflows.engine.wait(started.name)
        assert finished.result["http_request"]["method"] == "PUT"
        assert requests.put(url, json={"n": 2}, timeout=5).status_code == 404


def test_callback_can_only_be_awaited_by_the_execution_that_created_it() -> None:
    # https://cloud.google.com/workflows/docs/creating-callback-endpoints (callbacks belong to their execution)
    definition = """
    main:
      params: [args]
      steps:
        - wait:
            call: events.await_callback
            args:
              callback: ${args}
              timeout: 1
    """
    engine = Engine(textwrap.dedent(definition), clock=FakeClock())
    try:
        foreign = engine.callbacks.create("projects/p/locations/l/workflows/w/executions/other", "POST")
        execution = engine.run(foreign)
    finally:
        engine.shutdown()
    assert execution.state is State.FAILED
    assert execution.error.payload["tags"] == ["ValueError"]


def test_concurrent_executions_each_receive_their_own_callback() -> None:
    # https://cloud.google.com/workflows/docs/creating-callback-endpoints (each endpoint belongs to one execution)
    clock = FakeClock(auto_advance_waits=False)
    with LocalWorkflows(AWAIT_AND_RETURN.replace("METHOD", "POST"), clock=clock) as workflows:
        started = [workflows.engine.start({"i": i}) for i in range(3)]
        urls = [_wait_for_url(workflows, execution.name) for execution in started]
        for i in reversed(range(3)):
            assert requests.post(urls[i], json={"for": i}, timeout=5).status_code == 200
        results = [workflows.engine.wait(execution.name).result for execution in started]
    assert [r["http_request"]["body"] for r in results] == [{"for": 0}, {"for": 1}, {"for": 2}]
