"""The Kubernetes API double, exercised only through the real ``kubernetes`` client over HTTP.

What matters is that pipeline code written against these answers behaves the same on GKE:
status codes and Status bodies, server-set metadata, selectors, the /status split,
optimistic concurrency, watch semantics, cascading deletion and injected faults.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from rlpipe.local.kube_api import (
    KubeApiServer,
    LabelSelector,
    WatchEvent,
    json_patch,
    merge_patch,
    no_validation,
)
from rlpipe.local.kube_api.validation import validate_object as real_validator
from tests.harness.patience import ceiling, wait_until

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
NS = "default"
RUN = "rlpipe.dev/run-id"


def job(name: str, run: str = "r1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {RUN: run, **labels}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36", "args": ["true"]}],
                }
            },
        },
    }


def jobset(name: str, run: str = "r1") -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {RUN: run}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 2, "completions": 2, "template": {"spec": pod}}},
                }
            ]
        },
    }


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["code"] == exc.status
    return body


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(validator=real_validator) as srv:
        yield srv


@pytest.fixture
def api(server: KubeApiServer) -> client.ApiClient:
    return client.ApiClient(client.Configuration(host=server.url))


@pytest.fixture
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def create_jobset(custom: client.CustomObjectsApi, body: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)


def jobset_names(custom: client.CustomObjectsApi, **kw: Any) -> set[str]:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, **kw)["items"]
    return {o["metadata"]["name"] for o in items}


def job_names(batch: client.BatchV1Api, ns: str = NS, **kw: Any) -> set[str]:
    return {j.metadata.name for j in batch.list_namespaced_job(ns, **kw).items}


# --------------------------------------------------------------------------- create / get


def test_create_job_returns_201_with_server_metadata(batch: client.BatchV1Api) -> None:
    body = job("j1")
    body["metadata"].update(uid="client-made", resourceVersion="999", generation=7)
    first, code, _ = batch.create_namespaced_job_with_http_info("team-a", body)
    second = batch.create_namespaced_job("team-a", job("j2"))

    assert code == 201
    meta = first.metadata
    assert uuid.UUID(meta.uid).version == 4
    assert meta.namespace == "team-a"  # from the URL
    assert meta.generation == 1
    assert int(second.metadata.resource_version) > int(meta.resource_version) != 999
    assert abs((datetime.now(UTC) - meta.creation_timestamp).total_seconds()) < 5
    # The Job controller's labels, which a simulator uses to find the Job's pods:
    labels = first.spec.template.metadata.labels
    assert labels["batch.kubernetes.io/controller-uid"] == meta.uid
    assert labels["batch.kubernetes.io/job-name"] == "j1"
    assert first.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": meta.uid}
    assert batch.read_namespaced_job("j1", "team-a").metadata.uid == meta.uid


def test_create_jobset_returns_the_object_and_drops_status(custom: client.CustomObjectsApi) -> None:
    body = jobset("js1")
    body["status"] = {"restarts": 3}
    data, code, _ = custom.create_namespaced_custom_object_with_http_info(GROUP, VERSION, NS, PLURAL, body)

    assert code == 201
    assert data is not None and uuid.UUID(data["metadata"]["uid"])
    assert data["metadata"]["generation"] == 1
    assert "status" not in data  # only /status writes status
    fetched = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "js1")
    assert fetched["metadata"]["resourceVersion"] == data["metadata"]["resourceVersion"]


def test_create_rfc3339_timestamp_on_the_wire(server: KubeApiServer, custom: client.CustomObjectsApi) -> None:
    created = create_jobset(custom, jobset("js1"))
    datetime.strptime(created["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")


def test_duplicate_create_is_409_already_exists(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    batch.create_namespaced_job(NS, job("j1"))
    create_jobset(custom, jobset("js1"))

    with pytest.raises(ApiException) as job_exc:
        batch.create_namespaced_job(NS, job("j1"))
    with pytest.raises(ApiException) as js_exc:
        create_jobset(custom, jobset("js1"))

    body = status_of(job_exc.value)
    assert (job_exc.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["details"] == {"name": "j1", "group": "batch", "kind": "jobs"}
    assert status_of(js_exc.value)["details"]["group"] == GROUP
    assert js_exc.value.status == 409


def test_get_missing_is_404_not_found(batch: client.BatchV1Api, custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as exc:
        batch.read_namespaced_job("nope", NS)
    assert exc.value.status == 404
    assert status_of(exc.value)["reason"] == "NotFound"
    assert 'jobs.batch "nope" not found' in status_of(exc.value)["message"]
    with pytest.raises(ApiException) as exc:
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "nope")
    assert exc.value.status == 404


def test_same_name_in_two_namespaces_are_two_objects(batch: client.BatchV1Api) -> None:
    a = batch.create_namespaced_job("ns-a", job("j1"))
    b = batch.create_namespaced_job("ns-b", job("j1"))
    assert a.metadata.uid != b.metadata.uid
    assert {j.metadata.namespace for j in batch.list_job_for_all_namespaces().items} == {"ns-a", "ns-b"}


# --------------------------------------------------------------------------- validation


def test_real_validator_accepts_a_good_job_and_jobset(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    assert batch.create_namespaced_job(NS, job("good")).metadata.name == "good"
    assert create_jobset(custom, jobset("good"))["metadata"]["name"] == "good"


def test_real_validator_rejects_a_typo_in_a_job_with_422(
    server: KubeApiServer, custom: client.CustomObjectsApi, batch: client.BatchV1Api
) -> None:
    bad = job("bad")
    bad["spec"]["template"]["spec"]["containers"][0]["imagee"] = "busybox"
    rv_before = server.resource_version
    # The typed BatchV1Api refuses unknown fields client-side (pydantic), so send the raw
    # dict the way a dynamic client would: through CustomObjectsApi at batch/v1 jobs.
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object("batch", "v1", NS, "jobs", bad)

    body = status_of(exc.value)
    assert (exc.value.status, body["reason"]) == (422, "Invalid")
    assert "imagee" in body["message"]
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.template.spec.containers[0].imagee"]
    assert server.resource_version == rv_before  # nothing stored
    with pytest.raises(ApiException):
        batch.read_namespaced_job("bad", NS)


def test_real_validator_rejects_a_typo_in_a_jobset_and_in_a_patch(custom: client.CustomObjectsApi) -> None:
    bad = jobset("bad")
    bad["spec"]["replicatedJob"] = bad["spec"].pop("replicatedJobs")
    with pytest.raises(ApiException) as exc:
        create_jobset(custom, bad)
    assert exc.value.status == 422
    assert "spec.replicatedJob" in {c.get("field") for c in status_of(exc.value)["details"]["causes"]}

    create_jobset(custom, jobset("ok"))
    with pytest.raises(ApiException) as exc:  # the result of a patch is validated too
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "ok", {"spec": {"sucessPolicy": {}}}
        )
    assert exc.value.status == 422


def test_validator_is_injectable_and_sees_the_stored_form(custom: client.CustomObjectsApi) -> None:
    seen: list[dict[str, Any]] = []

    def stub(obj: dict[str, Any]) -> list[str]:
        seen.append(obj)
        return (
            ["$.spec.replicatedJobs[0].replicas: must be positive"]
            if obj["metadata"]["name"] == "bad"
            else []
        )

    with KubeApiServer(validator=stub) as srv:
        api = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=srv.url)))
        create_jobset(api, jobset("good"), ns="team-b")
        with pytest.raises(ApiException) as exc:
            create_jobset(api, jobset("bad"))

    assert seen[0]["metadata"]["namespace"] == "team-b" and "uid" in seen[0]["metadata"]
    assert exc.value.status == 422
    assert status_of(exc.value)["details"]["causes"][0]["field"] == "spec.replicatedJobs[0].replicas"


# --------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("run=r1", {"a"}),
        ("run==r1", {"a"}),
        ("run!=r1", {"b", "c"}),
        ("stage!=train", {"a", "c"}),  # an absent label matches != and notin, as in the apiserver
        ("stage notin (train)", {"a", "c"}),
        ("run in (r1, r2)", {"a", "b"}),
        ("run notin (r1,r2)", {"c"}),
        ("stage", {"a", "b"}),
        ("!stage", {"c"}),
        ("run in (r1,r2),stage=train", {"b"}),
        ("attempt>1", {"b"}),
        ("", {"a", "b", "c"}),
    ],
)
def test_label_selector_grammar(batch: client.BatchV1Api, selector: str, expected: set[str]) -> None:
    for name, labels in {
        "a": {"run": "r1", "stage": "convert", "attempt": "1"},
        "b": {"run": "r2", "stage": "train", "attempt": "2"},
        "c": {"run": "r3"},
    }.items():
        body = job(name)
        body["metadata"]["labels"] = labels
        batch.create_namespaced_job(NS, body)
    assert job_names(batch, label_selector=selector) == expected


def test_bad_selectors_are_400(batch: client.BatchV1Api) -> None:
    for kw in (
        {"label_selector": "run in r1"},
        {"label_selector": "a=b=c"},
        {"field_selector": "spec.parallelism=1"},
    ):
        with pytest.raises(ApiException) as exc:
            batch.list_namespaced_job(NS, **kw)
        assert exc.value.status == 400, kw


def test_field_selector_on_name(batch: client.BatchV1Api) -> None:
    for name in ("a", "b"):
        batch.create_namespaced_job(NS, job(name))
    assert job_names(batch, field_selector="metadata.name=a") == {"a"}
    assert job_names(batch, field_selector="metadata.name!=a") == {"b"}


def test_list_is_a_typed_list_with_resource_version(
    server: KubeApiServer, custom: client.CustomObjectsApi, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, job("a"))
    create_jobset(custom, jobset("s"))
    jobs = batch.list_namespaced_job(NS)
    sets = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert jobs.kind == "JobList" and jobs.metadata.resource_version == str(server.resource_version)
    assert sets["kind"] == "JobSetList" and sets["apiVersion"] == f"{GROUP}/{VERSION}"


def test_list_pages_with_limit_and_continue(batch: client.BatchV1Api) -> None:
    for name in ("a", "b", "c"):
        batch.create_namespaced_job(NS, job(name))
    first = batch.list_namespaced_job(NS, limit=2)
    rest = batch.list_namespaced_job(NS, limit=2, _continue=first.metadata._continue)
    assert [j.metadata.name for j in first.items] == ["a", "b"]
    assert first.metadata.remaining_item_count == 1
    assert [j.metadata.name for j in rest.items] == ["c"] and rest.metadata._continue is None


def test_delete_collection_removes_only_one_runs_objects(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    for name, run in (("r1-convert", "r1"), ("r1-export", "r1"), ("r2-convert", "r2")):
        batch.create_namespaced_job(NS, job(name, run))
    batch.create_namespaced_job("other", job("r1-convert", "r1"))
    create_jobset(custom, jobset("r1-train", "r1"))
    create_jobset(custom, jobset("r2-train", "r2"))

    assert job_names(batch, label_selector=f"{RUN}=r1") == {"r1-convert", "r1-export"}
    batch.delete_collection_namespaced_job(NS, label_selector=f"{RUN}=r1")
    deleted = custom.delete_collection_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, label_selector=f"{RUN}=r1"
    )

    assert job_names(batch) == {"r2-convert"}
    assert job_names(batch, ns="other") == {"r1-convert"}  # another namespace is untouched
    assert jobset_names(custom) == {"r2-train"}
    assert [o["metadata"]["name"] for o in deleted["items"]] == ["r1-train"]


# --------------------------------------------------------------------------- patch / update


def test_status_patch_changes_status_only(batch: client.BatchV1Api) -> None:
    created = batch.create_namespaced_job(NS, job("j1"))
    patched = batch.patch_namespaced_job_status(
        "j1", NS, {"spec": {"parallelism": 5}, "status": {"active": 1, "startTime": "2025-01-01T00:00:00Z"}}
    )

    assert patched.status.active == 1
    assert patched.spec.parallelism == created.spec.parallelism == 1
    assert patched.metadata.generation == 1
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)


def test_normal_patch_ignores_status_and_bumps_generation(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, job("j1"))
    batch.patch_namespaced_job_status("j1", NS, {"status": {"active": 1}})
    patched = batch.patch_namespaced_job("j1", NS, {"spec": {"parallelism": 3}, "status": {"active": 9}})

    assert patched.spec.parallelism == 3
    assert patched.status.active == 1
    assert patched.metadata.generation == 2


def test_jobset_status_subresource(custom: client.CustomObjectsApi) -> None:
    create_jobset(custom, jobset("js1"))
    cond = {
        "type": "Completed",
        "status": "True",
        "reason": "AllJobsCompleted",
        "message": "done",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    after = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "js1", {"status": {"conditions": [cond]}, "spec": {"suspend": True}}
    )
    assert after["status"]["conditions"] == [cond]
    assert "suspend" not in after["spec"] and after["metadata"]["generation"] == 1

    again = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "js1", {"spec": {"suspend": True}, "status": None}
    )
    assert again["spec"]["suspend"] is True and again["status"]["conditions"] == [cond]
    assert again["metadata"]["generation"] == 2


def test_generation_bumps_on_spec_change_only(batch: client.BatchV1Api) -> None:
    created = batch.create_namespaced_job(NS, job("j1"))
    relabelled = batch.patch_namespaced_job("j1", NS, {"metadata": {"labels": {"x": "y"}}})
    noop = batch.patch_namespaced_job("j1", NS, {"metadata": {"labels": {"x": "y"}}})
    respecced = batch.patch_namespaced_job("j1", NS, {"spec": {"activeDeadlineSeconds": 60}})

    assert relabelled.metadata.generation == 1
    assert int(relabelled.metadata.resource_version) > int(created.metadata.resource_version)
    assert noop.metadata.resource_version == relabelled.metadata.resource_version  # no-op: no write
    assert respecced.metadata.generation == 2


def test_json_patch_and_strategic_merge(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, job("j1"))
    jp = batch.patch_namespaced_job(
        "j1",
        NS,
        [
            {"op": "add", "path": "/metadata/labels/stage", "value": "train"},
            {"op": "replace", "path": "/spec/backoffLimit", "value": 2},
        ],
    )
    assert jp.metadata.labels["stage"] == "train" and jp.spec.backoff_limit == 2

    with pytest.raises(ApiException) as exc:  # a failing test op rejects the whole patch
        batch.patch_namespaced_job(
            "j1",
            NS,
            [
                {"op": "remove", "path": "/metadata/labels/stage"},
                {"op": "test", "path": "/spec/backoffLimit", "value": 9},
            ],
        )
    assert exc.value.status == 422
    assert batch.read_namespaced_job("j1", NS).metadata.labels["stage"] == "train"


def test_strategic_merge_merges_lists_by_key(server: KubeApiServer) -> None:
    server.create("pods", pod("p1"))
    merged = server.patch(
        "pods",
        "p1",
        {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}]}},
        patch_type="strategic",
    )
    replaced = server.patch("pods", "p1", {"spec": {"containers": [{"name": "main"}]}}, patch_type="merge")
    assert merged["spec"]["containers"] == [
        {"name": "main", "image": "busybox:1.36", "env": [{"name": "A", "value": "1"}]}
    ]
    assert replaced["spec"]["containers"] == [{"name": "main"}]


def test_custom_resources_refuse_strategic_merge(
    server: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    create_jobset(custom, jobset("js1"))
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "js1",
            {"spec": {"suspend": True}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert exc.value.status == 415


def test_replace_checks_resource_version(batch: client.BatchV1Api) -> None:
    stale = batch.create_namespaced_job(NS, job("j1"))
    stale.spec.parallelism = 2
    fresh = batch.replace_namespaced_job("j1", NS, stale)
    assert fresh.spec.parallelism == 2 and fresh.metadata.generation == 2

    stale.spec.parallelism = 3
    with pytest.raises(ApiException) as exc:
        batch.replace_namespaced_job("j1", NS, stale)
    assert (exc.value.status, status_of(exc.value)["reason"]) == (409, "Conflict")
    assert batch.read_namespaced_job("j1", NS).spec.parallelism == 2


def test_job_template_is_immutable(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, job("j1"))
    with pytest.raises(ApiException) as exc:
        batch.patch_namespaced_job(
            "j1",
            NS,
            [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "busybox:latest"}],
        )
    assert exc.value.status == 422 and "spec.template" in exc.value.body


# --------------------------------------------------------------------------- watch


def collect(stream: Iterator[dict[str, Any]], first: int | None = None) -> list[tuple[str, str]]:
    """(type, name) of each event; with ``first``, stop after that many (no timeout to wait for)."""
    out = []
    for event in stream:
        obj = event["object"]
        name = obj["metadata"]["name"] if isinstance(obj, dict) else obj.metadata.name
        out.append((event["type"], name))
        if first is not None and len(out) == first:
            break
    return out


def test_watch_streams_changes_for_the_selector_and_ends_by_timeout(
    server: KubeApiServer, batch: client.BatchV1Api
) -> None:
    # The changes are made first and the watch reads them from ``since``, as a watch resumed at a
    # resourceVersion does: made while a 1-second watch ran, they raced its timeout on a loaded
    # machine (a CI run saw the status change land after the watch had ended).
    batch.create_namespaced_job(NS, job("before", "r0"))  # so that ``since`` is a version, not "0" (any)
    since = str(server.resource_version)
    batch.create_namespaced_job(NS, job("mine", "r1"))
    batch.create_namespaced_job(NS, job("theirs", "r2"))
    batch.patch_namespaced_job_status("mine", NS, {"status": {"active": 1}})
    batch.patch_namespaced_job_status("theirs", NS, {"status": {"active": 1}})
    batch.delete_namespaced_job("mine", NS)
    seen: list[tuple[str, str]] = []
    watcher = threading.Thread(
        target=lambda: seen.extend(
            collect(
                watch.Watch().stream(
                    batch.list_namespaced_job,
                    NS,
                    label_selector=f"{RUN}=r1",
                    resource_version=since,
                    timeout_seconds=1,
                )
            )
        )
    )
    watcher.start()
    watcher.join(timeout=ceiling(1))

    assert not watcher.is_alive(), "the watch did not end at its timeoutSeconds"
    assert seen == [("ADDED", "mine"), ("MODIFIED", "mine"), ("DELETED", "mine")]


def test_watch_without_resource_version_starts_with_existing_objects(batch: client.BatchV1Api) -> None:
    for name, run in (("a", "r1"), ("b", "r2"), ("c", "r1")):
        batch.create_namespaced_job(NS, job(name, run))
    batch.patch_namespaced_job("c", NS, {"metadata": {"labels": {"x": "y"}}})
    w = watch.Watch()
    # Synthetic events come in name order, so a leak of "b" or of c's history would show here.
    events = collect(w.stream(batch.list_namespaced_job, NS, label_selector=f"{RUN}=r1"), first=2)
    w.stop()
    assert events == [("ADDED", "a"), ("ADDED", "c")]


def test_watch_sees_objects_leave_and_enter_the_selection(
    server: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    create_jobset(custom, jobset("elsewhere"), ns="other")
    since = server.resource_version  # not 0: resourceVersion "0" means "start from now"
    create_jobset(custom, jobset("js1", "r1"))
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "js1", {"metadata": {"labels": {RUN: "r9"}}}
    )
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "js1", {"metadata": {"labels": {RUN: "r1"}}}
    )
    w = watch.Watch()
    events = collect(
        w.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            NS,
            PLURAL,
            label_selector=f"{RUN}=r1",
            resource_version=str(since),
        ),
        first=3,
    )
    w.stop()
    assert events == [("ADDED", "js1"), ("DELETED", "js1"), ("ADDED", "js1")]


def test_watch_from_a_forgotten_resource_version_is_410() -> None:
    with KubeApiServer(validator=no_validation, history_limit=3) as srv:
        batch = client.BatchV1Api(client.ApiClient(client.Configuration(host=srv.url)))
        for i in range(5):
            batch.create_namespaced_job(NS, job(f"j{i}"))
        with pytest.raises(ApiException) as exc:
            list(watch.Watch().stream(batch.list_namespaced_job, NS, resource_version="1", timeout_seconds=1))
    assert exc.value.status == 410


def test_watch_ends_cleanly_when_the_server_stops() -> None:
    srv = KubeApiServer(validator=no_validation).start()
    host, port = srv.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("GET", f"/apis/batch/v1/namespaces/{NS}/jobs?watch=true")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    srv.create("jobs", job("j1"))
    first = json.loads(resp.readline())
    threading.Timer(0.2, srv.stop).start()
    rest = resp.read()  # returns only once the chunked stream is terminated (else: socket timeout)
    assert first["type"] == "ADDED" and rest == b""


# --------------------------------------------------------------------------- delete


def job_pods(server: KubeApiServer, owner: dict[str, Any]) -> None:
    uid = owner["metadata"]["uid"]
    server.create(
        "pods",
        pod("by-label", **{"batch.kubernetes.io/job-name": "j1", "batch.kubernetes.io/controller-uid": uid}),
    )
    server.create("pods", pod("old-incarnation", **{"job-name": "j1", "controller-uid": "another-uid"}))
    server.create("pods", pod("unrelated", **{"batch.kubernetes.io/job-name": "j2"}))
    owned = pod("by-owner-ref")
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j1", "uid": uid, "controller": True}
    ]
    server.create("pods", owned)


def pod_names(core: client.CoreV1Api) -> set[str]:
    return {p.metadata.name for p in core.list_namespaced_pod(NS).items}


def test_background_propagation_deletes_the_jobs_pods(
    server: KubeApiServer, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    created = batch.create_namespaced_job(NS, job("j1"))
    job_pods(server, created.to_dict(serialize=True))
    result = batch.delete_namespaced_job("j1", NS, propagation_policy="Background")

    assert result["status"] == "Success" and result["details"]["uid"] == created.metadata.uid
    assert pod_names(core) == {"old-incarnation", "unrelated"}


def test_job_delete_orphans_pods_by_default(
    server: KubeApiServer, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    created = batch.create_namespaced_job(NS, job("j1"))
    job_pods(server, created.to_dict(serialize=True))
    batch.delete_namespaced_job("j1", NS, body=client.V1DeleteOptions())

    assert len(pod_names(core)) == 4
    assert core.read_namespaced_pod("by-owner-ref", NS).metadata.owner_references is None


def test_jobset_delete_cascades_through_child_jobs(
    server: KubeApiServer, custom: client.CustomObjectsApi, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    js = create_jobset(custom, jobset("js1"))
    owner = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "JobSet",
            "name": "js1",
            "uid": js["metadata"]["uid"],
            "controller": True,
        }
    ]
    child = job("js1-workers-0")
    child["metadata"]["ownerReferences"] = owner
    child_uid = server.create("jobs", child)["metadata"]["uid"]
    server.create(
        "pods",
        pod(
            "js1-workers-0-0",
            **{
                "batch.kubernetes.io/controller-uid": child_uid,
                "batch.kubernetes.io/job-name": "js1-workers-0",
            },
        ),
    )
    server.create("pods", pod("labelled", **{"jobset.sigs.k8s.io/jobset-name": "js1"}))
    server.create("pods", pod("bystander"))

    deleted = custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "js1")

    assert deleted["metadata"]["name"] == "js1"  # custom resources return the deleted object
    assert pod_names(core) == {"bystander"}
    assert job_names(batch) == set()


def test_finalizers_hold_an_object_until_removed(
    server: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    body = jobset("js1")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    create_jobset(custom, body)
    held = custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "js1")
    assert held["metadata"]["deletionTimestamp"]
    assert jobset_names(custom) == {"js1"}

    server.modify("jobsets", "js1", lambda o: o["metadata"].pop("finalizers"))
    assert jobset_names(custom) == set()


# --------------------------------------------------------------------------- faults, log, concurrency


def test_fault_injection_then_recovery_and_request_log(
    server: KubeApiServer, batch: client.BatchV1Api
) -> None:
    server.inject_fault(503, count=2)
    codes = []
    for _ in range(3):
        try:
            batch.list_namespaced_job(NS, label_selector="a=b")
            codes.append(200)
        except ApiException as exc:
            codes.append(exc.status)
            assert status_of(exc)["reason"] == "ServiceUnavailable"
    assert codes == [503, 503, 200]
    # The server logs a request after it has answered it: give the last answer's log line a moment.
    deadline = time.monotonic() + ceiling(5)
    while len(server.requests) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [(r.method, r.status) for r in server.requests] == [("GET", 503), ("GET", 503), ("GET", 200)]
    assert server.requests[0].path == f"/apis/batch/v1/namespaces/{NS}/jobs"
    assert server.requests[0].query == {"labelSelector": "a=b"}


def test_429_carries_retry_after(server: KubeApiServer, batch: client.BatchV1Api) -> None:
    server.inject_fault(429, retry_after=7)
    with pytest.raises(ApiException) as exc:  # POST: urllib3 does not retry it
        batch.create_namespaced_job(NS, job("j1"))
    assert exc.value.status == 429 and exc.value.headers["Retry-After"] == "7"
    assert status_of(exc.value)["details"] == {"retryAfterSeconds": 7}

    # Worth knowing for the pipeline's retry layer: the client's urllib3 retries an idempotent
    # GET answered 429/503 + Retry-After by itself, so the caller never sees it.
    server.inject_fault(429, retry_after=0)
    batch.list_namespaced_job(NS)
    # The server logs a request after it has answered it: wait for the GET's two log lines.
    wait_until(lambda: len(server.requests) >= 3, 0.5, what="the GET's log lines")
    assert [r.status for r in server.requests[-2:]] == [429, 200]


def test_fault_can_target_a_method(server: KubeApiServer, batch: client.BatchV1Api) -> None:
    server.inject_fault(500, method="POST", path=r"/jobs$")
    batch.list_namespaced_job(NS)  # not consumed by a GET
    with pytest.raises(ApiException) as exc:
        batch.create_namespaced_job(NS, job("j1"))
    assert exc.value.status == 500
    assert batch.create_namespaced_job(NS, job("j1")).metadata.name == "j1"
    assert server.pending_faults == 0


def test_concurrent_creates_of_one_name_yield_one_201(server: KubeApiServer) -> None:
    barrier = threading.Barrier(20)
    codes: list[int] = []
    lock = threading.Lock()

    def create() -> None:
        batch = client.BatchV1Api(client.ApiClient(client.Configuration(host=server.url)))
        barrier.wait()
        try:
            code = batch.create_namespaced_job_with_http_info(NS, job("same"))[1]
        except ApiException as exc:
            code = exc.status
        with lock:
            codes.append(code)

    threads = [threading.Thread(target=create) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=ceiling(10))
    assert sorted(codes) == [201] + [409] * 19
    assert len(server.list("jobs")) == 1


# --------------------------------------------------------------------------- Python API, pods


def test_python_api_writes_are_seen_over_http_and_by_listeners(
    server: KubeApiServer, core: client.CoreV1Api
) -> None:
    heard: list[WatchEvent] = []
    server.add_listener(heard.append)
    created = server.create("pods", pod("p1", app="x"), namespace="team-a")
    server.patch_status("pods", "p1", {"phase": "Running"}, namespace="team-a")
    server.set_pod_log("p1", "hello\n", namespace="team-a")

    fetched = core.read_namespaced_pod("p1", "team-a")
    assert fetched.metadata.uid == created["metadata"]["uid"] and fetched.status.phase == "Running"
    assert [p.metadata.name for p in core.list_namespaced_pod("team-a", label_selector="app=x").items] == [
        "p1"
    ]
    assert core.read_namespaced_pod_log("p1", "team-a") == "hello\n"
    assert [(e.type, e.resource.plural) for e in heard] == [("ADDED", "pods"), ("MODIFIED", "pods")]
    assert heard[1].old is not None and "status" not in heard[1].old


def test_pods_and_events_are_read_only_over_http(server: KubeApiServer, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod(NS, pod("p1"))
    assert exc.value.status == 405
    server.create(
        "events",
        {
            "metadata": {"name": "j1.1"},
            "involvedObject": {"kind": "Job", "name": "j1"},
            "reason": "SuccessfulCreate",
            "message": "Created pod",
            "type": "Normal",
        },
    )
    events = core.list_namespaced_event(NS, field_selector="involvedObject.name=j1").items
    assert [e.reason for e in events] == ["SuccessfulCreate"]


def test_dry_run_create_stores_nothing(server: KubeApiServer, batch: client.BatchV1Api) -> None:
    echoed = batch.create_namespaced_job(NS, job("j1"), dry_run="All")
    assert echoed.metadata.name == "j1" and server.list("jobs") == []


# --------------------------------------------------------------------------- pure helpers


def test_merge_patch_null_deletes_and_lists_replace() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None}, "l": [3]}) == {
        "a": {"c": 2},
        "l": [3],
    }


def test_json_patch_move_copy_and_escaping() -> None:
    doc = {"metadata": {"labels": {"a/b": "1"}}, "list": [1, 2]}
    out = json_patch(
        doc,
        [
            {"op": "copy", "from": "/metadata/labels/a~1b", "path": "/x"},
            {"op": "move", "from": "/list/0", "path": "/list/-"},
        ],
    )
    assert out == {"metadata": {"labels": {"a/b": "1"}}, "list": [2, 1], "x": "1"}
    assert doc["list"] == [1, 2]  # the input is not modified


def test_label_selector_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        LabelSelector("a in (x")
