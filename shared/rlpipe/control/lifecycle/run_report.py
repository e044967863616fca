"""The run's page (``rlpipe.report``) kept beside its ledger, where the model card links it.

Why the control plane writes it: a published model's card should lead to the whole story of the
run that made it (rounds, rewards, data, gate, lineage) without anyone running ``rlpipe report``.
The copy lives in the state bucket (``layout.RunLayout.report``), which no workload can write, so
what the card links cannot be rewritten by a training container. It is written when the publish
attempt launches (the card's link then resolves) and again when the run ends (with the publish
result); each write replaces the last. Best effort: a page that cannot be rendered or written is
logged and never fails the run. It has no charts (the page names ``rlpipe report``, which draws
them): drawing needs matplotlib, which the function bundle does not carry for one code path.

The page says whether the run was simulated, and on which cluster (``rlpipe.report.stack``): the
ledger has no field for it, so it is read from the settings of whoever renders (``local_cluster``):
the control plane's own, the same ones the CLI reads for ``rlpipe report`` and ``rlpipe compare``.
"""

from __future__ import annotations

from typing import Protocol

from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.core import layout
from rlpipe.core.runs.record import RunRecord

CONTENT_TYPE = "text/html; charset=utf-8"


class Deployment(Protocol):
    """What ``local_cluster`` reads of a deployment's settings (``control.adapters.settings.Settings``)."""

    @property
    def local(self) -> bool: ...

    @property
    def kubeconfig(self) -> str: ...


def local_cluster(settings: Deployment) -> str | None:
    """Where runs of this deployment run, as a page says it: None on Google Cloud; on the local
    stack ``real`` when its cluster is reached by a kubeconfig (only the real control plane is,
    ``local/stack.py``), else ``double``."""
    if not settings.local:
        return None
    return "real" if settings.kubeconfig else "double"


def report_uri(state_bucket: str, run_id: str) -> str:
    run = layout.RunLayout(state_bucket, run_id)
    return run.uri(run.report)


def write_run_report(
    state: blobstore.BlobStore, record: RunRecord, log: Logger, settings: Deployment | None = None
) -> str | None:
    """Render the run's page and store it; its gs:// URI, or None (logged) when that failed.
    ``settings``: the control plane's (default: from the environment, as ``services.settings``
    builds them), which say whether the page is of a simulated run."""
    from rlpipe.report import render_report

    name = layout.RunLayout(state.bucket_name, record.run_id).report
    try:
        cluster = local_cluster(settings if settings is not None else Settings.from_env())
        html = render_report(record, cluster=cluster, painter=None)  # no matplotlib in the functions
        state.put(name, html.encode("utf-8"), content_type=CONTENT_TYPE)
    except Exception as exc:  # the page is worth having, never worth failing a run for
        log.warning("run report not written", run_id=record.run_id, error=f"{type(exc).__name__}: {exc}")
        return None
    return report_uri(state.bucket_name, record.run_id)
