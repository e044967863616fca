"""The exported step, in the stage function: chosen when export launches, and the checkpoints kept
only for the choice deleted once export has ended (``core.export_step``).

Why at launch, once: training has ended by then, so the bucket holds every step it will ever hold
and the record every evaluation. The choice goes into the record (``lineage.exported_step`` and
``export_reason``) before the Job exists, so a later export attempt, the model card and the report
read the same step, and a changed evaluation can never move it.
"""

from __future__ import annotations

from dataclasses import replace

from rlpipe.control.adapters import blobstore
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import export_step, layout, steps
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.manifests import RenderContext
from rlpipe.core.request import Request
from rlpipe.core.request.export_checks import retention
from rlpipe.core.runs.record import RunRecord


def _committed(artifacts: blobstore.BlobStore, ctx: RenderContext) -> list[int]:
    run = ctx.run
    return layout.committed_steps(artifacts.list(run.checkpoints), run)


def choose(
    artifacts: blobstore.BlobStore, ledger: Ledger, record: RunRecord, req: Request, ctx: RenderContext
) -> tuple[RunRecord, RenderContext]:
    """The record with the exported step in it, and the context export renders with. Raises
    ``PermanentFailure`` naming the step when the bucket does not hold it."""
    chosen = record.lineage.exported_step
    if chosen is None:
        final = ctx.final_step if ctx.final_step is not None else layout.final_step_for(req)
        try:
            choice = export_step.choose(req.export, record.results, _committed(artifacts, ctx), final)
        except export_step.NoSuchStep as exc:
            raise PermanentFailure(str(exc)) from None

        def keep(r: RunRecord) -> str | None:
            if r.lineage.exported_step is not None:
                return None  # chosen by a launch before this one: that choice stands
            r.lineage.exported_step, r.lineage.export_reason = choice.step, choice.reason
            return "export_step_chosen"

        record = ledger.edit(
            record.run_id,
            keep,
            detail=lambda r: {"step": r.lineage.exported_step, "reason": r.lineage.export_reason},
        )
        chosen = record.lineage.exported_step
    return record, replace(ctx, export_step=chosen)


def prune(
    artifacts: blobstore.BlobStore, req: Request, ctx: RenderContext, exported: int | None
) -> list[int]:
    """Once export succeeded: delete the steps kept only so that export could choose (neither the
    exported one nor among the newest the run's own retention keeps), read from the step
    directories themselves, not their commit markers: a call cut short after a step's marker went
    leaves files the next call (status is read again) still finds and deletes. Each step's marker
    goes first, so a step half deleted is never read as committed. Returns the steps deleted from."""
    if exported is None or retention(req) is None:
        return []  # rlpipe kept nothing beyond the run's own retention
    run = ctx.run
    names = list(artifacts.list(run.checkpoints))
    by_step: dict[int, list[str]] = {}
    for name in names:
        head, sep, _ = name[len(run.checkpoints) :].partition("/")
        if sep and head.isdigit() and head == str(int(head)):
            by_step.setdefault(int(head), []).append(name)
    committed = layout.committed_steps(names, run)
    kept = export_step.kept_after_export(committed, exported, steps.training_steps(req).max_to_keep)
    newest = max(kept)
    gone = sorted(step for step in by_step if step not in kept and step < newest)
    for step in gone:
        marker = run.step_commit(step)
        if marker in by_step[step]:
            artifacts.delete(marker)
        for name in by_step[step]:
            if name != marker:
                artifacts.delete(name)
    return gone
