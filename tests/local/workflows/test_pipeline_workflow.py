"""workflows/pipeline.yaml on the local Workflows engine, against a scripted `stage` HTTP server.

Each test runs the real definition in ``LocalWorkflows`` (callback URLs served over real HTTP,
Executions gRPC API for cancel) with a ``FakeClock``, so retry backoff and callback-wait timeouts
take no real time and are recorded. The `stage` function is a real HTTP server on 127.0.0.1 that
answers the contract of docs/workflow.md from a per-test script and records every call (op,
stage, attempt, body, and the fake time it arrived).
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
import yaml
from google.auth.credentials import AnonymousCredentials
from google.cloud.workflows.executions_v1 import ExecutionsClient
from google.cloud.workflows.executions_v1.services.executions.transports import ExecutionsGrpcTransport
from google.cloud.workflows.executions_v1.types import Execution as ApiExecution

from rlpipe.local.workflows import Execution, LocalWorkflows, State, load_workflow
from rlpipe.local.workflows.yaml_source import load_yaml
from tests.harness.patience import ceiling
from tests.harness.workflow_clock import FakeClock

ROOT = Path(__file__).resolve().parents[3]
DEFINITION = (ROOT / "workflows" / "pipeline.yaml").read_text()
STAGES = ["convert", "train", "export"]
T0 = 1_700_000_000.0

Key = tuple[str, int]  # (stage, attempt)


def failed(tag: str, message: str = "") -> dict[str, Any]:
    return {"phase": "failed", "failure": {"tag": tag, "message": message or f"{tag} failure"}}


def plan(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "skip": False,
        "skip_reason": None,
        "stages": list(STAGES),
        "cache_hit": False,
        "timeouts": {"convert": 3600, "train": 86400, "export": 3600},
        "backoff": {"initial_delay": 10.0, "max_delay": 25.0, "multiplier": 3.0},
        "max_retries": 5,
        "poll_seconds": 300,
    }
    base.update(overrides)
    return base


@dataclass
class Call:
    op: str
    stage: str | None
    attempt: int | None
    body: dict[str, Any]
    at: float  # fake time when `stage` received the request

    @property
    def key(self) -> tuple[str, str | None, int | None]:
        return (self.op, self.stage, self.attempt)


@dataclass
class StageScript:
    """What the scripted `stage` answers.

    * ``phases[(stage, attempt)]``: status replies in order (a phase string or a full reply);
      the last one repeats; unscripted attempts succeed at once.
    * ``callbacks[(stage, attempt)]``: how many times launch POSTs the attempt's callback URL
      before answering (default 1, like the artifact event that wakes the workflow).
    * ``http_errors[(op, stage, attempt)]``: HTTP error codes answered (in order) before the
      real answer, with a contract error body.
    """

    clock: FakeClock
    plan: dict[str, Any] = field(default_factory=plan)
    phases: dict[Key, list[Any]] = field(default_factory=dict)
    callbacks: dict[Key, int] = field(default_factory=dict)
    http_errors: dict[tuple[str, str | None, int | None], list[int]] = field(default_factory=dict)
    finish_code: int = 200
    cleanup_code: int = 200
    calls: list[Call] = field(default_factory=list)
    callback_urls: dict[Key, str] = field(default_factory=dict)
    callback_replies: list[int] = field(default_factory=list)
    callers: list[str | None] = field(default_factory=list)  # execution_id of every call, in order
    not_owner: set[tuple[str, str | None, int | None]] = field(default_factory=set)  # 409 not_owner
    # A sweep's child: plan answers these first (then ``plan``); select answers these in order,
    # the last one repeating.
    plans_first: list[dict[str, Any]] = field(default_factory=list)
    selects: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.callers.append(body.pop("execution_id", None))
        op = body.get("op")
        call = Call(str(op), body.get("stage"), body.get("attempt"), body, self.clock.now())
        with self._lock:
            self.calls.append(call)
            if call.key in self.not_owner:
                return 409, {"error": {"tag": "not_owner", "message": "run is driven by execution other"}}
            pending = self.http_errors.get(call.key)
            if pending:
                code = pending.pop(0)
                tag = "transient" if code in (429, 503) else "conflict"
                return code, {"error": {"tag": tag, "message": f"scripted {code} for {op}"}}
        if op == "plan":
            with self._lock:
                return 200, self.plans_first.pop(0) if self.plans_first else self.plan
        if op == "select":
            with self._lock:
                return 200, self.selects.pop(0) if len(self.selects) > 1 else self.selects[0]
        if op == "launch":
            return 200, self._launch(body)
        if op == "status":
            return 200, self._status((body["stage"], body["attempt"]))
        if op == "finish":
            if self.finish_code != 200:
                return self.finish_code, {"error": {"tag": "internal", "message": "ledger unavailable"}}
            return 200, {}
        if op == "cleanup":
            if self.cleanup_code != 200:
                return self.cleanup_code, {"error": {"tag": "internal", "message": "cluster unavailable"}}
            return 200, {"deleted": [f"{body['run_id']}-{s}-a1" for s in STAGES]}
        return 400, {"error": {"tag": "invalid", "message": f"unknown op {op!r}"}}

    def _launch(self, body: dict[str, Any]) -> dict[str, Any]:
        key = (body["stage"], body["attempt"])
        self.callback_urls[key] = body["callback_url"]
        for _ in range(self.callbacks.get(key, 1)):
            # The artifact event's callback, sent before the launch answer so that a waiting
            # await_callback finds it queued (deterministic under the auto-advancing FakeClock).
            reply = requests.post(
                body["callback_url"],
                json={"run_id": body["run_id"], "stage": key[0], "attempt": key[1], "signal": "complete"},
                timeout=5,
            )
            self.callback_replies.append(reply.status_code)
        return {"workload": f"{body['run_id']}-{key[0]}-a{key[1]}", "uid": f"uid-{key[0]}-{key[1]}"}

    def _status(self, key: Key) -> dict[str, Any]:
        with self._lock:
            script = self.phases.get(key) or ["succeeded"]
            reply = script.pop(0) if len(script) > 1 else script[0]
        return {"phase": reply, "failure": None} if isinstance(reply, str) else reply

    # --- views for assertions ------------------------------------------------------

    def keys(self) -> list[tuple[str, str | None, int | None]]:
        return [call.key for call in self.calls]

    def of(self, op: str, stage: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.op == op and (stage is None or c.stage == stage)]


class StageServer:
    """A real HTTP server on 127.0.0.1 answering POSTs from a ``StageScript``."""

    def __init__(self, script: StageScript) -> None:
        owner = script

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                code, reply = owner.answer(body)
                data = json.dumps(reply).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def setup(self) -> None:
                super().setup()
                # Headers and body go out as two writes: without TCP_NODELAY every answer waits
                # for the client's delayed ACK (~40 ms).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/stage"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> StageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Pipeline:
    script: StageScript
    stage: StageServer
    workflows: LocalWorkflows

    @property
    def clock(self) -> FakeClock:
        return self.script.clock

    def run(self, run_id: str = "r1") -> Execution:
        started = self.workflows.engine.start({"run_id": run_id})
        return self.workflows.engine.wait(started.name, timeout=ceiling(10))


@pytest.fixture
def pipeline() -> Iterator[Any]:
    """``pipeline(**script)`` -> a started ``Pipeline``; everything is stopped after the test."""
    opened: list[tuple[StageServer, LocalWorkflows]] = []

    def make(*, clock: FakeClock | None = None, **script_args: Any) -> Pipeline:
        script = StageScript(clock or FakeClock(start=T0), **script_args)
        server = StageServer(script).__enter__()
        workflows = LocalWorkflows(
            DEFINITION, workflow_id="pipeline", clock=script.clock, env={"RLPIPE_STAGE_URL": server.url}
        ).start()
        opened.append((server, workflows))
        return Pipeline(script, server, workflows)

    yield make
    for server, workflows in opened:
        workflows.stop()
        server.__exit__()


def happy_calls(stages: list[str] = STAGES) -> list[tuple[str, str | None, int | None]]:
    calls: list[tuple[str, str | None, int | None]] = [("plan", None, None)]
    for stage in stages:
        calls += [("launch", stage, 1), ("status", stage, 1)]
    return [*calls, ("cleanup", None, None), ("finish", None, None)]


def summary(stages: list[str] = STAGES, attempts: dict[str, int] | None = None) -> list[dict[str, Any]]:
    attempts = attempts or {}
    return [
        {
            "stage": s,
            "attempts": attempts.get(s, 1),
            "workload": f"r1-{s}-a{attempts.get(s, 1)}",
            "uid": f"uid-{s}-{attempts.get(s, 1)}",
        }
        for s in stages
    ]


def assert_failed_run(p: Pipeline, execution: Execution, failure: dict[str, Any]) -> None:
    """FAILED with the failure visible, cleanup called, then finish(failed) with the failure."""
    assert execution.state is State.FAILED, execution.result
    assert execution.error is not None
    assert p.script.keys()[-2:] == [("cleanup", None, None), ("finish", None, None)]
    finish = p.script.of("finish")[0].body
    assert finish == {"op": "finish", "run_id": "r1", "outcome": "failed", "failure": failure}
    assert execution.error.payload["message"] in failure["message"]  # the reason is visible
    assert execution.error.payload["message"] in execution.error.context


# --- the definition itself -----------------------------------------------------------------


def test_pipeline_yaml_loads_in_the_strict_engine_and_parses_with_plain_pyyaml() -> None:
    workflow = load_workflow(DEFINITION)  # raises LoadError on anything outside the subset
    assert set(workflow.subworkflows) == {
        "main",
        "run_stage",
        "retryable_failure",
        "call_stage",
        "refused_as_non_owner",
        "unreachable",
        "tidy_up",
        "report_failure",
        "failure_of",
        "select_in_sweep",
    }
    assert [p.name for p in workflow.main.params] == ["args"]
    plain = yaml.safe_load(DEFINITION)
    # No YAML 1.1 surprises: plain PyYAML reads exactly what the YAML 1.2 loader reads.
    assert plain == load_yaml(DEFINITION)
    # http.default_retry's predicate and backoff, with the retry count as a parameter (5, the
    # default policy's, unless the caller is the wait loop's status check).
    retry = plain["call_stage"]["steps"][1]["post"]["try"]["steps"][0]["send"]["retry"]
    assert retry == {
        "predicate": "${http.default_retry_predicate}",
        "max_retries": "${max_retries}",
        "backoff": {"initial_delay": 1, "max_delay": 60, "multiplier": 1.25},
    }
    assert plain["call_stage"]["params"] == ["body", {"max_retries": 5}]


# --- paths through a run -------------------------------------------------------------------


def test_happy_path_runs_convert_train_export_and_finishes_succeeded(pipeline: Any) -> None:
    p = pipeline()
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert execution.result == {
        "run_id": "r1",
        "outcome": "succeeded",
        "cache_hit": False,
        "stages": summary(),
    }
    assert p.script.keys() == happy_calls()
    assert p.script.of("plan")[0].body == {"op": "plan", "run_id": "r1"}
    # Every call names this execution: `stage` refuses operations from one that does not own the run.
    assert p.script.callers == [execution.execution_id] * len(p.script.calls)
    assert p.script.of("finish")[0].body == {
        "op": "finish",
        "run_id": "r1",
        "outcome": "succeeded",
        "failure": None,
    }
    prefix = f"{p.workflows.callback_base_url}/v1/{execution.name}/callbacks/"
    urls = [c.body["callback_url"] for c in p.script.of("launch")]
    assert all(url.startswith(prefix) for url in urls) and len(set(urls)) == 3
    assert p.script.callback_replies == [200, 200, 200]
    assert p.clock.sleeps == []  # no retry, no backoff
    assert p.clock.waits == [300, 300, 300]  # one await per stage, woken at once by the callback
    assert {c.at for c in p.script.calls} == {T0}  # nothing waited for a timeout


def test_cache_hit_skips_convert(pipeline: Any) -> None:
    p = pipeline(plan=plan(stages=["train", "export"], cache_hit=True))
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert p.script.keys() == happy_calls(["train", "export"])
    assert p.script.of("launch", "convert") == []
    assert execution.result["cache_hit"] is True
    assert execution.result["stages"] == summary(["train", "export"])


def test_preempted_twice_then_success_launches_attempts_1_2_3_with_capped_backoff(pipeline: Any) -> None:
    # backoff: initial 10 s, multiplier 3, max 25 s -> 10, then min(30, 25) = 25
    p = pipeline(phases={("train", 1): [failed("preempted")], ("train", 2): [failed("preempted")]})
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert [c.attempt for c in p.script.of("launch", "train")] == [1, 2, 3]
    assert [c.attempt for c in p.script.of("status", "train")] == [1, 2, 3]
    assert p.clock.sleeps == [10.0, 25.0]
    urls = [c.body["callback_url"] for c in p.script.of("launch", "train")]
    assert len(set(urls)) == 3  # a fresh callback endpoint per attempt
    assert execution.result["stages"] == summary(attempts={"train": 3})
    assert p.script.keys()[-1] == ("finish", None, None)
    assert p.script.of("finish")[0].body["outcome"] == "succeeded"


def test_preemption_budget_exhausted_fails_the_run_with_the_tag_visible(pipeline: Any) -> None:
    exhausted = "preempted 3 times: preemption budget exhausted (2 retries allowed)"
    p = pipeline(
        phases={
            ("train", 1): [failed("preempted")],
            ("train", 2): [failed("preempted")],
            ("train", 3): [failed("permanent", exhausted)],  # `stage` enforces the class budget
        }
    )
    execution = p.run()
    assert execution.error is not None
    assert execution.error.payload == {
        "tags": ["permanent"],
        "message": exhausted,
        "stage": "train",
        "attempt": 3,
    }
    assert [c.attempt for c in p.script.of("launch", "train")] == [1, 2, 3]
    assert p.script.of("launch", "export") == []
    assert p.clock.sleeps == [10.0, 25.0]  # no sleep after the permanent failure
    assert_failed_run(
        p, execution, {"tag": "permanent", "message": exhausted, "stage": "train", "attempt": 3}
    )


def test_workflow_max_retries_caps_attempts_and_keeps_the_failure_class(pipeline: Any) -> None:
    p = pipeline(
        plan=plan(max_retries=1),
        phases={
            ("train", 1): [failed("preempted", "node gone")],
            ("train", 2): [failed("preempted", "node gone")],
        },
    )
    execution = p.run()
    assert execution.error is not None
    assert execution.error.payload["tags"] == ["preempted"]
    assert [c.attempt for c in p.script.of("launch", "train")] == [1, 2]
    assert p.clock.sleeps == [10.0]
    assert_failed_run(
        p, execution, {"tag": "preempted", "message": "node gone", "stage": "train", "attempt": 2}
    )


def test_capacity_failures_are_retried_with_float_backoff(pipeline: Any) -> None:
    p = pipeline(
        plan=plan(backoff={"initial_delay": 30.5, "max_delay": 600.0, "multiplier": 1.5}),
        phases={("convert", 1): [failed("capacity", "unschedulable")], ("convert", 2): [failed("capacity")]},
    )
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert [c.attempt for c in p.script.of("launch", "convert")] == [1, 2, 3]
    assert p.clock.sleeps == [30.5, 45.75]
    assert execution.result["stages"] == summary(attempts={"convert": 3})


@pytest.mark.parametrize("tag", ["preempted", "capacity", "resources", "transient"])
def test_each_retryable_class_launches_the_next_attempt(pipeline: Any, tag: str) -> None:
    p = pipeline(phases={("export", 1): [failed(tag)]})
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert [c.attempt for c in p.script.of("launch", "export")] == [1, 2]
    assert p.clock.sleeps == [10.0]


def test_permanent_first_failure_is_not_retried(pipeline: Any) -> None:
    reason = "exit code 1 from to_huggingface (not a retryable exit code)"
    p = pipeline(phases={("export", 1): [failed("permanent", reason)]})
    execution = p.run()
    assert [c.attempt for c in p.script.of("launch", "export")] == [1]
    assert p.clock.sleeps == []
    assert execution.error is not None
    assert execution.error.payload["tags"] == ["permanent"]
    assert_failed_run(p, execution, {"tag": "permanent", "message": reason, "stage": "export", "attempt": 1})


def test_stage_503_twice_is_recovered_by_the_http_retry_without_a_new_attempt(pipeline: Any) -> None:
    p = pipeline(http_errors={("launch", "train", 1): [503, 503]})
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert [c.key for c in p.script.of("launch", "train")] == [("launch", "train", 1)] * 3
    assert p.clock.sleeps == [1.0, 1.25]  # http.default_retry: retry.default_backoff (1 s x 1.25)
    assert execution.result["stages"] == summary()
    assert (
        len({c.body["callback_url"] for c in p.script.of("launch", "train")}) == 1
    )  # one endpoint, one attempt


def test_a_refusal_from_stage_ends_the_run_with_the_message_from_its_error_body(pipeline: Any) -> None:
    p = pipeline(http_errors={("launch", "train", 1): [409]})
    execution = p.run()
    assert execution.error is not None
    payload = execution.error.payload
    assert payload["message"] == "stage launch refused (HTTP 409): scripted 409 for launch"
    assert (payload["tags"], payload["code"], payload["stage"], payload["attempt"]) == (
        ["HttpError"],
        409,
        "train",
        1,
    )
    assert len(p.script.of("launch", "train")) == 1  # a 4xx is not retried
    assert p.clock.sleeps == []
    assert_failed_run(
        p,
        execution,
        {"tag": "permanent", "message": "HttpError: " + payload["message"], "stage": "train", "attempt": 1},
    )


def test_a_refused_plan_fails_the_execution_without_touching_the_run(pipeline: Any) -> None:
    p = pipeline(http_errors={("plan", None, None): [422]})
    execution = p.run()
    assert execution.state is State.FAILED
    assert execution.error is not None
    assert execution.error.payload["message"] == "stage plan refused (HTTP 422): scripted 422 for plan"
    assert p.script.keys() == [("plan", None, None)]  # no launch, no cleanup, no finish


def test_a_lost_callback_is_caught_by_polling_after_the_await_timeout(pipeline: Any) -> None:
    p = pipeline(callbacks={("train", 1): 0}, phases={("train", 1): ["running", "succeeded"]})
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    launched_at = p.script.of("launch", "train")[0].at
    assert [c.at - launched_at for c in p.script.of("status", "train")] == [300.0, 600.0]
    assert p.clock.waits == [300, 300, 300, 300]  # convert, train (timed out twice), export
    assert p.script.of("launch", "export")[0].at == launched_at + 600


def test_a_duplicate_callback_is_harmless(pipeline: Any) -> None:
    p = pipeline(callbacks={("train", 1): 2}, phases={("train", 1): ["running", "succeeded"]})
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert p.script.callback_replies == [200, 200, 200, 200]
    assert [c.key for c in p.script.of("launch")] == [("launch", s, 1) for s in STAGES]
    statuses = p.script.of("status", "train")
    assert len(statuses) == 2  # the second callback only caused one more status check
    assert {c.at for c in statuses} == {T0}  # both woken by callbacks, no timeout
    assert p.clock.sleeps == []
    assert execution.result["stages"] == summary()
    # A callback arriving after the execution ended wakes nothing.
    late = requests.post(p.script.callback_urls[("train", 1)], json={"signal": "complete"}, timeout=5)
    assert late.status_code == 404


def test_stage_deadline_turns_into_a_permanent_failure(pipeline: Any) -> None:
    p = pipeline(
        plan=plan(timeouts={"convert": 3600, "train": 1000, "export": 3600}),
        callbacks={("train", 1): 0},
        phases={("train", 1): ["running"]},
    )
    execution = p.run()
    launched_at = p.script.of("launch", "train")[0].at
    assert [c.at - launched_at for c in p.script.of("status", "train")] == [300.0, 600.0, 900.0, 1000.0]
    assert p.clock.waits[1:] == [300, 300, 300, 100]  # the last wait ends at the deadline
    assert [c.attempt for c in p.script.of("launch", "train")] == [1]
    assert execution.error is not None
    assert execution.error.payload == {
        "tags": ["permanent"],
        "message": "deadline exceeded",
        "stage": "train",
        "attempt": 1,
        "deadline_seconds": 1000,
    }
    assert_failed_run(
        p, execution, {"tag": "permanent", "message": "deadline exceeded", "stage": "train", "attempt": 1}
    )


def test_no_retry_is_launched_once_the_backoff_passes_the_deadline(pipeline: Any) -> None:
    p = pipeline(
        plan=plan(
            timeouts={"convert": 3600, "train": 100, "export": 3600},
            backoff={"initial_delay": 200.0, "max_delay": 600.0, "multiplier": 2.0},
        ),
        phases={("train", 1): [failed("preempted")]},
    )
    execution = p.run()
    assert [c.attempt for c in p.script.of("launch", "train")] == [1]
    assert p.clock.sleeps == [200.0]
    assert execution.error is not None
    assert execution.error.payload["message"] == "deadline exceeded"
    assert_failed_run(
        p, execution, {"tag": "permanent", "message": "deadline exceeded", "stage": "train", "attempt": 1}
    )


def test_stage_unreachable_while_waiting_keeps_polling_instead_of_failing(pipeline: Any) -> None:
    p = pipeline(http_errors={("status", "train", 1): [503] * 6})
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    # A status check is one HTTP call (no retry inside it, so it costs at most one timeout):
    # the wait loop itself polls again after each unreachable answer.
    assert p.clock.sleeps == []
    assert len(p.script.of("status", "train")) == 7
    assert [c.attempt for c in p.script.of("launch", "train")] == [1]
    assert [log.payload["event"] for log in execution.logs] == ["status_unreachable"] * 6


def test_failures_inside_the_except_handler_do_not_hide_the_original_error(pipeline: Any) -> None:
    p = pipeline(
        phases={("convert", 1): [failed("permanent", "image pull failed")]}, cleanup_code=500, finish_code=500
    )
    execution = p.run()
    assert execution.state is State.FAILED
    assert execution.error is not None
    assert execution.error.payload == {
        "tags": ["permanent"],
        "message": "image pull failed",
        "stage": "convert",
        "attempt": 1,
    }
    assert p.script.keys()[-2:] == [("cleanup", None, None), ("finish", None, None)]
    assert [log.payload["event"] for log in execution.logs] == ["cleanup_failed", "failure_report_failed"]


def test_plan_skip_returns_without_launch_or_finish(pipeline: Any) -> None:
    p = pipeline(plan=plan(skip=True, skip_reason="run r1 is owned by another execution"))
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert execution.result == {
        "run_id": "r1",
        "outcome": "skipped",
        "skip_reason": "run r1 is owned by another execution",
    }
    assert p.script.keys() == [("plan", None, None)]


def test_cancel_mid_train_ends_cancelled_and_rlpipe_cancel_cleans_up(pipeline: Any) -> None:
    # Waits block (no auto-advance) so the execution sits in train's await until cancelled.
    p = pipeline(clock=FakeClock(start=T0, auto_advance_waits=False), callbacks={("train", 1): 0})
    channel = grpc.insecure_channel(p.workflows.grpc_target)
    client = ExecutionsClient(
        transport=ExecutionsGrpcTransport(channel=channel, credentials=AnonymousCredentials())
    )
    try:
        created = client.create_execution(
            parent=p.workflows.workflow_name, execution=ApiExecution(argument=json.dumps({"run_id": "r1"}))
        )
        for _ in range(500):
            if p.script.of("launch", "train") and p.workflows.engine.get(created.name).current_step == (
                "run_stage",
                "wait_for_event",
            ):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the execution never reached train's wait")
        # What `rlpipe cancel` does: cancel the execution, then ask `stage` to clean up and to
        # record the outcome (Workflows runs no except block on cancellation).
        assert client.cancel_execution(name=created.name).state == ApiExecution.State.CANCELLED
        execution = p.workflows.engine.wait(created.name, timeout=ceiling(5))
        by_workflow = p.script.keys()
        cleaned = requests.post(p.stage.url, json={"op": "cleanup", "run_id": "r1"}, timeout=5)
        finished = requests.post(
            p.stage.url,
            json={"op": "finish", "run_id": "r1", "outcome": "cancelled", "failure": None},
            timeout=5,
        )
    finally:
        channel.close()
    assert execution.state is State.CANCELLED
    assert by_workflow == [
        ("plan", None, None),
        ("launch", "convert", 1),
        ("status", "convert", 1),
        ("launch", "train", 1),
    ]  # no status after the cancel, no cleanup, no finish from the workflow
    assert cleaned.status_code == 200
    assert cleaned.json()["deleted"] == ["r1-convert-a1", "r1-train-a1", "r1-export-a1"]
    assert finished.status_code == 200
    assert p.script.keys()[len(by_workflow) :] == [("cleanup", None, None), ("finish", None, None)]
    assert "report" not in execution.step_names()  # no except ran


def test_an_execution_that_does_not_own_the_run_stops_without_cleanup_or_finish(pipeline: Any) -> None:
    # `stage` answers 409 not_owner when another execution drives the run (lease takeover):
    # this one must not delete the live attempt's workloads or end the run.
    p = pipeline(not_owner={("launch", "train", 1)})
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert execution.result["outcome"] == "not_owner"
    assert "not_owner" not in [c.op for c in p.script.calls]
    assert not p.script.of("cleanup") and not p.script.of("finish")


# --- a sweep's child: queued at plan, waiting at select -------------------------------------------


def test_a_queued_sweep_child_plans_again_after_each_pause_and_launches_nothing_meanwhile(
    pipeline: Any,
) -> None:
    queued = {"skip": False, "wait": True, "wait_reason": "queued: all 2 slots in use", "wait_seconds": 45}
    p = pipeline(plans_first=[queued, queued])
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.result
    plans = p.script.of("plan")
    assert len(plans) == 3
    assert [round(b.at - a.at) for a, b in itertools.pairwise(plans)] == [45, 45]
    first_launch = p.script.of("launch")[0]
    assert first_launch.at >= plans[-1].at  # nothing ran while it was queued
    assert p.script.keys()[2:] == happy_calls()


def test_a_sweep_child_not_selected_leaves_before_publish_and_ends_succeeded(pipeline: Any) -> None:
    waiting = {"wait": True, "selected": None, "reason": "waiting for children 1 to finish"}
    lost = {
        "wait": False,
        "selected": False,
        "reason": "not selected: child 2 has the highest post_mean_reward",
    }
    p = pipeline(
        plan=plan(stages=[*STAGES, "select", "publish"], timeouts={**plan()["timeouts"], "publish": 600}),
        selects=[waiting, waiting, lost],
    )
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.result
    assert not p.script.of("launch", "publish")
    selects = p.script.of("select")
    assert len(selects) == 3
    assert [round(b.at - a.at) for a, b in itertools.pairwise(selects)] == [300, 300]
    finish = p.script.of("finish")[-1].body
    assert finish["outcome"] == "succeeded"
    assert execution.result["stages"][-1] == {"stage": "select", "selected": False, "reason": lost["reason"]}


def test_the_selected_sweep_child_goes_on_to_publish(pipeline: Any) -> None:
    won = {"wait": False, "selected": True, "reason": "child 2 has the highest post_mean_reward"}
    p = pipeline(
        plan=plan(stages=[*STAGES, "select", "publish"], timeouts={**plan()["timeouts"], "publish": 600}),
        selects=[won],
    )
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.result
    assert [c.key for c in p.script.calls if c.op in ("select", "launch")] == [
        ("launch", "convert", 1),
        ("launch", "train", 1),
        ("launch", "export", 1),
        ("select", None, None),
        ("launch", "publish", 1),
    ]
