"""The stage operations on real servers: fake-gcs-server, the Kubernetes API double with the real
client, and the Hub double with the real huggingface_hub client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from rlpipe.cluster import ClusterClient
from rlpipe.control import services
from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.stage.service import StageService
from rlpipe.core import layout
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.manifests import RenderContext, conversion_cache
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import RunRecord, Source
from rlpipe.local.hub_double import HubDouble
from rlpipe.local.kube_api import KubeApiServer
from tests.conftest import Buckets, minimal_request

NS = "rlpipe"
# The local stack's shape of a Workflows callback URL (rlpipe.control.adapters.callbacks).
CALLBACK = "http://127.0.0.1:9/v1/projects/p/locations/us-central1/workflows/rlpipe-pipeline/executions/e/callbacks/c1"
REPO = "google/gemma-4-26b-a4b-it"


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    server.add_repo(REPO)
    server.add_repo("google/gated-model", gated=True, public_metadata=True)  # like the real Hub
    server.add_known_datasets({"openai/gsm8k": {"train": 800, "test": 160}})  # plan pins it too
    yield server
    server.stop()


@pytest.fixture
def env(
    buckets: Buckets, kube: KubeApiServer, hub: HubDouble, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
    published: list[tuple[str, dict[str, Any]]] = []
    settings = Settings(
        project="p",
        artifacts_bucket=buckets.artifacts,
        state_bucket=buckets.state,
        namespace=NS,
        kube_url=kube.url,
        status_topic="rlpipe-status",
    )
    ledger = buckets.ledger()
    cluster = ClusterClient.from_settings(settings, sleep=lambda s: None)
    service = StageService(
        settings=settings,
        ledger=ledger,
        artifacts=buckets.store("artifacts"),
        state=buckets.store("state"),
        cluster=cluster,
        log=Logger("test"),
        publish=lambda topic, msg: published.append((topic, msg)),
        policies=services.run_policies(settings, ledger, buckets.store("state"), Logger("test")),
    )

    def claim(run_id: str, **fields: Any) -> RunRecord:
        req = validate_request(minimal_request(**fields))
        record = RunRecord(
            run_id=run_id, key=f"k:{run_id}", source=Source(kind="cli"), request=req.model_dump(mode="json")
        )
        record.execution.name = f"projects/p/locations/l/workflows/w/executions/{run_id}-exec"
        ledger.claim(record)
        return record

    for obj in kube.list("jobs", namespace=NS) + kube.list("jobsets", namespace=NS):
        kube.delete("jobs" if obj["kind"] == "Job" else "jobsets", obj["metadata"]["name"], namespace=NS)
    return {
        "service": service,
        "ledger": ledger,
        "claim": claim,
        "published": published,
        "kube": kube,
        "store": buckets.store("artifacts"),  # what workloads write
        "state": buckets.store("state"),  # the control plane's: ledgers, READY.json
    }


def rewired(service: StageService, **changes: Any) -> StageService:
    """The service with ``changes`` (its settings, its clock), and its run policies wired again
    from them, as control.services wires a function's."""
    changed = replace(service, **changes)
    return replace(
        changed,
        policies=services.run_policies(
            changed.settings, changed.ledger, changed.state, changed.log, clock=changed.clock
        ),
    )


def _conditions(*types: str) -> dict[str, Any]:
    return {
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": t,
                "message": t,
                "lastTransitionTime": "2026-12-02T00:00:00Z",
            }
            for t in types
        ]
    }


def test_plan_pins_the_sha_and_runs_every_stage_without_a_cache(env: dict[str, Any], hub: HubDouble) -> None:
    env["claim"]("rplan0000001")
    plan = env["service"].plan("rplan0000001", "rplan0000001-exec")
    assert plan["stages"] == ["convert", "train", "export"] and plan["cache_hit"] is False
    record = env["ledger"].get("rplan0000001")
    assert record.lineage.hf_sha == hub.repos[REPO].branches["main"]
    assert plan["timeouts"]["train"] == 24 * 3600 and plan["max_retries"] == 12
    assert plan["budgets"] == {"preempted": 5, "capacity": 10, "resources": 1, "transient": 3}


