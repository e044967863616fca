"""The head's train_rl lines from Cloud Logging, when its pod is gone.

Why: the kubelet serves a container's log only while its pod exists. A train attempt whose pod
was deleted before its last lines were read (a JobSet that failed and cleaned up, a preempted
slice: the JobSet controller deletes the head's Job with it) would lose the evaluations it printed
last. On GKE every container line is also a Cloud Logging entry of resource type ``k8s_container``
(labels ``namespace_name``, ``pod_name``, ``container_name``:
https://cloud.google.com/logging/docs/api/v2/resource-list), so the stage function asks
``entries.list`` (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list) for the
head's lines from the cursor's second on, filtered to the lines the train log reads
(``core/train_log.py``: the three evaluation lines, ``Train step``, the restore and the end line),
so a ``debug=true`` flood is not paged through. The result goes through the same cursor as a kubelet
read (``cluster/log_cursor.py``), so nothing is taken twice.

The local stack plays ``entries.list`` (``local/cloud_logging.py``); ``Settings.logging_endpoint``
points there, reached without credentials as every local stand-in is.

The filter uses the Logging query language's ``:`` (has) on ``pod_name``, because the head pod's
name ends with a suffix the control plane does not know
(https://cloud.google.com/logging/docs/view/logging-query-language).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlpipe.cluster import log_cursor
from rlpipe.cluster.log_cursor import LogCursor

if TYPE_CHECKING:
    from rlpipe.control.adapters.settings import Settings

ENTRIES_LIST = "https://logging.googleapis.com/v2/entries:list"
ENTRIES_LIST_PATH = "/v2/entries:list"
# The lines core/train_log.py reads: the evaluations, progress, and how the attempt began and ended.
TRAIN_LOG_LINES = (
    "Pre RL Training",
    "Intermediate Eval",
    "Post RL Training",
    "Train step ",
    "Restored params from step",
    "RL Training Completed Successfully",
)
PAGE_SIZE = 1000
MAX_PAGES = 20  # a bound on one read; the cursor carries the rest to the next

Post = Callable[[str, dict[str, Any]], dict[str, Any]]  # (url, JSON body) → JSON answer


def head_filter(namespace: str, jobset: str, container: str, since: str | None) -> str:
    """The Logging query for the head's train_rl lines of one train attempt's JobSet."""
    clauses = [
        'resource.type="k8s_container"',
        f'resource.labels.namespace_name="{namespace}"',
        f'resource.labels.pod_name:"{jobset}-pathways-head-"',
        f'resource.labels.container_name="{container}"',
        "(" + " OR ".join(f'textPayload:"{line}"' for line in TRAIN_LOG_LINES) + ")",
    ]
    if since:
        clauses.append(f'timestamp>="{since}"')
    return " AND ".join(clauses)


def google_post() -> Post:
    """Posts with the function's own credentials (roles/logging.viewer, infra/terraform/iam.tf)."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/logging.read"])
    session = AuthorizedSession(credentials)

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        response = session.post(url, json=body, timeout=30)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    return post


def local_post() -> Post:
    """Posts to a local stand-in, without credentials (as every local emulator is reached)."""
    import requests

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        response = requests.post(url, json=body, timeout=30)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    return post


def entries_list(settings: Settings) -> tuple[Post, str]:
    """How this deployment calls ``entries.list``: Google's with the function's credentials, or the
    local stand-in's at ``settings.logging_endpoint``."""
    if settings.logging_endpoint:
        return local_post(), settings.logging_endpoint.rstrip("/") + ENTRIES_LIST_PATH
    return google_post(), ENTRIES_LIST


def head_reader(
    settings: Settings,
) -> Callable[[str, LogCursor | None], tuple[list[str], LogCursor | None]] | None:
    """The stage function's reader of a gone head's lines (``train_status.LogReader``): on GCP, and
    on a local stack that plays Cloud Logging; None on one that does not (no lines to read)."""
    if settings.local and not settings.logging_endpoint:
        return None
    post, url = entries_list(settings)
    return lambda jobset, cursor: read_head_lines(
        post, settings.project, settings.namespace, jobset, cursor, url=url
    )


def read_head_lines(
    post: Post,
    project: str,
    namespace: str,
    jobset: str,
    cursor: LogCursor | None,
    *,
    container: str = "workload-container",
    url: str = ENTRIES_LIST,
) -> tuple[list[str], LogCursor | None]:
    """The head's train_rl lines newer than ``cursor``, oldest first, and the cursor after them."""
    pod = cursor.pod if cursor is not None else f"cloud-logging:{jobset}"
    since = log_cursor.since_time(cursor, pod)
    body: dict[str, Any] = {
        "resourceNames": [f"projects/{project}"],
        "filter": head_filter(namespace, jobset, container, since),
        "orderBy": "timestamp asc",
        "pageSize": PAGE_SIZE,
    }
    stamped: list[str] = []
    for _ in range(MAX_PAGES):
        answer = post(url, body)
        for entry in answer.get("entries") or []:
            text, when = entry.get("textPayload"), entry.get("timestamp")
            if isinstance(text, str) and isinstance(when, str):
                stamped.extend(f"{when} {line}" for line in text.splitlines())
        token = answer.get("nextPageToken")
        if not token:
            break
        body = {**body, "pageToken": token}
    return log_cursor.take_new("".join(f"{line}\n" for line in stamped), cursor, pod, cut_short=False)
