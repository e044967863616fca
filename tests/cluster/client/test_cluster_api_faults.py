"""rlpipe.cluster against the Kubernetes API double, through the real ``kubernetes`` client: API faults: retries, back-off and the failure class of each answer.

Shared documents: documents.py; fixtures and the RBAC check of every call: conftest.py.
"""

from __future__ import annotations

import email.utils
import random
import socket
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kubernetes import client

from rlpipe.cluster import ClusterClient, api_errors
from rlpipe.core.failures import PermanentFailure, TransientFailure
from rlpipe.local.kube_api import KubeApiServer
from tests.cluster.client.documents import NS, RUN, Harness, make_harness, recorded, rendered, server_log

# --------------------------------------------------------------------------- API faults


def test_503_twice_then_success_recovers(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    name = job["metadata"]["name"]
    server.inject_fault(503, count=2)

    st = h.client.status(name, kind="Job")

    assert st.exists and st.uid == job["metadata"]["uid"]
    assert [r.status for r in server_log(server, 3, "GET", f"/jobs/{name}$")] == [503, 503, 200]
    assert len(h.sleeps) == 2
    assert 0 <= h.sleeps[0] <= 0.5 and 0 <= h.sleeps[1] <= 1.0  # full jitter under base * 2**attempt


def test_create_retried_after_503_still_makes_one_object(server: KubeApiServer, h: Harness) -> None:
    server.inject_fault(503, method="POST")
    created = h.client.apply(rendered("train"))
    assert [r.status for r in server_log(server, 2, "POST")] == [503, 201]
    assert [o["metadata"]["uid"] for o in server.list("jobsets", namespace=NS)] == [
        created["metadata"]["uid"]
    ]


def test_503_beyond_the_budget_is_transient(server: KubeApiServer) -> None:
    h = make_harness(server, api_retries=3)
    server.inject_fault(503, count=10, message="etcdserver: leader changed")

    with pytest.raises(TransientFailure) as exc:
        h.client.status("rabc-convert-a1", kind="Job")

    assert "after 4 attempts" in exc.value.reason and "503 etcdserver: leader changed" in exc.value.reason
    assert len(server_log(server, 4)) == 4 and len(h.sleeps) == 3
    assert server.pending_faults == 6


def test_429_retry_after_is_honoured_with_the_injected_sleep(server: KubeApiServer, h: Harness) -> None:
    job = h.client.apply(rendered("convert"))
    name = job["metadata"]["name"]
    server.inject_fault(429, retry_after=7, method="GET")

    h.client.status(name, kind="Job")

    # Our injected sleep saw the 429: had urllib3 slept the 7 s and retried by itself, unseen and
    # outside the budget, the client would have seen only the 200 and slept nothing.
    assert h.sleeps == [7.0]
    assert [r.status for r in server_log(server, 2, "GET", f"/jobs/{name}$")] == [429, 200]


def test_retry_after_is_bounded_by_backoff_max(server: KubeApiServer) -> None:
    h = make_harness(server, backoff_max=20.0)
    server.inject_fault(429, retry_after=3600, count=2)
    h.client.list_run_objects(RUN)
    assert h.sleeps == [20.0, 20.0]


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    delay = api_errors._retry_after(SimpleNamespace(headers={"Retry-After": when}, body=None))  # type: ignore[arg-type]
    assert delay is not None and 27 <= delay <= 30
    assert api_errors._retry_after(SimpleNamespace(headers={"Retry-After": "soon"}, body=None)) is None  # type: ignore[arg-type]


def test_backoff_is_exponential_with_full_jitter(server: KubeApiServer) -> None:
    h = make_harness(server, api_retries=6, backoff_base=0.5, backoff_max=8.0, rng=random.Random(7))
    server.inject_fault(500, count=6)
    h.client.list_run_objects(RUN)

    expected_rng = random.Random(7)
    caps = [min(8.0, 0.5 * 2**i) for i in range(6)]
    assert caps == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert h.sleeps == [expected_rng.uniform(0, cap) for cap in caps]


def test_connection_refused_is_retried_then_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    sleeps: list[float] = []
    api = recorded(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")))
    cc = ClusterClient(api, NS, api_retries=2, sleep=sleeps.append)
    with pytest.raises(TransientFailure, match=r"after 3 attempts.*(Connection refused|NewConnectionError)"):
        cc.apply(rendered("convert"))
    assert len(sleeps) == 2


def test_forbidden_is_permanent_and_points_at_rbac(server: KubeApiServer, h: Harness) -> None:
    server.inject_fault(
        403,
        message='jobs.batch is forbidden: User "rlpipe-stage@p.iam" cannot list resource '
        '"jobs" in API group "batch" in the namespace "rlpipe"',
    )
    with pytest.raises(PermanentFailure, match=r"403.*cannot list resource.*RBAC_RULES"):
        h.client.delete_run(RUN)
    assert h.sleeps == []