def test_plan_skips_convert_when_the_cache_is_ready(env: dict[str, Any], hub: HubDouble) -> None:
    env["claim"]("rcache000001")
    req = validate_request(minimal_request())
    cache = conversion_cache(
        req,
        RenderContext(
            run_id="x", bucket=env["store"].bucket_name, hf_revision=hub.repos[REPO].branches["main"]
        ),
    )
    env["state"].create(cache.ready, blobstore.dumps({"attempt_dir": cache.attempt_dir("rother000001", 1)}))
    plan = env["service"].plan("rcache000001")
    assert plan["stages"] == ["train", "export"] and plan["cache_hit"] is True
    record = env["ledger"].get("rcache000001")
    assert record.lineage.converted_uri == layout.gs(cache.bucket, cache.attempt_dir("rother000001", 1))
    assert cache.bucket == env["store"].bucket_name, "the converted checkpoint is an artifact"


def test_a_ready_marker_a_workload_could_write_is_not_a_cache_hit(
    env: dict[str, Any], hub: HubDouble
) -> None:
    """A workload may write under cache/maxtext/ in the artifacts bucket; a READY.json there names
    nothing: only the state bucket's, written by the stage function, makes a cache hit."""
    env["claim"]("rforged00001")
    req = validate_request(minimal_request())
    cache = conversion_cache(
        req,
        RenderContext(
            run_id="x", bucket=env["store"].bucket_name, hf_revision=hub.repos[REPO].branches["main"]
        ),
    )
    forged = cache.attempt_dir("rattacker001", 1)
    env["store"].put(forged + "0/commit_success.txt", b"ok")
    env["store"].create(cache.ready, blobstore.dumps({"attempt_dir": forged}))
    plan = env["service"].plan("rforged00001")
    assert plan["stages"] == ["convert", "train", "export"] and plan["cache_hit"] is False
    assert env["ledger"].get("rforged00001").lineage.converted_uri is None


def test_plan_of_a_second_execution_is_skipped(env: dict[str, Any]) -> None:
    env["claim"]("rowner000001")
    assert env["service"].plan("rowner000001", "someone-else")["skip"] is True


def test_gated_model_fails_the_run_with_the_license_hint(env: dict[str, Any]) -> None:
    env["claim"]("rgated000001", hf_repo="google/gated-model")
    with pytest.raises(PermanentFailure, match="accept the license"):
        env["service"].plan("rgated000001")
    record = env["ledger"].get("rgated000001")
    assert record.state == "failed" and "accept the license" in record.failure.message
    assert env["published"] and env["published"][-1][1]["state"] == "failed"


def test_launch_is_idempotent(env: dict[str, Any]) -> None:
    env["claim"]("rlaunch00001")
    env["service"].plan("rlaunch00001")
    first = env["service"].launch("rlaunch00001", "convert", 1, CALLBACK)
    second = env["service"].launch("rlaunch00001", "convert", 1, CALLBACK)
    assert first["uid"] == second["uid"]
    assert [j["metadata"]["name"] for j in env["kube"].list("jobs", namespace=NS)] == [
        "rlaunch00001-convert-a1"
    ]
    record = env["ledger"].get("rlaunch00001")
    assert (
        record.state == "converting" and len(record.attempts) == 1 and record.callbacks["convert"] == CALLBACK
    )


def _convert_done(env: dict[str, Any], run_id: str, attempt: int = 1) -> str:
    record = env["ledger"].get(run_id)
    req = validate_request(record.request)
    cache = conversion_cache(
        req, RenderContext(run_id=run_id, bucket=env["store"].bucket_name, hf_revision=record.lineage.hf_sha)
    )
    directory = cache.attempt_dir(run_id, attempt)
    env["store"].put(directory + "0/items/_METADATA", b"{}")
    env["store"].put(directory + "0/commit_success.txt", b"ok")
    return directory


