"""The run's page (``rlpipe.report``) kept beside its ledger, where the model card links it.

Why the control plane writes it: a published model's card should lead to the whole story of the
run that made it (rounds, rewards, data, gate, lineage) without anyone running ``rlpipe report``.
The copy lives in the state bucket (``layout.RunLayout.report``), which no workload can write, so
what the card links cannot be rewritten by a training container. It is written when the publish
attempt launches (the card's link then resolves) and again when the run ends (with the publish
result); each write replaces the last. Best effort: a page that cannot be rendered or written is
logged and never fails the run.
"""

from __future__ import annotations

from rlpipe.control import blobstore
from rlpipe.control.ledger import RunRecord
from rlpipe.control.logs import Logger
from rlpipe.core import layout

CONTENT_TYPE = "text/html; charset=utf-8"


def report_uri(state_bucket: str, run_id: str) -> str:
    run = layout.RunLayout(state_bucket, run_id)
    return run.uri(run.report)


def write_run_report(state: blobstore.BlobStore, record: RunRecord, log: Logger) -> str | None:
    """Render the run's page and store it; its gs:// URI, or None (logged) when that failed."""
    from rlpipe.report import render_report

    name = layout.RunLayout(state.bucket_name, record.run_id).report
    try:
        html = render_report(record.model_dump(mode="json"))
        state.put(name, html.encode("utf-8"), content_type=CONTENT_TYPE)
    except Exception as exc:  # the page is worth having, never worth failing a run for
        log.warning("run report not written", run_id=record.run_id, error=f"{type(exc).__name__}: {exc}")
        return None
    return report_uri(state.bucket_name, record.run_id)
