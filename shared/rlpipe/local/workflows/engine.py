"""The engine: one loaded workflow, many concurrent executions on threads.

Each execution has the lifecycle of the Executions API (ACTIVE, then SUCCEEDED,
FAILED or CANCELLED), its argument, result or error (payload plus a context
naming the failing step), start/end times, and a step log kept for tests.
Cancelling marks the execution CANCELLED at once; its thread stops at the next
step boundary, sleep or callback wait, without running ``except`` blocks.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .callbacks import CallbackRegistry
from .clock import Clock, RealClock
from .errors import SYSTEM_ERROR, ExecutionCancelled, WorkflowError, error_map
from .http_client import HttpClient
from .interpreter import Interpreter
from .loader import load_workflow
from .services import ExecutionServices
from .values import check_json_compatible, clone, to_json

LOG = logging.getLogger("rlpipe.local.workflows")
_RESERVED_ENV_PREFIXES = ("GOOGLE", "WORKFLOWS")


class State(enum.Enum):
    ACTIVE = "ACTIVE"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class ExecutionNotFound(KeyError):
    pass


class ExecutionNotActive(RuntimeError):
    pass


@dataclass(frozen=True)
class StepRecord:
    routine: str
    step: str
    timestamp: float


@dataclass(frozen=True)
class LogRecord:
    severity: str
    payload: Any
    timestamp: float


@dataclass(frozen=True)
class ExecutionError:
    """Why an execution failed: the Workflows error value and where it was raised."""

    payload: Any
    frames: tuple[tuple[str, str], ...]

    @property
    def payload_json(self) -> str:
        return to_json(self.payload)

    @property
    def context(self) -> str:
        message = self.payload.get("message", "") if isinstance(self.payload, dict) else str(self.payload)
        lines = [str(message)] + [f'in step "{step}", routine "{routine}"' for routine, step in self.frames]
        return "\n".join(lines)


@dataclass(frozen=True)
class Execution:
    """A snapshot of one execution (safe to keep; later changes don't affect it)."""

    execution_id: str
    name: str
    state: State
    argument: Any
    start_time: float
    end_time: float | None = None
    result: Any = None
    error: ExecutionError | None = None
    current_step: tuple[str, str] | None = None
    steps: tuple[StepRecord, ...] = ()
    logs: tuple[LogRecord, ...] = ()

    def step_names(self) -> list[str]:
        return [record.step for record in self.steps]


@dataclass
class _Run:
    snapshot: Execution
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    steps: list[StepRecord] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    thread: threading.Thread | None = None


# The identity a local workflow runs as (its OIDC tokens name it) when none is given.
DEFAULT_SERVICE_ACCOUNT = "workflows-local@local-project.iam.gserviceaccount.com"


class Engine:
    """Loads one definition (YAML text) and runs executions of it."""

    def __init__(
        self,
        definition: str,
        *,
        workflow_id: str = "workflow",
        project: str = "local-project",
        location: str = "us-central1",
        clock: Clock | None = None,
        env: Mapping[str, str] | None = None,
        callbacks: CallbackRegistry | None = None,
        http: HttpClient | None = None,
        project_number: str = "000000000000",
        revision_id: str = "000001-local",
        service_account: str = DEFAULT_SERVICE_ACCOUNT,
    ) -> None:
        self.workflow = load_workflow(definition)
        self.workflow_id = workflow_id
        self.project = project
        self.location = location
        self.revision_id = revision_id
        self.clock: Clock = clock or RealClock()
        self.callbacks = callbacks or CallbackRegistry()
        self._owns_http = http is None
        self.http = http or HttpClient(identity=service_account)  # OIDC tokens name the workflow's account
        for key in env or {}:
            if not key or key.startswith(_RESERVED_ENV_PREFIXES):
                raise ValueError(f"user environment variable {key!r} uses a reserved name")
        self._base_env = {
            "GOOGLE_CLOUD_PROJECT_ID": project,
            "GOOGLE_CLOUD_PROJECT_NUMBER": project_number,
            "GOOGLE_CLOUD_LOCATION": location,
            "GOOGLE_CLOUD_WORKFLOW_ID": workflow_id,
            "GOOGLE_CLOUD_WORKFLOW_REVISION_ID": revision_id,
            "GOOGLE_CLOUD_SERVICE_ACCOUNT_NAME": service_account,
            **dict(env or {}),
        }
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}

    @property
    def workflow_name(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/workflows/{self.workflow_id}"

    # --- lifecycle -------------------------------------------------------------

    def start(self, argument: Any = None) -> Execution:
        """Start an execution on its own thread and return its (ACTIVE) snapshot."""
        execution_id = str(uuid.uuid4())
        snapshot = Execution(
            execution_id=execution_id,
            name=f"{self.workflow_name}/executions/{execution_id}",
            state=State.ACTIVE,
            argument=clone(argument),
            start_time=self.clock.now(),
        )
        run = _Run(snapshot)
        run.thread = threading.Thread(
            target=self._execute, args=(run,), name=f"wf-{execution_id[:8]}", daemon=True
        )
        with self._lock:
            self._runs[execution_id] = run
        run.thread.start()
        return snapshot

    def run(self, argument: Any = None, timeout: float = 10.0) -> Execution:
        """Start an execution and wait (real time) until it ends."""
        return self.wait(self.start(argument).execution_id, timeout)

    def get(self, execution: str) -> Execution:
        run = self._run(execution)
        with self._lock:
            return replace(run.snapshot, steps=tuple(run.steps), logs=tuple(run.logs))

    def executions(self) -> list[Execution]:
        """All executions, newest first (the API's default order)."""
        with self._lock:
            ids = list(reversed(self._runs))  # newest created first when start times tie
        return sorted((self.get(i) for i in ids), key=lambda e: e.start_time, reverse=True)

    def cancel(self, execution: str) -> Execution:
        run = self._run(execution)
        with self._lock:
            if run.snapshot.state is not State.ACTIVE:
                raise ExecutionNotActive(f"execution {run.snapshot.name} is {run.snapshot.state.value}")
            run.snapshot = replace(run.snapshot, state=State.CANCELLED, end_time=self.clock.now())
            run.cancel.set()
        self.callbacks.finish_execution(run.snapshot.name)
        return self.get(execution)

    def wait(self, execution: str, timeout: float = 10.0) -> Execution:
        run = self._run(execution)
        if not run.done.wait(timeout):
            raise TimeoutError(f"execution {execution} still active after {timeout} s")
        return self.get(execution)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel what is still running and wait for the threads to stop."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            with contextlib.suppress(ExecutionNotActive):
                self.cancel(run.snapshot.execution_id)
        for run in runs:
            if run.thread is not None:
                run.thread.join(timeout)
        if self._owns_http:
            self.http.close()

    # --- internals -------------------------------------------------------------

    def _run(self, execution: str) -> _Run:
        execution_id = execution.rsplit("/", 1)[-1]
        with self._lock:
            run = self._runs.get(execution_id)
        if run is None or (execution != execution_id and execution != run.snapshot.name):
            raise ExecutionNotFound(execution)
        return run

    def _execute(self, run: _Run) -> None:
        name = run.snapshot.name
        services = ExecutionServices(
            execution_name=name,
            clock=self.clock,
            cancel=run.cancel,
            env={**self._base_env, "GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID": run.snapshot.execution_id},
            http=self.http,
            callbacks=self.callbacks,
            log=lambda severity, payload: self._log(run, severity, payload),
        )
        interpreter = Interpreter(
            self.workflow, services, lambda routine, step: self._on_step(run, routine, step)
        )
        try:
            result = interpreter.run(clone(run.snapshot.argument))
            check_json_compatible(result, "the workflow result")
            self._finish(run, State.SUCCEEDED, result=result)
        except WorkflowError as error:
            self._finish(run, State.FAILED, error=ExecutionError(error.payload, tuple(error.frames)))
        except ExecutionCancelled:
            self._finish(run, State.CANCELLED)
        except Exception as exc:  # an engine bug must fail the execution, not hang it
            LOG.exception("internal error in execution %s", name)
            payload = error_map(SYSTEM_ERROR, f"internal error of the local engine: {exc!r}")
            self._finish(run, State.FAILED, error=ExecutionError(payload, ()))
        finally:
            self.callbacks.finish_execution(name)
            run.done.set()

    def _finish(
        self, run: _Run, state: State, *, result: Any = None, error: ExecutionError | None = None
    ) -> None:
        with self._lock:
            if run.snapshot.state is not State.ACTIVE:
                return  # already cancelled: the cancel wins
            run.snapshot = replace(
                run.snapshot,
                state=state,
                result=result,
                error=error,
                end_time=self.clock.now(),
                current_step=None,
            )

    def _on_step(self, run: _Run, routine: str, step: str) -> None:
        record = StepRecord(routine, step, self.clock.now())
        with self._lock:
            run.steps.append(record)
            run.snapshot = replace(run.snapshot, current_step=(routine, step))

    def _log(self, run: _Run, severity: str, payload: Any) -> None:
        with self._lock:
            run.logs.append(LogRecord(severity, clone(payload), self.clock.now()))
        LOG.info("[%s] %s %s", run.snapshot.execution_id[:8], severity, payload)
