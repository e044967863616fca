"""try/retry/except and http.* against real local HTTP servers, with a fake clock for backoff."""

from __future__ import annotations

import json
from typing import Any

import google.auth.jwt
from test_workflows_engine_support import Reply, ScriptedServer, error_of, refused_url, result_of, run

from rlpipe.local.identities import published_certs
from rlpipe.local.workflows import State
from tests.harness.workflow_clock import FakeClock

ENGINE_ACCOUNT = "rlpipe-workflow@my-project.iam.gserviceaccount.com"

ALWAYS_RETRY = """
main:
  steps:
    - init:
        assign:
          - attempts: 0
    - flaky:
        try:
          steps:
            - count:
                assign:
                  - attempts: ${attempts + 1}
            - fail:
                raise:
                  code: 500
                  message: ${"attempt " + string(attempts)}
        retry:
          predicate: ${always}
          max_retries: MAX
          backoff:
            initial_delay: INITIAL
            max_delay: MAXDELAY
            multiplier: MULT
        except:
          as: e
          steps:
            - give_up:
                return: [ '${attempts}', '${e.message}' ]
always:
  params: [e]
  steps:
    - yes:
        return: true
"""


def _always(max_retries: int, initial: float, max_delay: float, multiplier: float) -> str:
    return (
        ALWAYS_RETRY.replace("MAXDELAY", str(max_delay))
        .replace("MAX", str(max_retries))
        .replace("INITIAL", str(initial))
        .replace("MULT", str(multiplier))
    )


def test_backoff_delays_grow_by_multiplier_and_are_capped_at_max_delay() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/retrying (delays 1, 2, 4, 8, 16, 32, 60, 60 for initial 1, multiplier 2, max 60)
    clock = FakeClock()
    assert result_of(_always(8, 1, 60, 2), clock=clock) == [9, "attempt 9"]
    assert clock.sleeps == [1, 2, 4, 8, 16, 32, 60, 60]


def test_backoff_accepts_float_delays_and_multipliers() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/retrying (DELAY_SECONDS / DELAY_MULTIPLIER)
    clock = FakeClock()
    assert result_of(_always(3, 0.5, 1.0, 1.5), clock=clock) == [4, "attempt 4"]
    assert clock.sleeps == [0.5, 0.75, 1.0]


def test_max_retries_caps_the_number_of_attempts() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/retrying (max_retries: maximum number of retry attempts)
    clock = FakeClock()
    assert result_of(_always(2, 1, 10, 2), clock=clock) == [3, "attempt 3"]
    assert clock.sleeps == [1, 2]
    clock = FakeClock()
    assert result_of(_always(0, 1, 10, 2), clock=clock) == [1, "attempt 1"]
    assert clock.sleeps == []


def test_predicate_returning_false_stops_retrying_and_the_error_propagates() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/retrying (a custom predicate subworkflow decides)
    definition = """
    main:
      steps:
        - init:
            assign:
              - attempts: 0
        - flaky:
            try:
              steps:
                - count:
                    assign:
                      - attempts: ${attempts + 1}
                - fail:
                    raise:
                      code: ${if(attempts < 3, 503, 400)}
                      message: ${"attempt " + string(attempts)}
            retry:
              predicate: ${only_503}
              max_retries: 10
              backoff:
                initial_delay: 1
                max_delay: 10
                multiplier: 2
    only_503:
      params: [e]
      steps:
        - decide:
            return: ${e.code == 503}
    """
    clock = FakeClock()
    execution = run(definition, clock=clock)
    assert execution.state is State.FAILED
    assert execution.error.payload == {"code": 400, "message": "attempt 3"}
    assert clock.sleeps == [1, 2]  # two retries for the 503s, none for the 400


def test_http_error_from_a_real_server_is_caught_with_tags_and_code() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/catching-errors (HttpError map: tags, message, code, headers, body)
    definition = """
    main:
      params: [args]
      steps:
        - fetch:
            try:
              call: http.get
              args:
                url: ${args.url}
              result: response
            except:
              as: e
              steps:
                - report:
                    return:
                      tags: ${e.tags}
                      code: ${e.code}
                      body: ${e.body}
                      content_type: ${e.headers["Content-Type"]}
                      is_http: ${"HttpError" in e.tags}
    """
    with ScriptedServer(Reply(404, {"error": "no such run"})) as server:
        result = result_of(definition, {"url": server.url + "/runs/r1"})
    assert result == {
        "tags": ["HttpError"],
        "code": 404,
        "body": {"error": "no such run"},
        "content_type": "application/json",
        "is_http": True,
    }


