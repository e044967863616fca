"""Any container's lines of any stage's workload from Cloud Logging, once its pods are gone.

``cloud_logs.py`` reads only the training head's evaluation lines for the stage function;
``rlpipe logs`` wants every line of one container of one attempt's pods, whatever the stage. On GKE
each line is an entry of resource type ``k8s_container`` (labels ``namespace_name``, ``pod_name``,
``container_name``). Every pod of a workload is named after it: a Job's ``<workload>-<suffix>``, a
JobSet's ``<workload>-<replicated job>-<job index>-<pod index>-<suffix>``, so the filter takes the
pod names that start with ``<workload>-`` (the query language's ``=~``, RE2: the ``-`` keeps
attempt 1 from matching attempt 10's pods), or, for one replicated job's pods (the head's),
``<workload>-<replicated job>-``. The container name then picks the program or a sidecar. The
attempt's launch time bounds the query.

Which container is the program's is a matter of role, as the manifests give it
(``core/manifests``): a Job's pod has one main container, the program; a Pathways JobSet's program
runs in the main container of its coordinator, the ``pathways-head`` replicated job (the workers'
only container is the Pathways server, the head's sidecars are init containers). So after a
preemption, when the JobSet controller has deleted the head with its Job and only the failed
worker's pods are left, the program's log is the head's, read from Cloud Logging, not a worker's.
"""

from __future__ import annotations

import re
from typing import Any

from rlpipe.cluster.kinds import REPLICATED_JOB_LABEL, Obj
from rlpipe.control.adapters.cloud_logs import ENTRIES_LIST, PAGE_SIZE, Post
from rlpipe.core.manifests import jobs, pathways

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a DNS label: nothing a regex reads specially
MAX_PAGES = 50  # a bound on one read: 50 000 lines


def program_role(stage: str) -> tuple[str | None, str]:
    """(the replicated job whose pods run the program, None for a Job; the name the manifests give
    its container): where ``stage``'s program prints, whether or not its pods still exist."""
    if stage == "train":
        return pathways.HEAD, pathways.MAIN_CONTAINER
    return None, jobs.CONTAINER_NAME


def program_pods(pods: list[Obj], stage: str) -> list[Obj]:
    """The pods among ``pods`` that run ``stage``'s program (a JobSet's head; a Job's pods)."""
    role, _ = program_role(stage)
    if role is None:
        return list(pods)
    return [
        p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(REPLICATED_JOB_LABEL) == role
    ]


def program_container(pods: list[Obj], stage: str) -> str:
    """The program's container: the main container of a pod that runs it (its one entry of
    ``spec.containers``; sidecars are init containers), or, with none of those pods left, the
    name the manifests give it."""
    for pod in program_pods(pods, stage):
        main = (pod.get("spec") or {}).get("containers") or []
        if main and main[0].get("name"):
            return str(main[0]["name"])
    return program_role(stage)[1]


def workload_filter(
    namespace: str, workload: str, container: str, since: str | None, *, replicated_job: str | None = None
) -> str:
    """The Logging query for one container's lines in the pods of one Job or JobSet (of one of a
    JobSet's replicated jobs, when given)."""
    if not _NAME.match(workload):
        raise ValueError(f"{workload!r} is not a workload name")
    if not _NAME.match(container):
        raise ValueError(f"{container!r} is not a container name")
    if replicated_job is not None and not _NAME.match(replicated_job):
        raise ValueError(f"{replicated_job!r} is not a replicated job name")
    pods = f"{workload}-{replicated_job}-" if replicated_job else f"{workload}-"
    clauses = [
        'resource.type="k8s_container"',
        f'resource.labels.namespace_name="{namespace}"',
        f'resource.labels.pod_name=~"^{pods}"',
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
