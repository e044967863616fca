"""What ``artifact_event`` does for the few objects that are completion signals: wake the workflow.

Events only wake; the workflow's status check decides what is true, so a lost or duplicated
event costs at most one poll interval and never changes an outcome.
"""

from __future__ import annotations

from rlpipe.control import services
from rlpipe.control.adapters import callbacks
from rlpipe.control.adapters.events import ArtifactSignal
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.orchestrator import send_callback
from rlpipe.core import layout


def wake(signal: ArtifactSignal, name: str, log: Logger) -> str:
    """Send the stage's callback for a completion signal; returns what was done, for logs and tests."""
    log = log.bind(run_id=signal.run_id, stage=signal.stage, object=name)
    if signal.run_id is None:
        return "no-run"
    record = services.ledger().get(signal.run_id)
    if record is None:
        log.info("signal for an unknown run; ignored")
        return "unknown-run"
    if record.terminal:
        return "terminal"
    if (
        signal.signal == "checkpoint"
        and record.lineage.final_step is not None
        and signal.step != record.lineage.final_step
    ):
        log.info("intermediate checkpoint committed", step=signal.step)
        return "intermediate"
    url = record.callbacks.get(signal.stage)
    if not url:
        log.info("no callback registered for this stage yet; the status poll will see it")
        return "no-callback"
    if not callbacks.is_allowed(url, services.settings()):
        log.error("the ledger holds a callback URL outside this deployment's workflow; not sent")
        return "refused-callback"
    status = send_callback(
        url,
        {"signal": signal.signal, "object": layout.gs(services.settings().artifacts_bucket, name)},
        authenticate=not services.settings().local,
    )
    log.info("callback sent", status=status)
    return f"callback-{status}"
