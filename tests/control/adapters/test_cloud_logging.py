"""The local Cloud Logging plays ``entries.list`` as Google documents it, over the container lines
the local clusters keep, and the production readers (``control/adapters/cloud_logs.py``,
``control/adapters/workload_logs.py``) read it as they read Google's.

Each rule is the reference's (cited in ``local/cloud_logging.py`` and ``local/logging_query.py``):
the query language's precedence and case rules, ordering, paging and the request's limits.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from rlpipe.cluster.client import ClusterClient
from rlpipe.control.adapters import cloud_logs, workload_logs
from rlpipe.control.adapters.settings import Settings
from rlpipe.local import logging_query
from rlpipe.local.cloud_logging import CloudLogging, Resource
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.pod_logs import ContainerLogFolder

NS = "rlpipe"
T0 = datetime(2026, 12, 4, 13, 0, 0, tzinfo=UTC)
HEAD = "rrun-train-a1-pathways-head-0-0-abcde"


@pytest.fixture
def folder(tmp_path: Path) -> ContainerLogFolder:
    return ContainerLogFolder(tmp_path / "pods")


@pytest.fixture
def api(folder: ContainerLogFolder) -> Iterator[CloudLogging]:
    service = CloudLogging(folder, Resource("p")).start()
    yield service
    service.stop()


def _list(api: CloudLogging, **body: Any) -> requests.Response:
    return requests.post(
        f"{api.url}/v2/entries:list", json={"resourceNames": ["projects/p"], **body}, timeout=10
    )


def _texts(answer: dict[str, Any]) -> list[str]:
    return [e["textPayload"] for e in answer.get("entries") or []]


# ---- the query language --------------------------------------------------------------------------


def _entry(pod: str) -> logging_query.Lookup:
    values = {
        "resource.type": "k8s_container",
        "resource.labels.namespace_name": "rlpipe",
        "resource.labels.pod_name": pod,
        "resource.labels.container_name": "workload-container",
        "textPayload": "Train step 3",
        "timestamp": 5,
    }
    return lambda field: values.get(field)


# The filter production sends (control/adapters/workload_logs.py), clause by clause.
PRODUCTION = workload_logs.workload_filter("rlpipe", "rabc-train-a1", "workload-container", None)
HEAD_FILTER = cloud_logs.head_filter("rlpipe", "rabc-train-a1", "workload-container", "1970-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("query", "pod", "expected"),
    [
        (PRODUCTION, "rabc-train-a1-pathways-head-0-0-x", True),
        (PRODUCTION, "rabc-train-a10-pathways-head-0-0-x", False),  # another attempt's pods
        ('resource.labels.namespace_name="RLPIPE"', "p", True),  # equality ignores case
        ('resource.labels.namespace_name="rlp"', "p", False),  # ... but compares whole values
        ('resource.labels.pod_name=~"^RABC"', "rabc-1", False),  # a regular expression is case sensitive
        ('resource.labels.pod_name=~"(?i)^RABC"', "rabc-1", True),
        ('resource.labels.pod_name=~"train"', "rabc-train-a1", True),  # and searches, unanchored
        ('timestamp>="1970-01-01T00:00:00.000000005Z"', "p", True),
        ('timestamp>="1970-01-01T00:00:00.000000006Z"', "p", False),
        (PRODUCTION + ' AND timestamp>="1970-01-01T00:00:00.000000005Z"', "rabc-train-a1-x", True),
        (HEAD_FILTER, "rabc-train-a1-pathways-head-0-0-x", True),  # a line of the head train_rl prints
        (HEAD_FILTER, "rabc-train-a1-worker-0-0-x", False),
        ('resource.labels.pod_name:"TRAIN"', "rabc-train-a1", True),  # has: a substring, any case
        ('(textPayload:"Post RL" OR textPayload:"train STEP")', "p", True),  # a group: any of it
        ('(textPayload:"Post RL" OR textPayload:"Pre RL")', "p", False),
        ("", "anything", True),
    ],
)
def test_productions_queries_read_as_the_reference_says(query: str, pod: str, expected: bool) -> None:
    assert logging_query.matches(logging_query.parse(query), _entry(pod)) is expected


@pytest.mark.parametrize(
    "query",
    [
        '"a bare value"',  # a global restriction: not sent, not played
        'jsonPayload.message="x"',  # a field production does not name
        '(textPayload:"a" OR textPayload:"b"',  # a group never closed
        '(textPayload:"a" AND textPayload:"b")',  # a group is an OR
        'resource.type="k8s_container" OR resource.type="gce_instance"',
        'NOT resource.type="k8s_container"',
        'resource.type="k8s_container" resource.labels.pod_name="p"',  # an implicit AND: not sent
        'timestamp>"1970-01-01T00:00:00Z"',
        'timestamp>="yesterday"',
        "resource.type=",
    ],
)
def test_what_production_does_not_send_is_refused_not_misread(query: str) -> None:
    with pytest.raises(logging_query.QueryError):
        logging_query.parse(query)


def test_a_file_is_skipped_on_its_resource_alone() -> None:
    query = logging_query.parse('resource.labels.pod_name=~"head" AND timestamp>="1970-01-01T00:00:00Z"')
    labels = {"resource.labels.pod_name": "worker-0"}
    unknown = lambda field: labels.get(field, logging_query.UNKNOWN)  # noqa: E731
    assert logging_query.matches(query, unknown) is False
    labels["resource.labels.pod_name"] = "the-head-0"
    assert logging_query.matches(query, unknown) is None, "depends on the lines: they are read"


# ---- entries.list --------------------------------------------------------------------------------


def test_entries_are_gke_container_lines_in_timestamp_then_insert_id_order(
    api: CloudLogging, folder: ContainerLogFolder
) -> None:
    folder.append(NS, HEAD, "workload-container", ["second"], T0 + timedelta(seconds=2))
    folder.append(NS, HEAD, "workload-container", ["first", "first-again"], T0 + timedelta(seconds=1))
    folder.append(NS, "other-pod", "c", ["elsewhere"], T0 + timedelta(seconds=1, microseconds=1))
    answer = _list(api).json()
    assert _texts(answer) == ["first", "first-again", "elsewhere", "second"]
    first = answer["entries"][0]
    assert first["resource"] == {
        "type": "k8s_container",
        "labels": {
            "project_id": "p",
            "location": "us-central1",
            "cluster_name": "rlpipe-local",
            "namespace_name": NS,
            "pod_name": HEAD,
            "container_name": "workload-container",
        },
    }
    assert first["timestamp"] == "2026-12-04T13:00:01Z" and first["logName"] == "projects/p/logs/stdout"
    assert _texts(_list(api, orderBy="timestamp desc").json()) == [
        "second",
        "elsewhere",
        "first-again",
        "first",
    ]
    query = f'resource.labels.pod_name="{HEAD}" AND resource.labels.container_name="workload-container"'
    assert _texts(_list(api, filter=query).json()) == ["first", "first-again", "second"]
    assert _list(api, filter='textPayload:"nothing like it"').json() == {}, (
        "no entries: the field is left out"
    )


def test_pages_join_by_next_page_token_and_a_token_holds_for_its_own_query_only(
    api: CloudLogging, folder: ContainerLogFolder
) -> None:
    folder.append(NS, HEAD, "workload-container", [f"line {i}" for i in range(5)], T0)  # one timestamp
    seen, body = [], {"pageSize": 2}
    while True:
        answer = _list(api, **body).json()
        seen.extend(_texts(answer))
        assert len(answer.get("entries") or []) <= 2
        if "nextPageToken" not in answer:
            break
        body = {"pageSize": 2, "pageToken": answer["nextPageToken"]}
    assert seen == [f"line {i}" for i in range(5)], "entries of one timestamp keep their order across pages"
    token = _list(api, pageSize=2).json()["nextPageToken"]
    other = _list(api, pageSize=2, pageToken=token, filter='textPayload:"line"')
    assert other.status_code == 400 and other.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert _list(api, pageToken="garbage").status_code == 400
    assert len(_list(api).json()["entries"]) == 5, "the default page holds 50"


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        ({"pageSize": -1}, 400, "INVALID_ARGUMENT"),
        ({"pageSize": 1001}, 400, "INVALID_ARGUMENT"),
        ({"orderBy": "insertId asc"}, 400, "INVALID_ARGUMENT"),
        ({"filter": "x" * 20_001}, 400, "INVALID_ARGUMENT"),
        ({"filter": '"global"'}, 400, "INVALID_ARGUMENT"),
        ({"pageSise": 5}, 400, "INVALID_ARGUMENT"),  # an unknown field: proto3 JSON refuses it
        ({"resourceNames": []}, 400, "INVALID_ARGUMENT"),
        ({"resourceNames": ["projects/someone-else"]}, 403, "PERMISSION_DENIED"),
    ],
)
def test_requests_the_api_refuses_are_refused_in_googles_error_shape(
    api: CloudLogging, body: dict[str, Any], code: int, status: str
) -> None:
    answer = _list(api, **body)
    assert answer.status_code == code
    assert answer.json()["error"]["status"] == status and answer.json()["error"]["code"] == code


def test_the_production_readers_read_the_stand_in(api: CloudLogging, folder: ContainerLogFolder) -> None:
    """The filters the stage function and ``rlpipe logs`` send, through their own clients."""
    eval_line = "W1204 13:00:00.000000 1 hooks.py:98] Intermediate Eval (step=10): corr=1, total=2, ..."
    folder.append(NS, HEAD, "workload-container", ["debug noise", eval_line], T0)
    folder.append(NS, HEAD, "pathways-proxy", ["proxy line"], T0)
    folder.append(NS, "rrun-train-a10-pathways-head-0-0-zzzzz", "workload-container", ["attempt 10"], T0)
    folder.append(NS, "rrun-train-a1-worker-0-0-yyyyy", "pathways-worker", ["worker line"], T0)
    settings = Settings(project="p", namespace=NS, logging_endpoint=api.url)
    post, url = cloud_logs.entries_list(settings)
    query = workload_logs.workload_filter(NS, "rrun-train-a1", "workload-container", None)
    assert workload_logs.read_lines(post, "p", query, url=url) == (["debug noise", eval_line], False)
    head_only = workload_logs.workload_filter(
        NS, "rrun-train-a1", "pathways-worker", None, replicated_job="pathways-head"
    )
    assert workload_logs.read_lines(post, "p", head_only, url=url) == ([], False)
    reader = cloud_logs.head_reader(settings)
    assert reader is not None
    lines, cursor = reader("rrun-train-a1", None)
    assert lines == [eval_line], "the stage reads the train log's lines only"
    assert reader("rrun-train-a1", cursor) == ([], cursor), "and nothing twice"


def test_a_cursor_from_the_kubelets_read_goes_on_in_cloud_logging_without_a_line_twice(
    api: CloudLogging, folder: ContainerLogFolder
) -> None:
    """The double keeps each line with the stamp its log read serves, so the stage's cursor, taken
    while the pod ran, takes exactly the lines after it once the pod is gone."""
    prefix = "W1204 13:00:00.000000 1 hooks.py:98] "
    lines = [f"{prefix}Intermediate Eval (step={s}): corr=1, total=2" for s in (10, 20, 30, 40)]
    jobset = "rcur-train-a1"
    pod = f"{jobset}-pathways-head-0-0-qwert"
    with KubeApiServer() as kube:
        kube.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "namespace": NS,
                    "labels": {
                        "jobset.sigs.k8s.io/jobset-name": jobset,
                        "jobset.sigs.k8s.io/replicatedjob-name": "pathways-head",
                    },
                },
                "spec": {"containers": [{"name": "workload-container", "image": "i"}]},
                "status": {"phase": "Running"},
            },
        )
        for i, line in enumerate(lines):
            when = datetime.now(UTC)  # one stamp for both, as the simulator's pods write them
            kube.append_pod_log(pod, [line], namespace=NS, when=when)
            folder.append(NS, pod, "workload-container", [line], when)
            if i == 1:
                client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
                read, cursor, found = client.read_log(jobset, None)
                assert found and read == lines[:2]
        kube.delete("pods", pod, namespace=NS)
        assert client.read_log(jobset, cursor)[2] is False, "the pod is gone: the kubelet has nothing"
    reader = cloud_logs.head_reader(Settings(project="p", namespace=NS, logging_endpoint=api.url))
    assert reader is not None
    rest, _ = reader(jobset, cursor)
    assert rest == lines[2:]
