"""A minimal gRPC Executions servicer that records calls, so the real ExecutionsClient is exercised.

Built from grpcio's generic handlers and the proto-plus message classes shipped in
google-cloud-workflows; it validates what it receives (parent path, JSON argument).
"""

from __future__ import annotations

import itertools
import json
import threading
from concurrent import futures
from typing import Any

import grpc
from google.cloud.workflows.executions_v1 import types

SERVICE = "google.cloud.workflows.executions.v1.Executions"


class RecordingExecutions:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.executions: dict[str, types.Execution] = {}
        self.fail_next: list[grpc.StatusCode] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: grpc.Server | None = None
        self.port = 0

    # -- handlers --
    def _create(
        self, request: types.CreateExecutionRequest, context: grpc.ServicerContext
    ) -> types.Execution:
        with self._lock:
            self.calls.append(("create", request))
            if self.fail_next:
                context.abort(self.fail_next.pop(0), "injected failure")
            if not request.parent.startswith("projects/") or "/workflows/" not in request.parent:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad parent {request.parent}")
            try:
                json.loads(request.execution.argument)
            except ValueError:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "argument is not JSON")
            name = f"{request.parent}/executions/exec-{next(self._ids)}"
            execution = types.Execution(
                name=name, argument=request.execution.argument, state=types.Execution.State.ACTIVE
            )
            self.executions[name] = execution
            return execution

    def _get(self, request: types.GetExecutionRequest, context: grpc.ServicerContext) -> types.Execution:
        with self._lock:
            self.calls.append(("get", request))
            if request.name not in self.executions:
                context.abort(grpc.StatusCode.NOT_FOUND, request.name)
            return self.executions[request.name]

    def _cancel(
        self, request: types.CancelExecutionRequest, context: grpc.ServicerContext
    ) -> types.Execution:
        with self._lock:
            self.calls.append(("cancel", request))
            execution = self.executions.get(request.name)
            if execution is None:
                context.abort(grpc.StatusCode.NOT_FOUND, request.name)
            if execution.state != types.Execution.State.ACTIVE:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "execution is not active")
            execution.state = types.Execution.State.CANCELLED
            return execution

    def reset(self) -> RecordingExecutions:
        """As new, for the next test of a module whose function processes name this server."""
        with self._lock:
            self.calls.clear()
            self.executions.clear()
            self.fail_next.clear()
            self._ids = itertools.count(1)
        return self

    def creates(self) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(r.execution.argument) for op, r in self.calls if op == "create"]

    def start(self) -> RecordingExecutions:
        def handler(fn: Any, req_cls: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req_cls.deserialize, response_serializer=types.Execution.serialize
            )

        generic = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "CreateExecution": handler(self._create, types.CreateExecutionRequest),
                "GetExecution": handler(self._get, types.GetExecutionRequest),
                "CancelExecution": handler(self._cancel, types.CancelExecutionRequest),
            },
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self._server.add_generic_rpc_handlers((generic,))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._server:
            self._server.stop(grace=None)
