"""``LocalWorkflows``: the engine plus its two servers, started and stopped together.

Usage::

    with LocalWorkflows(Path("workflows/pipeline.yaml").read_text(), workflow_id="pipeline") as wf:
        client = ExecutionsClient(transport=ExecutionsGrpcTransport(channel=grpc.insecure_channel(wf.grpc_target)))
        client.create_execution(parent=wf.workflow_name, execution=Execution(argument='{"run_id": "r1"}'))
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

from .callback_server import CallbackServer
from .callbacks import CallbackRegistry
from .clock import Clock, RealClock
from .engine import DEFAULT_SERVICE_ACCOUNT, Engine
from .grpc_service import ExecutionsServer


class LocalWorkflows:
    """Serves one workflow: executions over gRPC and callback URLs over HTTP."""

    def __init__(
        self,
        definition: str,
        *,
        workflow_id: str = "workflow",
        project: str = "local-project",
        location: str = "us-central1",
        clock: Clock | None = None,
        env: Mapping[str, str] | None = None,
        grpc_port: int = 0,
        callback_port: int = 0,
        service_account: str | None = None,
    ) -> None:
        """``service_account``: the workflow's identity (its OIDC tokens name it); the engine's
        default when None."""
        self.clock: Clock = clock or RealClock()
        self.callbacks = CallbackRegistry()
        self._callback_server = CallbackServer(self.callbacks, self.clock, port=callback_port)
        self.engine = Engine(
            definition,
            workflow_id=workflow_id,
            project=project,
            location=location,
            clock=self.clock,
            env=env,
            callbacks=self.callbacks,
            service_account=service_account or DEFAULT_SERVICE_ACCOUNT,
        )
        self._grpc_server = ExecutionsServer({workflow_id: self.engine}, port=grpc_port)
        self._started = False

    @property
    def grpc_target(self) -> str:
        """``host:port`` for ``grpc.insecure_channel``."""
        return self._grpc_server.target

    @property
    def callback_base_url(self) -> str:
        return self._callback_server.base_url

    @property
    def workflow_name(self) -> str:
        return self.engine.workflow_name

    def start(self) -> LocalWorkflows:
        if not self._started:
            self._callback_server.start()
            self._grpc_server.start()
            self._started = True
        return self

    def stop(self) -> None:
        if not self._started:
            return
        self._grpc_server.stop()
        self.engine.shutdown()
        self._callback_server.stop()
        self._started = False

    def __enter__(self) -> LocalWorkflows:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
