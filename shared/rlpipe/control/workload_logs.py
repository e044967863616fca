"""Any container's lines of any stage's workload from Cloud Logging, once its pods are gone.

``cloud_logs.py`` reads only the training head's evaluation lines for the stage function;
``rlpipe logs`` wants every line of one container of one attempt's pods, whatever the stage. On GKE
each line is an entry of resource type ``k8s_container`` (labels ``namespace_name``, ``pod_name``,
``container_name``). Every pod of a workload is named after it: a Job's ``<workload>-<suffix>``, a
JobSet's ``<workload>-<replicated job>-<job index>-<pod index>-<suffix>``, so the filter takes the
pod names that start with ``<workload>-`` (the query language's ``=~``, RE2: the ``-`` keeps
attempt 1 from matching attempt 10's pods). The container name then picks the head (only it has
``workload-container`` in a JobSet) or a sidecar. The attempt's launch time bounds the query.
"""

from __future__ import annotations

import re
from typing import Any

from rlpipe.control.cloud_logs import ENTRIES_LIST, PAGE_SIZE, Post

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a DNS label: nothing a regex reads specially
MAX_PAGES = 50  # a bound on one read: 50 000 lines


def workload_filter(namespace: str, workload: str, container: str, since: str | None) -> str:
    """The Logging query for one container's lines in the pods of one Job or JobSet."""
    if not _NAME.match(workload):
        raise ValueError(f"{workload!r} is not a workload name")
    clauses = [
        'resource.type="k8s_container"',
        f'resource.labels.namespace_name="{namespace}"',
        f'resource.labels.pod_name=~"^{workload}-"',
        f'resource.labels.container_name="{container}"',
    ]
    if since:
        clauses.append(f'timestamp>="{since}"')
    return " AND ".join(clauses)


def read_lines(
    post: Post, project: str, query: str, *, url: str = ENTRIES_LIST, max_pages: int = MAX_PAGES
) -> tuple[list[str], bool]:
    """The text of the entries matching ``query``, oldest first, and whether there were more
    than ``max_pages`` pages (the rest is not read)."""
    body: dict[str, Any] = {
        "resourceNames": [f"projects/{project}"],
        "filter": query,
        "orderBy": "timestamp asc",
        "pageSize": PAGE_SIZE,
    }
    lines: list[str] = []
    for _ in range(max_pages):
        answer = post(url, body)
        for entry in answer.get("entries") or []:
            text = entry.get("textPayload")
            if isinstance(text, str):
                lines.extend(text.splitlines())
        token = answer.get("nextPageToken")
        if not token:
            return lines, False
        body = {**body, "pageToken": token}
    return lines, True
