"""What a launch changes in its run's record: the run's state and stage, the new attempt, the
older attempts it supersedes, and where the stage's outputs will be found.

Kept apart from ``control.stage.service`` for the reason ``phase_record`` is: the ledger's compare-and-swap may
apply the change again on a newer record, so it is one function of the record being replaced and
the launch. That record decides whether the launch still stands: a cancel, another owner or a
newer attempt that landed while the workload was applied wins, and ``stage`` deletes what it applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_never

from rlpipe.core import layout
from rlpipe.core.failures import PermanentFailure, PipelineFailure
from rlpipe.core.identity import Stage
from rlpipe.core.manifests import RenderContext, pinning_lineage
from rlpipe.core.request import Request
from rlpipe.core.runs.ownership import NotOwner, SupersededAttempt, owns
from rlpipe.core.runs.record import STAGE_STATE, Attempt, RunRecord, now


@dataclass(frozen=True)
class Launch:
    """What ``stage.launch`` applied to the cluster, for which execution."""

    run_id: str
    stage: Stage
    attempt: int
    workload: str  # the applied object's name
    uid: str | None
    resume: int | None  # the committed step a retried train resumes from
    output: str  # the stage's output (``stage_paths(...).output``)
    callback_url: str | None = None
    execution_id: str | None = None


def apply(
    r: RunRecord, launch: Launch, req: Request, ctx: RenderContext
) -> tuple[str | None, PipelineFailure | None]:
    """Change ``r`` by ``launch``; → (the event to record or None for no change, why the launch
    is refused if it no longer stands)."""
    stage, attempt, run_id, name = launch.stage, launch.attempt, launch.run_id, launch.workload
    # Decided on the record being replaced: a cancel or a newer attempt that landed while
    # we applied wins, and what we applied is deleted instead of being left running.
    latest = r.current_attempt(stage)
    if r.terminal:
        return None, PermanentFailure(f"run {run_id} became {r.state} during the launch of {name}")
    if not owns(r, launch.execution_id):
        return None, NotOwner(f"run {run_id} is owned by execution {r.execution.name}")
    if latest is not None and latest.attempt > attempt:
        return None, SupersededAttempt(f"{stage} attempt {latest.attempt} was launched meanwhile")
    r.set_state(STAGE_STATE[stage])
    r.stage, r.attempt = stage, attempt
    if launch.callback_url:
        r.callbacks[stage] = launch.callback_url
    for old in r.attempts:
        if old.stage == stage and old.attempt < attempt and old.phase in ("launched", "queued", "running"):
            old.phase, old.finished_at = "superseded", old.finished_at or now()
    if r.attempt_record(stage, attempt) is None:
        r.attempts.append(
            Attempt(
                stage=stage,
                attempt=attempt,
                workload=name,
                uid=launch.uid,
                launched_at=now(),
                resume_step=launch.resume,
                round=r.round,
            )
        )
    if stage == "convert":
        r.lineage.converted_uri = launch.output
    elif stage == "train":
        r.lineage.checkpoint_uri = launch.output
        r.lineage.final_step = layout.final_step_for(req)
        r.lineage.pinning = pinning_lineage(req, ctx)
    elif stage == "export":
        r.lineage.export_uri = launch.output
    elif stage == "publish":
        if req.publish is not None:
            r.lineage.published_to = f"{req.publish.repo}@{req.publish.branch}"
    else:
        assert_never(stage)  # a new stage records its own lineage, never publish's
    return "launched", None


def pin_data(r: RunRecord, data: dict[str, Any]) -> str | None:
    """A run planned before datasets were pinned has them pinned at its train launch, once: train
    never runs on a manifest that points train_rl at files nobody staged. → the event, or None
    when another call pinned them first (theirs stand)."""
    if r.lineage.data:
        return None
    r.lineage.data = data
    return "data-pinned"


def converted(r: RunRecord, uri: str) -> str | None:
    """The conversion this run trains from: the cache entry that won READY.json (its own, or a
    run's that finished the same key first)."""
    if r.lineage.converted_uri == uri:
        return None
    r.lineage.converted_uri = uri
    return "conversion-published"