def test_job_succeeded_without_its_artifact_is_a_permanent_failure(env: dict[str, Any]) -> None:
    env["claim"]("rnoart000001")
    env["service"].plan("rnoart000001")
    env["service"].launch("rnoart000001", "convert", 1)
    env["kube"].patch_status(
        "jobs", "rnoart000001-convert-a1", _conditions("SuccessCriteriaMet", "Complete"), namespace=NS
    )
    status = env["service"].status("rnoart000001", "convert", 1)
    assert status["phase"] == "failed" and status["failure"]["tag"] == "permanent"
    assert (
        "output is incomplete" in status["failure"]["message"]
        and "commit_success.txt" in status["failure"]["message"]
    )


def test_artifact_complete_but_job_running_waits(env: dict[str, Any]) -> None:
    env["claim"]("rwait0000001")
    env["service"].plan("rwait0000001")
    env["service"].launch("rwait0000001", "convert", 1)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    env["kube"].patch_status("jobs", "rwait0000001-convert-a1", {"active": 1, "startTime": now}, namespace=NS)
    env["kube"].create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "rwait0000001-convert-a1-0-abcde",
                "namespace": NS,
                "labels": {"batch.kubernetes.io/job-name": "rwait0000001-convert-a1"},
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "workload-container", "image": "i"}]},
            "status": {
                "phase": "Running",
                "startTime": now,
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
            },
        },
    )
    _convert_done(env, "rwait0000001")
    assert env["service"].status("rwait0000001", "convert", 1)["phase"] in ("running", "queued")
    env["kube"].patch_status(
        "jobs", "rwait0000001-convert-a1", _conditions("SuccessCriteriaMet", "Complete"), namespace=NS
    )
    assert env["service"].status("rwait0000001", "convert", 1)["phase"] == "succeeded"
    record = env["ledger"].get("rwait0000001")
    marker = layout.ConversionCache(env["store"].bucket_name, record.lineage.conversion_key).ready
    ready = json.loads(env["state"].read(marker).data)
    assert ready["attempt_dir"].endswith("/rwait0000001-a1/")
    assert not env["store"].exists(marker), "READY.json is the control plane's, never in the artifacts bucket"
    assert record.lineage.converted_uri == f"gs://{env['store'].bucket_name}/{ready['attempt_dir']}"


def test_class_budget_turns_the_next_failure_permanent(env: dict[str, Any]) -> None:
    env["claim"]("rbudget00001", retry={"budgets": {"preempted": 1}})
    env["service"].plan("rbudget00001")
    preempted = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "PodFailurePolicy",
                "message": "pod disrupted",
                "lastTransitionTime": "2026-12-02T00:00:00Z",
            }
        ]
    }
    pod = lambda attempt: {  # noqa: E731
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"rbudget00001-convert-a{attempt}-0-abcde",
            "namespace": NS,
            "labels": {
                "batch.kubernetes.io/job-name": f"rbudget00001-convert-a{attempt}",
                "job-name": f"rbudget00001-convert-a{attempt}",
            },
        },
        "spec": {"containers": [{"name": "workload-container", "image": "i"}]},
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "preempted",
                }
            ],
        },
    }
    tags = []
    for attempt in (1, 2):
        env["service"].launch("rbudget00001", "convert", attempt)
        env["kube"].create("pods", pod(attempt))
        env["kube"].patch_status("jobs", f"rbudget00001-convert-a{attempt}", preempted, namespace=NS)
        tags.append(env["service"].status("rbudget00001", "convert", attempt)["failure"])
    assert tags[0]["tag"] == "preempted"
    assert tags[1]["tag"] == "permanent" and "preempted budget of 1 exhausted" in tags[1]["message"]
    record = env["ledger"].get("rbudget00001")
    assert [(a.attempt, a.failure_class) for a in record.attempts] == [(1, "preempted"), (2, "permanent")]


