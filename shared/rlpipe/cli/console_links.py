"""Cloud Console links for one run: its workflow execution, its logs and its artifacts.

Pure functions: names in, URLs out, every piece URL-encoded (``urllib.parse.quote``). The
formats are the console's own, which Google does not specify as an API:

- workflow execution:
  ``https://console.cloud.google.com/workflows/workflow/<location>/<workflow>/execution/<id>?project=<project>``
  (the link the console opens for one execution; used the same way in public scripts, e.g.
  "View execution in Cloud Console" links built from ``gcloud workflows run`` output);
- Logs Explorer: ``https://console.cloud.google.com/logs/query;query=<percent-encoded query>;timeRange=<ISO 8601
  duration>?project=<project>``; ``;``-separated parameters, the query percent-encoded as one
  value (vvakame/gcplogurl, logurl.go and timerange.go, builds the same form);
- Cloud Storage browser: ``https://console.cloud.google.com/storage/browser/<bucket>/<prefix>?project=<project>``.

The workload query selects GKE container logs (``resource.type="k8s_container"``) by the pod
label that carries the run id (``rlpipe.core.identity.LABEL_RUN``). GKE logs a pod label
``<key>`` as the entry label ``k8s-pod/<key>`` with the dots of the key replaced by underscores
(``app.kubernetes.io/name`` is queried as ``labels."k8s-pod/app_kubernetes_io/name"``).
Query syntax: https://cloud.google.com/logging/docs/view/logging-query-language.
"""

from __future__ import annotations

import contextlib
from urllib.parse import quote

from rlpipe.core import layout
from rlpipe.core.identity import LABEL_RUN

CONSOLE = "https://console.cloud.google.com"
DEFAULT_TIME_RANGE = "P7D"  # ISO 8601 duration: the last seven days


def _project(project: str) -> str:
    return "?project=" + quote(project, safe="")


def _quote_value(value: str) -> str:
    """A string literal of the Logging query language (double quotes, backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def workflow_execution_url(project: str, location: str, workflow: str, execution_id: str) -> str:
    """The console page of one workflow execution (its steps, arguments, result and error)."""
    parts = "/".join(quote(p, safe="") for p in (location, workflow, "execution", execution_id))
    return f"{CONSOLE}/workflows/workflow/{parts}{_project(project)}"


def parse_execution_name(name: str) -> tuple[str, str, str, str]:
    """``projects/<p>/locations/<l>/workflows/<w>/executions/<id>`` (the ledger's ``execution.name``)
    -> (project, location, workflow, execution id)."""
    parts = name.strip("/").split("/")
    if len(parts) != 8 or parts[0::2] != ["projects", "locations", "workflows", "executions"]:
        raise ValueError(f"not a workflow execution name: {name!r}")
    return parts[1], parts[3], parts[5], parts[7]


def execution_url(execution_name: str) -> str:
    """The console page of the execution a ledger records (full resource name)."""
    return workflow_execution_url(*parse_execution_name(execution_name))


def pod_label_field(label_key: str) -> str:
    """The log entry field GKE writes a pod label to: ``labels."k8s-pod/<key, dots as underscores>"``."""
    return 'labels."k8s-pod/' + label_key.replace(".", "_") + '"'


def workload_logs_query(
    run_id: str,
    *,
    namespace: str,
    cluster: str | None = None,
    cluster_location: str | None = None,
) -> str:
    """Every container log line of the run's workloads (all stages, all attempts)."""
    clauses = ['resource.type="k8s_container"']
    if cluster_location:
        clauses.append(f"resource.labels.location={_quote_value(cluster_location)}")
    if cluster:
        clauses.append(f"resource.labels.cluster_name={_quote_value(cluster)}")
    clauses.append(f"resource.labels.namespace_name={_quote_value(namespace)}")
    clauses.append(f"{pod_label_field(LABEL_RUN)}={_quote_value(run_id)}")
    return "\n".join(clauses)  # a line break between comparisons means AND


def control_plane_logs_query(run_id: str) -> str:
    """The functions' log lines about the run (stage, intake, reconcile: ``jsonPayload.run_id``)."""
    return f'resource.type="cloud_run_revision"\njsonPayload.run_id={_quote_value(run_id)}'


def logs_explorer_url(project: str, query: str, *, time_range: str = DEFAULT_TIME_RANGE) -> str:
    """Logs Explorer with ``query`` filled in, over the last ``time_range`` (ISO 8601 duration)."""
    return (
        f"{CONSOLE}/logs/query;query={quote(query, safe='')};timeRange={quote(time_range, safe='')}"
        f"{_project(project)}"
    )


def workload_logs_url(
    project: str,
    run_id: str,
    *,
    namespace: str,
    cluster: str | None = None,
    cluster_location: str | None = None,
    time_range: str = DEFAULT_TIME_RANGE,
) -> str:
    query = workload_logs_query(
        run_id, namespace=namespace, cluster=cluster, cluster_location=cluster_location
    )
    return logs_explorer_url(project, query, time_range=time_range)


def control_plane_logs_url(project: str, run_id: str, *, time_range: str = DEFAULT_TIME_RANGE) -> str:
    return logs_explorer_url(project, control_plane_logs_query(run_id), time_range=time_range)


def artifacts_url(project: str, bucket: str, run_id: str, scope: str = "") -> str:
    """The run's folder (``runs/<run_id>``, a team's under ``teams/<team>/``) in the Cloud Storage
    browser."""
    prefix = layout.RunLayout(bucket, run_id, scope=scope).artifacts_prefix.rstrip("/")
    return f"{CONSOLE}/storage/browser/{quote(bucket, safe='')}/{quote(prefix, safe='/')}{_project(project)}"


def run_links(
    *,
    project: str,
    run_id: str,
    artifacts_bucket: str,
    namespace: str,
    execution_name: str | None = None,
    cluster: str | None = None,
    cluster_location: str | None = None,
    scope: str = "",
) -> dict[str, str]:
    """Every link for one run, in the order ``rlpipe status`` prints them. The execution link is
    left out while the ledger names no execution (or names one in another form). ``scope``: the
    run's team's, where teams are declared (``layout.RunLayout.scope``)."""
    links: dict[str, str] = {}
    if execution_name:
        with contextlib.suppress(ValueError):
            links["execution"] = execution_url(execution_name)
    links["workload logs"] = workload_logs_url(
        project, run_id, namespace=namespace, cluster=cluster, cluster_location=cluster_location
    )
    links["control-plane logs"] = control_plane_logs_url(project, run_id)
    links["artifacts"] = artifacts_url(project, artifacts_bucket, run_id, scope)
    return links
