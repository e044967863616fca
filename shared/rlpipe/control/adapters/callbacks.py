"""Which callback URLs the pipeline will store and POST to: this deployment's Workflows callbacks only.

Why: ``artifact_event`` POSTs to the URL a run's ledger holds, with the function's Google
credentials attached. A URL from anywhere else (a forged ``launch`` call, a ledger a workload
rewrote) would send that token to a stranger. The URL is checked when ``launch`` stores it and
again when ``artifact_event`` uses it.

Workflows callback URLs have the shape of the Executions API's callback resource:
``https://workflowexecutions.googleapis.com/v1/<workflow>/executions/<id>/callbacks/<id>``
(events.create_callback_endpoint; REST resource projects.locations.workflows.executions.callbacks).
The local stack's engine serves the same path on a loopback port.
"""

from __future__ import annotations

import re

from rlpipe.control.adapters.settings import Settings

PRODUCTION_BASE = "https://workflowexecutions.googleapis.com"
_LOCAL_BASE = r"http://(?:127\.0\.0\.1|localhost):[0-9]{1,5}"
_ID = r"[A-Za-z0-9_-]{1,128}"


def callback_pattern(settings: Settings) -> re.Pattern[str]:
    base = _LOCAL_BASE if settings.local else re.escape(PRODUCTION_BASE)
    workflow = re.escape(settings.workflow_path)
    return re.compile(rf"^{base}/v1/{workflow}/executions/{_ID}/callbacks/{_ID}$")


def is_allowed(url: str, settings: Settings) -> bool:
    return isinstance(url, str) and callback_pattern(settings).fullmatch(url) is not None
