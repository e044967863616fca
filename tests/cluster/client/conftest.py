"""The fixtures of the cluster client's tests: one API double per module, emptied after each test,
and, at the end of each module, the check that every API call its tests made is one the RBAC
rules the deployment grants allow (least privilege holds for every path the tests drive, not only
for the ones test_cluster_rbac.py drives itself)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlpipe.cluster import RBAC_RULES
from rlpipe.local.kube_api import KubeApiServer
from tests.cluster.client.documents import CALLS, NS, Harness, make_harness, quiesce
from tests.cluster.client.rbac_requests import rule_for


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as srv:  # the real validator: every object we launch is checked strictly
        yield srv


@pytest.fixture(autouse=True)
def clean(server: KubeApiServer) -> Iterator[None]:
    yield
    quiesce(server)
    server.clear_faults()
    for resource in ("jobsets", "jobs", "pods", "events"):
        server.delete_collection(resource, namespace=NS, propagation_policy="Background")
    server.clear_requests()


@pytest.fixture
def h(server: KubeApiServer) -> Harness:
    return make_harness(server)


@pytest.fixture(scope="module", autouse=True)
def every_call_within_rbac() -> Iterator[None]:
    start = len(CALLS)
    yield
    used = {rule_for(method, url) for method, url in CALLS[start:]}
    assert used <= RBAC_RULES, f"calls the RBAC rules do not allow: {used - RBAC_RULES}"
