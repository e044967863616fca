"""Workflows executions: start one per run, cancel, read state, and wake a waiting one (callback).

The production ``ExecutionsClient`` (gRPC) is used everywhere; locally its channel points at the
engine's Executions server instead of Google's, so the same code path is exercised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlpipe.core.failures import PermanentFailure, TransientFailure

if TYPE_CHECKING:
    from rlpipe.control.adapters.settings import Settings

CALLBACK_TIMEOUT_SECONDS = 10
# Deadline of one Executions API call (including the client's own retries). Shorter than the
# start lease (docs/timeouts.md): a holder never outlives its lease waiting for Workflows.
API_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class ExecutionInfo:
    name: str
    state: str  # ACTIVE | SUCCEEDED | FAILED | CANCELLED | ...
    result: Any = None
    error: str | None = None


class Orchestrator:
    def __init__(self, settings: Settings, client: Any = None):
        self.settings = settings
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            from google.cloud.workflows import executions_v1

            if self.settings.workflows_endpoint:
                import grpc
                from google.auth.credentials import AnonymousCredentials
                from google.cloud.workflows.executions_v1.services.executions.transports import (
                    ExecutionsGrpcTransport,
                )

                channel = grpc.insecure_channel(self.settings.workflows_endpoint)
                self._client = executions_v1.ExecutionsClient(
                    transport=ExecutionsGrpcTransport(channel=channel, credentials=AnonymousCredentials())
                )
            else:
                self._client = executions_v1.ExecutionsClient()
        return self._client

    def start(self, run_id: str) -> str:
        from google.api_core import exceptions as gexc
        from google.cloud.workflows.executions_v1 import Execution

        try:
            execution = self.client.create_execution(
                parent=self.settings.workflow_path,
                execution=Execution(argument=json.dumps({"run_id": run_id})),
                timeout=API_TIMEOUT_SECONDS,
            )
        except (
            gexc.ServiceUnavailable,
            gexc.DeadlineExceeded,
            gexc.InternalServerError,
            gexc.TooManyRequests,
        ) as exc:
            raise TransientFailure(f"could not start the workflow execution: {exc}") from exc
        except gexc.GoogleAPICallError as exc:
            raise PermanentFailure(f"the workflow refused the execution: {exc}") from exc
        return str(execution.name)

    def get(self, name: str) -> ExecutionInfo | None:
        from google.api_core import exceptions as gexc

        try:
            execution = self.client.get_execution(name=name, timeout=API_TIMEOUT_SECONDS)
        except gexc.NotFound:
            return None
        result = json.loads(execution.result) if execution.result else None
        error = execution.error.payload if execution.error and execution.error.payload else None
        return ExecutionInfo(name=name, state=execution.state.name, result=result, error=error)

    def cancel(self, name: str) -> bool:
        """Cancel an ACTIVE execution; False when it had already ended or is unknown."""
        from google.api_core import exceptions as gexc

        try:
            self.client.cancel_execution(name=name, timeout=API_TIMEOUT_SECONDS)
        except (gexc.NotFound, gexc.FailedPrecondition):
            return False
        return True


def send_callback(url: str, body: dict[str, Any], *, authenticate: bool = True) -> int:
    """POST to a Workflows callback URL; in GCP the caller must present an OAuth2 token."""
    import requests

    headers = {"Content-Type": "application/json"}
    if authenticate:
        import google.auth
        import google.auth.transport.requests

        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        credentials.refresh(google.auth.transport.requests.Request())
        headers["Authorization"] = f"Bearer {credentials.token}"
    response = requests.post(url, json=body, headers=headers, timeout=CALLBACK_TIMEOUT_SECONDS)
    return response.status_code
