"""``rlpipe cancel`` in the stage function: an operator's operation, recorded with who asked.

Workflows runs no ``except`` block when an execution is cancelled from outside, so what the
workflow would have done on its way out is done here: the run's workloads deleted, then the run
finished ``cancelled`` with the identity Google verified on the call (control/callers.py) kept on
its failure. Before, the CLI assembled this from the workflow's own ``cleanup`` and ``finish``,
which only the workflow's identity may now call (control/identities.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlpipe.core.failure_rules import reported
from rlpipe.core.failures import PermanentFailure

if TYPE_CHECKING:
    from rlpipe.control.stage import StageService

CANCELLED = "cancelled by rlpipe cancel"  # the failure message of a run a person cancelled


def cancel(service: StageService, run_id: str, *, caller: str | None) -> dict[str, Any]:
    """The run's workloads deleted, then the run finished ``cancelled`` by ``caller``; the answer
    is the finish's status message with ``deleted`` (and ``cleanup_error`` when cleanup failed).

    A cleanup that fails is reported, not fatal: the run is still finished, an execution left
    running finds it terminal and stops, and reconcile deletes what is left. A sweep's parent ends
    its children that had not ended, each with the same caller. A run that had ended keeps its
    state (the answer's ``state`` says which)."""
    if service.ledger.get(run_id) is None:  # before anything is deleted
        raise PermanentFailure(f"run {run_id} has no ledger")
    log = service.log.bind(run_id=run_id)
    answer: dict[str, Any] = {"deleted": []}
    try:
        answer["deleted"] = service.cleanup(run_id)["deleted"]
    except Exception as exc:  # the cluster or the bucket refused: the run is still finished
        answer["cleanup_error"] = f"{type(exc).__name__}: {exc}".strip()
        log.warning("cancel: cleanup failed (reconcile deletes what is left)", error=answer["cleanup_error"])
    failure = {"tag": "cancelled", "message": CANCELLED, "rule": reported.OPERATOR_CANCELLED}
    ended = service.finish(run_id, "cancelled", failure, caller=caller)
    log.info("cancel asked", caller=caller, state=ended.get("state"))
    return {**ended, **answer}
