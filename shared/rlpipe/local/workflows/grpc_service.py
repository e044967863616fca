"""The Workflows Executions API (``google.cloud.workflows.executions.v1.Executions``) over gRPC.

The production Python client (``ExecutionsClient``) only speaks gRPC, so serving
this API lets the pipeline's real client code start, read, list and cancel local
executions.  Messages are the proto-plus classes shipped in
``google-cloud-workflows``; a generic handler maps each method to the engine.

Behaviour from https://cloud.google.com/workflows/docs/reference/executions/rest:
``argument``/``result``/``error.payload`` are JSON strings; ``ListExecutions``
defaults to the BASIC view (name, start/end time, duration, state, revision)
and lists newest first; ``GetExecution`` defaults to FULL.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any

import grpc
from google.cloud.workflows.executions_v1.types import executions as pb

from .engine import Engine, Execution, ExecutionNotActive, ExecutionNotFound, State

SERVICE = "google.cloud.workflows.executions.v1.Executions"
_STATES = {
    State.ACTIVE: pb.Execution.State.ACTIVE,
    State.SUCCEEDED: pb.Execution.State.SUCCEEDED,
    State.FAILED: pb.Execution.State.FAILED,
    State.CANCELLED: pb.Execution.State.CANCELLED,
}
_MAX_PAGE = {pb.ExecutionView.BASIC: 1000, pb.ExecutionView.FULL: 100}


def _timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def to_proto(engine: Engine, execution: Execution, view: int) -> pb.Execution:
    """``view``: a ``pb.ExecutionView`` value (the generated enums are ints)."""
    message = pb.Execution(
        name=execution.name,
        state=_STATES[execution.state],
        start_time=_timestamp(execution.start_time),
        workflow_revision_id=engine.revision_id,
    )
    if execution.end_time is not None:
        message.end_time = _timestamp(execution.end_time)
        message.duration = dt.timedelta(seconds=max(0.0, execution.end_time - execution.start_time))
    if view == pb.ExecutionView.BASIC:
        return message
    if execution.argument is not None:
        message.argument = json.dumps(execution.argument)
    if execution.state is State.SUCCEEDED:
        message.result = json.dumps(execution.result)
    if execution.error is not None:
        message.error = pb.Execution.Error(
            payload=execution.error.payload_json,
            context=execution.error.context,
            stack_trace=pb.Execution.StackTrace(
                elements=[
                    pb.Execution.StackTraceElement(step=s, routine=r) for r, s in execution.error.frames
                ]
            ),
        )
    if execution.current_step is not None:
        routine, step = execution.current_step
        message.status = pb.Execution.Status(
            current_steps=[pb.Execution.Status.Step(routine=routine, step=step)]
        )
    return message


class ExecutionsService:
    """Routes Executions RPCs to the engine that owns each workflow."""

    def __init__(self, engines: Mapping[str, Engine]) -> None:
        self._engines = {engine.workflow_name: engine for engine in engines.values()}

    def _engine(self, workflow_name: str, context: grpc.ServicerContext) -> Engine:
        engine = self._engines.get(workflow_name)
        if engine is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"workflow {workflow_name} not found")
        return engine

    def _execution(self, name: str, context: grpc.ServicerContext) -> tuple[Engine, Execution]:
        engine = self._engine(name.split("/executions/")[0], context)
        try:
            return engine, engine.get(name)
        except ExecutionNotFound:
            context.abort(grpc.StatusCode.NOT_FOUND, f"execution {name} not found")
            raise  # unreachable: abort raises

    def create_execution(
        self, request: pb.CreateExecutionRequest, context: grpc.ServicerContext
    ) -> pb.Execution:
        engine = self._engine(request.parent, context)
        argument: Any = None
        if request.execution.argument:
            try:
                argument = json.loads(request.execution.argument)
            except ValueError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"argument is not valid JSON: {exc}")
        return to_proto(engine, engine.start(argument), pb.ExecutionView.FULL)

    def get_execution(self, request: pb.GetExecutionRequest, context: grpc.ServicerContext) -> pb.Execution:
        engine, execution = self._execution(request.name, context)
        view = request.view or pb.ExecutionView.FULL
        return to_proto(engine, execution, view)

    def list_executions(
        self, request: pb.ListExecutionsRequest, context: grpc.ServicerContext
    ) -> pb.ListExecutionsResponse:
        engine = self._engine(request.parent, context)
        view = request.view or pb.ExecutionView.BASIC
        executions = engine.executions()
        if request.filter:
            executions = [e for e in executions if _matches(request.filter, e, context)]
        if request.order_by not in ("", "createTime desc", "startTime desc"):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"order_by {request.order_by!r} is not supported locally"
            )
        page_size = min(request.page_size or 100, _MAX_PAGE[view])
        start = int(request.page_token) if request.page_token.isdigit() else 0
        page = executions[start : start + page_size]
        next_token = str(start + page_size) if start + page_size < len(executions) else ""
        return pb.ListExecutionsResponse(
            executions=[to_proto(engine, e, view) for e in page], next_page_token=next_token
        )

    def cancel_execution(
        self, request: pb.CancelExecutionRequest, context: grpc.ServicerContext
    ) -> pb.Execution:
        engine, _ = self._execution(request.name, context)
        try:
            execution = engine.cancel(request.name)
        except ExecutionNotActive as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return to_proto(engine, execution, pb.ExecutionView.FULL)

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(
            fn: Callable[[Any, grpc.ServicerContext], Any], request: Any, response: Any
        ) -> grpc.RpcMethodHandler[Any, Any]:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=request.deserialize, response_serializer=response.serialize
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "CreateExecution": unary(self.create_execution, pb.CreateExecutionRequest, pb.Execution),
                "GetExecution": unary(self.get_execution, pb.GetExecutionRequest, pb.Execution),
                "ListExecutions": unary(
                    self.list_executions, pb.ListExecutionsRequest, pb.ListExecutionsResponse
                ),
                "CancelExecution": unary(self.cancel_execution, pb.CancelExecutionRequest, pb.Execution),
            },
        )


def _matches(expression: str, execution: Execution, context: grpc.ServicerContext) -> bool:
    """The one filter supported locally: ``state="SUCCEEDED"`` (quotes optional)."""
    key, _, value = expression.partition("=")
    if key.strip() != "state" or not value.strip():
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"filter {expression!r} is not supported locally")
    return execution.state.value == value.strip().strip('"')


class ExecutionsServer:
    """A gRPC server on 127.0.0.1 (port 0 picks a free port)."""

    def __init__(self, engines: Mapping[str, Engine], port: int = 0, host: str = "127.0.0.1") -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="wf-grpc"))
        self._server.add_generic_rpc_handlers((ExecutionsService(engines).handler(),))
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        self.host = host

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float = 1.0) -> None:
        self._server.stop(grace).wait()