def test_http_post_sends_json_body_query_and_headers_and_decodes_json_response(signed_calls: Any) -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/post (body JSON-encoded with application/json; result has body, code, headers)
    definition = """
    main:
      params: [args]
      steps:
        - send:
            call: http.post
            args:
              url: ${args.url + "/stage"}
              auth:
                type: OIDC
              headers:
                X-Run: r1
              query:
                attempt: 2
                flags: [a, b]
              body:
                run_id: r1
                ratio: 0.5
              timeout: 30
            result: response
        - done:
            return: [ '${response.code}', '${response.body}' ]
    """
    with ScriptedServer(Reply(201, {"launched": True})) as server:
        result = result_of(definition, {"url": server.url}, service_account=ENGINE_ACCOUNT)
        request = server.received[0]
    assert result == [201, {"launched": True}]
    assert request.method == "POST"
    assert request.path == "/stage?attempt=2&flags=a&flags=b"
    assert request.headers["Content-Type"] == "application/json; charset=utf-8"
    assert request.headers["X-Run"] == "r1"
    # auth: OIDC attaches an ID token naming the workflow's service account, for the URL (the
    # default audience), signed by the stack's key: it verifies against its published certificate.
    scheme, _, token = request.headers["Authorization"].partition(" ")
    certs = json.loads(published_certs(signed_calls.key_path))
    claims = google.auth.jwt.decode(token, certs=certs, audience=server.url + "/stage")
    assert scheme == "Bearer" and claims["email"] == ENGINE_ACCOUNT
    assert claims["aud"] == server.url + "/stage"
    assert json.loads(request.body) == {"run_id": "r1", "ratio": 0.5}


def test_default_retry_recovers_from_two_503s() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/default_retry (retries 503; max_retries 5; retry.default_backoff 1 s x 1.25)
    definition = """
    main:
      params: [args]
      steps:
        - fetch:
            try:
              call: http.get
              args:
                url: ${args.url}
              result: response
            retry: ${http.default_retry}
        - done:
            return: ${response.body}
    """
    clock = FakeClock()
    with ScriptedServer(Reply(503, {"busy": 1}), Reply(503, {"busy": 2}), Reply(200, {"ok": True})) as server:
        assert result_of(definition, {"url": server.url}, clock=clock) == {"ok": True}
        assert len(server.received) == 3
    assert clock.sleeps == [1.0, 1.25]


def test_default_retry_does_not_retry_500() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/default_retry (only 429, 502, 503, 504 and connection/timeout errors)
    definition = """
    main:
      params: [args]
      steps:
        - fetch:
            try:
              call: http.get
              args:
                url: ${args.url}
            retry: ${http.default_retry}
    """
    clock = FakeClock()
    with ScriptedServer(Reply(500, {"bug": True})) as server:
        error = error_of(definition, {"url": server.url}, clock=clock)
        assert len(server.received) == 1
    assert (error["code"], error["tags"]) == (500, ["HttpError"])
    assert clock.sleeps == []


def test_connection_refused_raises_connection_failed_error_retried_by_default_predicate() -> None:
    # https://cloud.google.com/workflows/docs/reference/syntax/error-types (ConnectionFailedError: connection not established)
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/default_retry_predicate (retries ConnectionError, ConnectionFailedError)
    definition = """
    main:
      params: [args]
      steps:
        - fetch:
            try:
              call: http.get
              args:
                url: ${args.url}
            retry:
              predicate: ${http.default_retry_predicate}
              max_retries: 3
              backoff:
                initial_delay: 2
                max_delay: 60
                multiplier: 2
            except:
              as: e
              steps:
                - report:
                    return: ${e.tags}
    """
    clock = FakeClock()
    assert result_of(definition, {"url": refused_url()}, clock=clock) == ["ConnectionFailedError"]
    assert clock.sleeps == [2, 4, 8]


def test_http_timeout_raises_timeout_error() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/get ("If the request takes longer than the timeout, a TimeoutError is raised")
    definition = """
    main:
      params: [args]
      steps:
        - fetch:
            call: http.get
            args:
              url: ${args.url}
              timeout: 0.1
    """
    with ScriptedServer(Reply(200, {"late": True}, delay=0.6)) as server:
        assert error_of(definition, {"url": server.url})["tags"] == ["TimeoutError"]


def test_invalid_auth_audience_is_rejected_when_computed_at_runtime() -> None:
    # https://cloud.google.com/workflows/docs/reference/stdlib/http/post (auth.audience: a string). auth
    # itself is a map written in the definition (refused at load otherwise); its audience may be computed.
    definition = """
    main:
      params: [args]
      steps:
        - fetch:
            call: http.get
            args:
              url: ${args.url}
              auth:
                type: OIDC
                audience: ${args.audience}
    """
    with ScriptedServer(Reply(200, {})) as server:
        error = error_of(definition, {"url": server.url, "audience": 5})
        assert server.received == []
    assert error["tags"] == ["ValueError"]
