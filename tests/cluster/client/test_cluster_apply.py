"""rlpipe.cluster against the Kubernetes API double, through the real ``kubernetes`` client: idempotent apply: one object per name, refused across runs and namespaces.

Shared documents: documents.py; fixtures and the RBAC check of every call: conftest.py.
"""

from __future__ import annotations

import copy

import pytest

from rlpipe.core import identity
from rlpipe.core.failures import PermanentFailure, TransientFailure
from rlpipe.core.manifests import RenderContext, render
from rlpipe.local.kube_api import KubeApiServer
from tests.cluster.client.documents import NS, OTHER_RUN, REQ, RUN, Harness, rendered, server_log

# --------------------------------------------------------------------------- idempotent apply


@pytest.mark.parametrize("stage", ["convert", "train"])
def test_apply_twice_is_one_object_and_returns_the_first_uid(
    server: KubeApiServer, h: Harness, stage: identity.Stage
) -> None:
    obj = rendered(stage)
    first = h.client.apply(obj)
    second = h.client.apply(copy.deepcopy(obj))

    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    resource = "jobs" if obj["kind"] == "Job" else "jobsets"
    assert [o["metadata"]["name"] for o in server.list(resource, namespace=NS)] == [obj["metadata"]["name"]]
    posts = server_log(server, 2, "POST")
    assert [r.status for r in posts] == [201, 409]
    # Sent verbatim (generic objects API), with strict field validation requested.
    assert posts[0].body == obj and posts[0].query == {"fieldValidation": "Strict"}


def test_apply_refuses_an_existing_object_of_another_run(server: KubeApiServer, h: Harness) -> None:
    obj = rendered("convert")
    squatter = copy.deepcopy(obj)
    squatter["metadata"]["labels"][identity.LABEL_RUN] = OTHER_RUN
    server.create("jobs", squatter)
    with pytest.raises(PermanentFailure, match=f"belongs to something else.*{OTHER_RUN}"):
        h.client.apply(obj)


def test_apply_of_an_object_still_being_deleted_is_transient(server: KubeApiServer, h: Harness) -> None:
    obj = copy.deepcopy(rendered("train"))
    obj["metadata"]["finalizers"] = ["example.com/hold"]
    server.create("jobsets", obj)
    server.delete("jobsets", obj["metadata"]["name"], namespace=NS)
    with pytest.raises(TransientFailure, match="being deleted"):
        h.client.apply(rendered("train"))
    server.modify("jobsets", obj["metadata"]["name"], lambda o: o["metadata"].pop("finalizers"), namespace=NS)


def test_apply_invalid_object_is_permanent_and_names_the_problem(h: Harness) -> None:
    obj = rendered("convert")
    obj["spec"]["template"]["spec"]["restartPolicyy"] = "Never"
    with pytest.raises(PermanentFailure) as exc:
        h.client.apply(obj)
    assert "422" in exc.value.reason
    assert "spec.template.spec.restartPolicyy: unknown field" in exc.value.reason


def test_apply_refuses_a_foreign_namespace_before_calling_the_api(server: KubeApiServer, h: Harness) -> None:
    obj = render(REQ, "convert", 1, RenderContext(run_id=RUN, bucket="art", namespace="elsewhere"))
    with pytest.raises(PermanentFailure, match="namespace 'elsewhere'"):
        h.client.apply(obj)
    # the module's server is shared: a request of an earlier test's may still land; none may be ours
    assert not [r for r in server.requests if "elsewhere" in r.path or "elsewhere" in str(r.body)]