def test_cleanup_deletes_only_that_runs_objects(env: dict[str, Any]) -> None:
    for run_id in ("rclean000001", "rclean000002"):
        env["claim"](run_id)
        env["service"].plan(run_id)
        env["service"].launch(run_id, "convert", 1)
    _convert_done(env, "rclean000001")
    env["service"].launch("rclean000001", "train", 1)
    assert sorted(env["service"].cleanup("rclean000001")["deleted"]) == [
        "rclean000001-convert-a1",
        "rclean000001-train-a1",
    ]
    left = [
        o["metadata"]["name"]
        for o in env["kube"].list("jobs", namespace=NS) + env["kube"].list("jobsets", namespace=NS)
    ]
    assert left == ["rclean000002-convert-a1"]
    assert "cleanup" in [e["event"] for e in env["ledger"].history("rclean000001")]


def test_finish_records_the_outcome_once_and_publishes_a_status_message(env: dict[str, Any]) -> None:
    env["claim"]("rfinish00001", notify="projects/my-project/topics/team-status")
    failure = {"tag": "preempted", "message": "budget exhausted", "stage": "train", "attempt": 6}
    message = env["service"].finish("rfinish00001", "failed", failure)
    assert message["state"] == "failed" and "budget exhausted" in message["message"]
    env["service"].finish("rfinish00001", "succeeded")  # a late duplicate changes nothing
    env["service"].finish("rfinish00001", "failed", failure)  # nor does a repeat of the same call
    record = env["ledger"].get("rfinish00001")
    assert record.state == "failed" and record.failure.stage == "train"
    assert [t for t, _ in env["published"]] == ["projects/my-project/topics/team-status"]  # once per run


def test_launch_of_a_new_attempt_deletes_the_previous_one(env: dict[str, Any]) -> None:
    env["claim"]("rretry000001")
    env["service"].plan("rretry000001")
    env["service"].launch("rretry000001", "convert", 1)
    env["service"].launch("rretry000001", "convert", 2)
    assert [j["metadata"]["name"] for j in env["kube"].list("jobs", namespace=NS)] == [
        "rretry000001-convert-a2"
    ]


# ---- the HTTP function: failure class → status code the workflow acts on ------------------------


def _stage_app() -> Any:
    from functions_framework import create_app

    from tests.conftest import ROOT

    return create_app(target="stage", source=str(ROOT / "functions" / "main.py"), signature_type="http")


def _post(client: Any, **body: Any) -> tuple[int, dict[str, Any]]:
    response = client.post("/", json=body)
    return response.status_code, response.get_json()


