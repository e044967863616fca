"""The stage operations' part in a sweep: what plan, select and finish do for a sweep's runs.

Kept apart from ``control.stage`` so a run that is not in a sweep reads exactly as before: every
function here is a no-op (or the plain behaviour) for such a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from rlpipe.control import retry
from rlpipe.control.cluster_port import Cluster
from rlpipe.control.ledger import Ledger
from rlpipe.control.logs import Logger
from rlpipe.control.notify import status_message
from rlpipe.control.settings import Settings
from rlpipe.control.sweep import coordination as sweeps
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.request import Request
from rlpipe.core.runs.record import RunRecord


class StageService(Protocol):
    """What these operations need of ``control.stage.StageService``."""

    ledger: Ledger
    cluster: Cluster
    log: Logger
    settings: Settings

    @property
    def publish(self) -> Callable[[str, dict[str, Any]], Any] | None: ...

    @property
    def resolve_revision(self) -> Callable[[str, str], str]: ...
    @property
    def pin_data(self) -> Callable[[Request], dict[str, Any]]: ...

    def finish(
        self,
        run_id: str,
        outcome: str,
        failure: dict[str, Any] | None = None,
        execution_id: str | None = None,
        *,
        caller: str | None = None,
    ) -> dict[str, Any]: ...


SELECT_STEP = "select"  # in the plan's stage list: the workflow calls the select op there


def pins(service: StageService, record: RunRecord, req: Request) -> tuple[str, dict[str, Any]]:
    """The model commit and datasets this run trains on: pinned once per run, and once per sweep
    for a sweep's children (a retried plan or round trains on the same commits)."""
    if record.lineage.hf_sha and record.lineage.data:
        return record.lineage.hf_sha, record.lineage.data

    def resolve() -> tuple[str, dict[str, Any]]:
        sha = record.lineage.hf_sha or service.resolve_revision(req.hf_repo, req.hf_revision)
        return sha, record.lineage.data or service.pin_data(req)

    if record.lineage.sweep is None:
        return resolve()
    return sweeps.shared_pins(service.ledger, record, resolve)


def slot(service: StageService, record: RunRecord, *, conversion_ready: bool) -> str | None:
    """None: go on. Else why this sweep child is queued (its workflow plans again later)."""
    if record.lineage.sweep is None:
        return None
    return sweeps.take_slot(service.ledger, record, conversion_ready=conversion_ready)


def with_selection(service: StageService, record: RunRecord, stages: list[str]) -> list[str]:
    """A child of a sweep with a select rule waits at ``select`` before publish (or at its end)."""
    if record.lineage.sweep is None:
        return stages
    if sweeps.spec_of(sweeps.parent_of(service.ledger, record)).select is None:
        return stages
    at = stages.index("publish") if "publish" in stages else len(stages)
    return [*stages[:at], SELECT_STEP, *stages[at:]]


def select(service: StageService, record: RunRecord) -> dict[str, Any]:
    if record.lineage.sweep is None:
        raise PermanentFailure(f"run {record.run_id} is not part of a sweep; there is nothing to select")
    if record.terminal:
        return {"wait": False, "selected": False, "reason": f"run {record.run_id} is {record.state}"}
    answer = sweeps.arrive(service.ledger, record)
    service.log.bind(run_id=record.run_id).info("sweep selection", **answer)
    return answer


def child_ended(service: StageService, child: RunRecord, topic: str | None) -> None:
    """After a child's finish: its slot back to the sweep, and the parent's status message on the
    child's topic (the parent's request names the same) from the one call that ended the parent."""
    parent = sweeps.child_ended(service.ledger, child)
    if parent is None:
        return
    service.log.bind(run_id=parent.run_id).info("sweep ended", state=parent.state)
    if topic and service.publish is not None:
        try:
            service.publish(service.settings.topic_path(topic), status_message(parent))
        except Exception as exc:  # a status message never turns a finished run into a failed call
            service.log.bind(run_id=parent.run_id).warning(
                "could not publish the status message", error=str(exc)
            )


def finish_parent(
    service: StageService, parent: RunRecord, outcome: str, *, caller: str | None = None
) -> dict[str, Any]:
    """Only a person ends a sweep (``rlpipe cancel``; ``caller`` the identity verified on it,
    recorded on the parent and on each child it ends); its children end it otherwise."""
    if outcome != "cancelled":
        raise PermanentFailure(
            f"run {parent.run_id} is a sweep; it ends when its children do (only cancel ends it early)"
        )
    message = {"tag": "cancelled", "message": f"cancelled with its sweep {parent.run_id}"}

    def cancel_child(run_id: str) -> None:
        service.cluster.delete_run(run_id)
        service.finish(run_id, "cancelled", message, caller=caller)

    updated = sweeps.cancel(service.ledger, parent.run_id, cancel_child, caller=caller)
    service.log.bind(run_id=parent.run_id).info("sweep cancelled", state=updated.state)
    return status_message(updated)


def retry_parent(
    ledger: Ledger,
    parent: RunRecord,
    *,
    by: str,
    reason: str,
    from_stage: str | None,
    key: str,
    caller: str | None,
    start: Callable[[str], Any],
) -> dict[str, Any]:
    """``rlpipe retry SWEEP``: a round of the parent (who asked, why), and a round of each child
    that can still change the outcome (``sweeps.retry_targets``), each once per caller key. A
    repeated call (the same key) retries only children a lost call left failed."""
    assert parent.sweep is not None
    selection = parent.sweep.selection
    if selection is not None and selection.run_id is not None and from_stage not in (None, "publish"):
        raise PermanentFailure(
            f"sweep {parent.run_id} selected {selection.run_id} by what it trained; retrying it from "
            f"{from_stage} would publish a model the selection never measured (retry from publish)"
        )
    children = [ledger.get(c) for c in parent.sweep.children]
    targets = sweeps.retry_targets(parent, children)
    if not targets and retry.refusal(parent, from_stage) is None:
        raise PermanentFailure(
            f"sweep {parent.run_id}: no child that failed or was cancelled can change its outcome"
        )
    decision = retry.start_round(
        ledger, parent.run_id, by=by, reason=reason, from_stage=from_stage, key=key, caller=caller
    )
    if decision.outcome == "refused":
        raise PermanentFailure(decision.reason)
    started: list[str] = []
    for run_id in targets:
        child = retry.start_round(
            ledger, run_id, by=by, reason=reason, from_stage=from_stage, key=f"{key}:{run_id}", caller=caller
        )
        if child.outcome == "refused":
            raise PermanentFailure(f"child {run_id}: {child.reason}")
        start(run_id)
        started.append(run_id)
    updated = sweeps.reopen(ledger, parent.run_id)
    return {
        "run_id": parent.run_id,
        "outcome": decision.outcome,
        "round": decision.round,
        "state": updated.state,
        "execution": None,
        "children": started,
    }
