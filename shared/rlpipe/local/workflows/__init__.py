"""A strict local engine for the subset of Cloud Workflows that rlpipe's pipeline uses.

Real Cloud Workflows cannot run offline and the PyPI ``workflows-emulator``
gets core semantics wrong (see shared/reference/emulators.md §1), so this
package implements the subset itself, each rule taken from the Workflows
documentation, and refuses anything outside it at load time.

Public API:

* ``load_workflow(text)`` -> ``Workflow`` (raises ``LoadError``)
* ``Engine(definition, ...)``: ``start``, ``run``, ``get``, ``executions``,
  ``cancel``, ``wait``, ``shutdown``
* ``LocalWorkflows(definition, ...)``: engine + Executions gRPC server +
  callback HTTP server (``grpc_target``, ``callback_base_url``, ``start``/``stop``)
* ``RealClock`` (tests use ``tests.harness.workflow_clock.FakeClock``)
"""

from .callbacks import CallbackRegistry
from .clock import Clock, RealClock
from .engine import Engine, Execution, ExecutionError, ExecutionNotActive, ExecutionNotFound, State
from .errors import ExecutionCancelled, LoadError, WorkflowError
from .loader import load_workflow
from .service import LocalWorkflows

__all__ = [
    "CallbackRegistry",
    "Clock",
    "Engine",
    "Execution",
    "ExecutionCancelled",
    "ExecutionError",
    "ExecutionNotActive",
    "ExecutionNotFound",
    "LoadError",
    "LocalWorkflows",
    "RealClock",
    "State",
    "WorkflowError",
    "load_workflow",
]