def test_status_codes_come_from_the_real_exceptions(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each mapping is driven by the library raising its own exception, not by a stand-in."""
    from rlpipe.control import services
    from rlpipe.control.adapters import interleave

    monkeypatch.setattr(services, "stage_service", lambda log: env["service"])
    client = _stage_app().test_client()
    ex = "rcodes000001-exec"
    env["claim"]("rcodes000001")
    assert _post(client, op="plan", run_id="rcodes000001", execution_id=ex)[0] == 200
    assert (
        _post(client, op="launch", run_id="rcodes000001", stage="train", attempt=1, execution_id=ex)[0] == 200
    )

    # IllegalTransition: training → converting is not a transition the ledger allows.
    code, body = _post(
        client, op="launch", run_id="rcodes000001", stage="convert", attempt=1, execution_id=ex
    )
    assert code == 409 and "not allowed" in body["error"]["message"]

    # ConcurrentUpdate: another writer lands between every read and write of the CAS loop.
    ledger = env["ledger"]
    monkeypatch.setattr(ledger, "sleep", lambda s: None)
    with interleave.hooked(
        "ledger.update:read",
        lambda: ledger.store.put(
            ledger.layout("rcodes000001").ledger, ledger.store.read(ledger.layout("rcodes000001").ledger).data
        ),
    ):
        code, body = _post(
            client, op="status", run_id="rcodes000001", stage="train", attempt=1, execution_id=ex
        )
    assert code == 503 and body["error"]["tag"] == "transient"

    # A blob-store error (the object changed under a conditional write) is retryable: 503.
    def conflict() -> None:
        raise blobstore.PreconditionFailed("runs/rcodes000001/run.json")

    with interleave.hooked("ledger.update:read", conflict):
        code, body = _post(client, op="finish", run_id="rcodes000001", outcome="failed", failure=None)
    assert code == 503 and body["error"]["tag"] == "transient"

    # A malformed failure is the caller's bug: 400, never 500.
    code, body = _post(client, op="finish", run_id="rcodes000001", outcome="failed", failure="boom")
    assert code == 400 and "failure" in body["error"]["message"]
    # Plan, launch and status without the calling execution's id are refused.
    code, body = _post(client, op="status", run_id="rcodes000001", stage="train", attempt=1)
    assert code == 400 and "execution_id" in body["error"]["message"]
    # Another execution is told it does not own the run.
    code, body = _post(
        client, op="status", run_id="rcodes000001", stage="train", attempt=1, execution_id="other"
    )
    assert code == 409 and body["error"]["tag"] == "not_owner"


def test_stage_rejects_a_non_json_body() -> None:
    response = _stage_app().test_client().post("/", data=b"not json", headers={"Content-Type": "text/plain"})
    assert response.status_code == 400 and "JSON" in response.get_json()["error"]["message"]


def test_stage_over_http_against_real_servers(env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from rlpipe.control import services

    monkeypatch.setattr(services, "stage_service", lambda log: env["service"])
    env["claim"]("rhttp0000001")
    client = _stage_app().test_client()
    plan = client.post(
        "/", json={"op": "plan", "run_id": "rhttp0000001", "execution_id": "rhttp0000001-exec"}
    )
    assert plan.status_code == 200 and plan.get_json()["stages"][0] == "convert"
    bad = client.post(
        "/",
        json={
            "op": "launch",
            "run_id": "rhttp0000001",
            "stage": "convert",
            "attempt": 0,
            "execution_id": "x",
        },
    )
    assert bad.status_code == 400
    missing = client.post("/", json={"op": "plan", "run_id": "rnope0000001", "execution_id": "e"})
    assert missing.status_code == 422 and "no ledger" in missing.get_json()["error"]["message"]


@pytest.mark.parametrize(
    "url",
    [
        "http://cb/1",
        "https://attacker.example/v1/projects/p/locations/us-central1/workflows/rlpipe-pipeline/executions/e/callbacks/c",
        CALLBACK.replace("rlpipe-pipeline", "other-workflow"),
    ],
)
def test_launch_refuses_to_store_a_callback_url_of_anything_but_this_workflow(
    env: dict[str, Any], url: str
) -> None:
    env["claim"]("rcbrefuse001")
    env["service"].plan("rcbrefuse001")
    with pytest.raises(PermanentFailure, match="callback_url"):
        env["service"].launch("rcbrefuse001", "convert", 1, url)
    assert env["ledger"].get("rcbrefuse001").callbacks == {}
    assert not env["kube"].list("jobs", namespace=NS)


def test_a_train_launch_pins_the_data_a_run_planned_without_it_never_had(env: dict[str, Any]) -> None:
    """A run planned before datasets were pinned (lineage.data empty) would otherwise render a
    train_rl pointed at files nobody stages: launch pins them first, once, and stages them."""
    run_id = "rnodata00001"
    env["claim"](run_id)
    env["service"].plan(run_id)

    def forget(r: Any) -> str:
        r.lineage.data = None
        return "forgot"

    env["ledger"].edit(run_id, forget)
    launched = env["service"].launch(run_id, "train", 1)
    record = env["ledger"].get(run_id)
    assert record.lineage.data and record.lineage.data["train"]["repo"] == "openai/gsm8k"
    jobset = env["kube"].get("jobsets", launched["workload"], namespace=NS)
    head = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    plan = json.loads(next(e["value"] for e in head["env"] if e["name"] == "RLPIPE_DATA_PLAN"))
    assert {f["sha"] for f in plan["files"]} == {record.lineage.data["train"]["sha"]}
