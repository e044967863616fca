"""The cluster simulator, driven only as the pipeline drives it: real rendered workloads created
through the real ``kubernetes`` client against the API double, files checked through the real
storage client against fake-gcs-server.

What matters is that a pipeline tested against the simulator meets what GKE and MaxText do:
completion markers written last, checkpoints where Tunix puts them, resume from the latest
committed step, Kueue suspension first, and each fault visible where a real cluster shows it.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from rlpipe.core import manifests, request, train_log
from rlpipe.local.kube_api import KubeApiServer, WatchEvent
from rlpipe.local.simulator import ClusterSimulator, Scenario, ScenarioError, Timing, parse_fault
from rlpipe.local.simulator.program import parse_argv
from tests.conftest import Buckets, minimal_request
from tests.harness.patience import ceiling
from tests.harness.staged_data import seed_training_data

NS = "rlpipe"
GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"
ZERO = Timing.zero()
Obj = dict[str, Any]


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:  # the real validator checks every status we write
        yield server


@pytest.fixture
def simulate(kube: KubeApiServer, buckets: Buckets) -> Iterator[Callable[..., ClusterSimulator]]:
    started: list[ClusterSimulator] = []

    def make(*faults: str, timing: Timing = ZERO, **kwargs: Any) -> ClusterSimulator:
        sim = ClusterSimulator(
            kube, buckets.client, scenario=Scenario.from_strings(faults), timing=timing, seed=7, **kwargs
        )
        started.append(sim.start())
        return sim

    yield make
    for sim in started:
        sim.stop()
        crashed = [n for n, entries in sim.history.items() if any("crashed" in e.detail for e in entries)]
        assert not crashed, f"simulation crashed for {crashed}; see the simulator log"


def render(buckets: Buckets, stage: str, attempt: int = 1, run_id: str = "run1", **fields: Any) -> Obj:
    req = request.validate_request(minimal_request(**fields))
    obj = manifests.render(
        req, stage, attempt, manifests.RenderContext(run_id=run_id, bucket=buckets.artifacts)
    )
    if stage != "convert":
        _seed_pinned(buckets, obj)
    seed_training_data(buckets.client, obj)  # what the head's staging step would have put there
    return obj


def _seed_pinned(buckets: Buckets, obj: Obj) -> None:
    """Train and export may fetch the files conversion pinned (``RLPIPE_PINNED_URI``): put the
    manifest conversion writes last there, standing in for that conversion."""
    text = json.dumps(obj)
    for uri in set(re.findall(r'"name": "RLPIPE_PINNED_URI", "value": "(gs://[^"]+)"', text)):
        _, _, bucket, prefix = uri.split("/", 3)
        blob = buckets.client.bucket(bucket).blob(prefix.rstrip("/") + "/rlpipe-pinned.json")
        blob.upload_from_string(json.dumps({"_simulated": "seeded by the test"}))


def create(kube: KubeApiServer, obj: Obj) -> Obj:
    api = kube.api_client()
    if obj["kind"] == "Job":
        return api.sanitize_for_serialization(client.BatchV1Api(api).create_namespaced_job(NS, obj))
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, NS, "jobsets", obj)


def program_args(obj: Obj) -> dict[str, str]:
    """The key=value arguments of the rendered program container (test side only)."""
    if obj["kind"] == "Job":
        containers = obj["spec"]["template"]["spec"]["containers"]
    else:
        containers = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    return dict(a.split("=", 1) for a in containers[0]["args"] if "=" in a and not a.startswith("--"))


def blobs(buckets: Buckets, uri: str) -> dict[str, int]:
    """Object name → generation under a gs:// prefix (generations are microsecond clocks)."""
    prefix = uri.split("/", 3)[3].rstrip("/") + "/"
    return {b.name: b.generation for b in buckets.client.list_blobs(buckets.artifacts, prefix=prefix)}


def seed(buckets: Buckets, uri: str) -> None:
    """Put one object under a prefix, standing in for an earlier stage's output."""
    name = uri.split("/", 3)[3].rstrip("/") + "/_METADATA"
    buckets.client.bucket(buckets.artifacts).blob(name).upload_from_string(b"{}")


def condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def pods_of(kube: KubeApiServer, selector: str) -> list[Obj]:
    return kube.list("pods", namespace=NS, label_selector=selector)


def events_for(kube: KubeApiServer, name: str) -> list[str]:
    return [
        e["reason"] for e in kube.list("events", namespace=NS, field_selector=f"involvedObject.name={name}")
    ]


def finish(sim: ClusterSimulator, obj: Obj, timeout: float = ceiling(15)) -> None:
    assert sim.wait_finished(obj["metadata"]["name"], timeout), f"{obj['metadata']['name']} did not finish"


def capture(kube: KubeApiServer, resource: str) -> list[Obj]:
    """Every state of every object of a kind, as watchers saw it, in order."""
    seen: list[Obj] = []

    def listener(event: WatchEvent) -> None:
        if event.resource.plural == resource and event.type != "DELETED":
            seen.append(event.object)

    kube.add_listener(listener)
    return seen


# ---------------------------------------------------------------- convert


def test_convert_writes_the_step_commit_last_and_completes(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate()
    job = render(buckets, "convert")
    create(kube, job)
    finish(sim, job)

    base = program_args(job)["base_output_directory"]
    objects = blobs(buckets, base)
    step = base.split("/", 3)[3].rstrip("/") + "/0/"
    by_generation = sorted(objects, key=objects.get)
    assert by_generation[-1] == step + "commit_success.txt"
    assert by_generation[-2] == step + "_CHECKPOINT_METADATA"
    items = [n for n in objects if n.startswith(step + "items/")]
    assert {
        step + "items/_METADATA",
        step + "items/_sharding",
        step + "items/array_metadatas/process_0",
    } <= set(items)
    assert any(n.endswith("/.zarray") for n in items) and any(n.endswith("/0.0") for n in items)
    assert max(items, key=objects.get) == step + "items/commit_success.txt"

    done = kube.get("jobs", job["metadata"]["name"], namespace=NS)
    assert condition(done, "Complete")["status"] == "True"
    assert condition(done, "SuccessCriteriaMet")["status"] == "True"
    assert done["status"]["succeeded"] == 1 and done["status"]["completionTime"]
    (pod,) = pods_of(kube, f"batch.kubernetes.io/job-name={job['metadata']['name']}")
    assert pod["metadata"]["name"].startswith(job["metadata"]["name"] + "-")
    assert pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == done["metadata"]["uid"]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == done["metadata"]["uid"]
    assert pod["status"]["phase"] == "Succeeded" and pod["spec"]["nodeName"].startswith("gke-")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert {"Scheduled", "Pulling", "Pulled", "Created", "Started"} <= set(
        events_for(kube, pod["metadata"]["name"])
    )


def test_kueue_suspends_before_admission(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    jobs, jobsets = capture(kube, "jobs"), capture(kube, "jobsets")
    sim = simulate()
    job = render(buckets, "convert")
    train = render(buckets, "train")
    seed(buckets, program_args(train)["load_parameters_path"])
    create(kube, job)
    create(kube, train)
    finish(sim, job)
    finish(sim, train)

    def states(seen: list[Obj], name: str) -> list[tuple[bool, str | None]]:
        out = []
        for obj in seen:
            if obj["metadata"]["name"] == name:
                cond = condition(obj, "Suspended")
                out.append((bool(obj["spec"].get("suspend")), cond and f"{cond['status']}/{cond['reason']}"))
        return out

    job_states = states(jobs, job["metadata"]["name"])
    assert (True, "True/JobSuspended") in job_states
    assert job_states.index((True, "True/JobSuspended")) < job_states.index((False, "False/JobResumed"))
    resumed = next(
        o for o in jobs if condition(o, "Suspended") and condition(o, "Suspended")["status"] == "False"
    )
    assert resumed["status"]["startTime"]
    js_states = states(jobsets, train["metadata"]["name"])
    assert js_states.index((True, "True/SuspendedJobs")) < js_states.index((False, "False/ResumeJobs"))
    # No pod exists before admission: the first pod comes after the resume.
    assert "CreatedWorkload" in events_for(kube, job["metadata"]["name"])


# ---------------------------------------------------------------- train


def committed(objects: dict[str, int], actor: str) -> dict[int, dict[str, int]]:
    """Step → its objects, for the steps that have commit_success.txt."""
    steps: dict[int, dict[str, int]] = {}
    for name, gen in objects.items():
        rest = name[len(actor) :].split("/", 1)
        if rest[0].isdigit():
            steps.setdefault(int(rest[0]), {})[rest[1]] = gen
    return {s: files for s, files in steps.items() if "commit_success.txt" in files}


def test_train_checkpoints_every_period_and_at_the_end(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate()
    train = render(buckets, "train", training={"num_batches": 120})
    args = program_args(train)
    assert "checkpoint_period" not in args  # MaxText's default (50) applies
    seed(buckets, args["load_parameters_path"])
    create(kube, train)
    finish(sim, train)

    actor = (
        f"{args['base_output_directory'].split('/', 3)[3].rstrip('/')}/{args['run_name']}/checkpoints/actor/"
    )
    steps = committed(blobs(buckets, "gs://x/" + actor), actor)
    assert sorted(steps) == [50, 100, 120]
    for files in steps.values():
        assert max(files, key=files.get) == "commit_success.txt"
        assert {"_CHECKPOINT_METADATA", "model_params/_METADATA", "optimizer_state/_METADATA"} <= set(files)

    js = kube.get("jobsets", train["metadata"]["name"], namespace=NS)
    assert condition(js, "Completed")["status"] == "True" and js["status"]["terminalState"] == "Completed"
    head_job = kube.get("jobs", f"{train['metadata']['name']}-pathways-head-0", namespace=NS)
    assert head_job["metadata"]["ownerReferences"][0]["uid"] == js["metadata"]["uid"]
    assert condition(head_job, "Complete")["status"] == "True"
    (head,) = pods_of(kube, f"jobset.sigs.k8s.io/jobset-name={train['metadata']['name']}")
    assert head["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "pathways-head"
    assert {s["name"] for s in head["status"]["initContainerStatuses"]} == {"pathways-proxy", "pathways-rm"}
    workers = [
        e
        for e in sim.history_of(train["metadata"]["name"], "pod")
        if "-worker-" in e.detail and e.detail.endswith("created")
    ]
    assert len(workers) == 8  # one pod per v6e-32 host; deleted with their Jobs when the JobSet completed

    log = kube.pod_log(head["metadata"]["name"], namespace=NS)
    lines = log.splitlines()
    assert lines and all(line.startswith("[simulated]") for line in lines)
    parsed = train_log.parse(log)  # train_rl's real lines (tests/fixtures/maxtext_facts.yaml)
    assert parsed.pre is not None and parsed.post is not None and parsed.latest_step == 120
    assert [e.step for e in parsed.intermediate] == list(range(10, 121, 10))
    rewards = [parsed.pre.mean_reward, *(e.mean_reward for e in parsed.intermediate), parsed.post.mean_reward]
    assert rewards[-1] > rewards[0] and "Post RL Training:" in lines[-1]


def test_a_retried_attempt_resumes_from_the_latest_committed_step(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("train:1:preempt@60")
    first = render(buckets, "train", 1, training={"num_batches": 120})
    args = program_args(first)
    seed(buckets, args["load_parameters_path"])
    create(kube, first)
    finish(sim, first)
    failed = kube.get("jobsets", first["metadata"]["name"], namespace=NS)
    assert condition(failed, "Failed")["reason"] == "ReachedMaxRestarts"

    actor = (
        f"{args['base_output_directory'].split('/', 3)[3].rstrip('/')}/{args['run_name']}/checkpoints/actor/"
    )
    before = blobs(buckets, "gs://x/" + actor)
    assert sorted(committed(before, actor)) == [50]

    second = render(buckets, "train", 2, training={"num_batches": 120})
    create(kube, second)  # the attempt-1 fault must not touch attempt 2
    finish(sim, second)
    done = kube.get("jobsets", second["metadata"]["name"], namespace=NS)
    assert done["status"]["terminalState"] == "Completed"
    after = blobs(buckets, "gs://x/" + actor)
    assert sorted(committed(after, actor)) == [50, 100, 120]
    step50 = {n: g for n, g in before.items() if n.startswith(actor + "50/")}
    assert step50 and all(after[n] == g for n, g in step50.items())  # not rewritten
    assert not any("/actor/50/" in uri for uri in sim.files_written(second["metadata"]["name"]))
    (head,) = pods_of(kube, f"jobset.sigs.k8s.io/jobset-name={second['metadata']['name']}")
    log = kube.pod_log(head["metadata"]["name"], namespace=NS)
    assert "Restored params from step: 50 in " in log
    assert "] Train step 51 training loss" in log and "] Train step 50 training loss" not in log


def test_train_refuses_to_start_without_converted_parameters(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate()
    train = render(buckets, "train")
    create(kube, train)  # nothing at load_parameters_path
    finish(sim, train)
    js = kube.get("jobsets", train["metadata"]["name"], namespace=NS)
    assert js["status"]["terminalState"] == "Failed"
    (head,) = pods_of(kube, f"jobset.sigs.k8s.io/jobset-name={train['metadata']['name']}")
    assert head["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    assert "no checkpoint found at load_parameters_path" in kube.pod_log(
        head["metadata"]["name"], namespace=NS
    )


def test_only_the_newest_ten_checkpoints_are_kept(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate()
    train = render(buckets, "train", training={"num_batches": 12, "checkpoint_period": 1})
    args = program_args(train)
    seed(buckets, args["load_parameters_path"])
    create(kube, train)
    finish(sim, train)
    actor = (
        f"{args['base_output_directory'].split('/', 3)[3].rstrip('/')}/{args['run_name']}/checkpoints/actor/"
    )
    objects = blobs(buckets, "gs://x/" + actor)
    assert sorted(committed(objects, actor)) == list(range(3, 13))
    assert not any(n.startswith((actor + "1/", actor + "2/")) for n in objects)  # no orphans left behind
    assert any("/actor/1/" in e.detail for e in sim.history_of(train["metadata"]["name"], "deleted"))


def test_a_jobset_with_restarts_left_restarts_instead_of_failing(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("train:preempt@3:head")
    train = render(buckets, "train", training={"num_batches": 5})
    train["spec"]["failurePolicy"]["maxRestarts"] = 1
    seed(buckets, program_args(train)["load_parameters_path"])
    create(kube, train)
    finish(sim, train)
    js = kube.get("jobsets", train["metadata"]["name"], namespace=NS)
    assert js["status"]["terminalState"] == "Completed"
    assert (js["status"]["restarts"], js["status"]["restartsCountTowardsMax"]) == (1, 1)
    head_job = kube.get("jobs", f"{train['metadata']['name']}-pathways-head-0", namespace=NS)
    assert head_job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
    assert "RestartJobSetFailurePolicyAction" in events_for(kube, train["metadata"]["name"])


# ---------------------------------------------------------------- export


def _export_uri(obj: Obj) -> str:
    """Where the export Job's last step uploads what to_huggingface wrote (its container's env)."""
    env = obj["spec"]["template"]["spec"]["containers"][0]["env"]
    return next(e["value"] for e in env if e["name"] == "RLPIPE_EXPORT_URI")


def test_export_uploads_what_to_huggingface_wrote_with_the_manifest_last(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    """The played to_huggingface writes into the pod's own disk (a local base_output_directory);
    the script's last step, run for real, uploads those files and writes the manifest last."""
    sim = simulate()
    export = render(buckets, "export")
    args = program_args(export)
    assert not args["base_output_directory"].startswith("gs://")
    seed(buckets, args["load_parameters_path"])
    create(kube, export)
    finish(sim, export)

    base = _export_uri(export).split("/", 3)[3]
    objects = blobs(buckets, _export_uri(export))
    manifest = base + "rlpipe-export.json"
    assert max(objects, key=objects.get) == manifest
    written = sim.files_written(export["metadata"]["name"])
    assert len(written) == len(set(written)) == len(objects)  # each file once: no early placeholder
    assert written[-1].endswith("/rlpipe-export.json")
    bucket = buckets.client.bucket(buckets.artifacts)
    listed = {f["path"]: f for f in json.loads(bucket.blob(manifest).download_as_bytes())["files"]}
    assert {base + p for p in listed} == set(objects) - {manifest}
    for path, entry in listed.items():
        data = bucket.blob(base + path).download_as_bytes()
        assert (entry["size"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    index = json.loads(bucket.blob(base + "model.safetensors.index.json").download_as_bytes())
    shards = {n[len(base) :] for n in objects if n.endswith(".safetensors")}
    assert (
        set(index["weight_map"].values())
        == shards
        == {f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)}
    )
    assert {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} < set(listed)
    total = 0
    for shard in shards:  # each shard is a readable safetensors file holding what the index says
        data = bucket.blob(base + shard).download_as_bytes()
        header = json.loads(data[8 : 8 + struct.unpack("<Q", data[:8])[0]])
        tensors = {k for k in header if k != "__metadata__"}
        assert tensors == {t for t, f in index["weight_map"].items() if f == shard}
        total += max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert index["metadata"]["total_size"] == total
    (pod,) = pods_of(kube, f"job-name={export['metadata']['name']}")
    log = kube.pod_log(pod["metadata"]["name"], namespace=NS)
    assert "Using local directory: /scratch/hf-export" in log
    assert f"rlpipe-manifest: uploaded to {_export_uri(export)}; " in log  # the real step's own line
    assert (
        condition(kube.get("jobs", export["metadata"]["name"], namespace=NS), "Complete")["status"] == "True"
    )


def test_export_without_a_checkpoint_exits_1_and_fails_the_job(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate()
    export = render(buckets, "export")
    create(kube, export)
    finish(sim, export)
    failed = kube.get("jobs", export["metadata"]["name"], namespace=NS)
    assert condition(failed, "Failed")["reason"] == "BackoffLimitExceeded"
    assert condition(failed, "FailureTarget")["status"] == "True"
    (pod,) = pods_of(kube, f"job-name={export['metadata']['name']}")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    assert "no checkpoint found" in kube.pod_log(pod["metadata"]["name"], namespace=NS)
    assert not blobs(buckets, _export_uri(export))


# ---------------------------------------------------------------- placement


def test_tpu_slice_placement_runs_the_program_on_index_0_only(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate()
    job = render(buckets, "convert", placement="tpu-slice")
    create(kube, job)
    finish(sim, job)
    done = kube.get("jobs", job["metadata"]["name"], namespace=NS)
    assert done["status"]["succeeded"] == 8 and done["status"]["completedIndexes"] == "0-7"
    pods = pods_of(kube, f"job-name={job['metadata']['name']}")
    by_index = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p for p in pods}
    assert sorted(by_index) == list(range(8))
    for index, pod in by_index.items():
        assert pod["metadata"]["name"].startswith(f"{job['metadata']['name']}-{index}-")
        assert pod["status"]["phase"] == "Succeeded"
        log = kube.pod_log(pod["metadata"]["name"], namespace=NS)
        assert ("Conversion complete" in log) == (index == 0)
    assert sim.files_written(job["metadata"]["name"])[-1].endswith("/0/commit_success.txt")


# ---------------------------------------------------------------- faults


def test_preempted_conversion_pod_carries_disruption_target(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:preempt")
    job = render(buckets, "convert")
    create(kube, job)
    finish(sim, job)
    (pod,) = pods_of(kube, f"job-name={job['metadata']['name']}")
    disruption = condition(pod, "DisruptionTarget")
    assert disruption["status"] == "True" and disruption["reason"] == "TerminationByKubelet"
    assert pod["status"]["phase"] == "Failed"
    assert condition(kube.get("jobs", job["metadata"]["name"], namespace=NS), "Failed")["status"] == "True"
    assert not any(
        n.endswith("commit_success.txt") for n in blobs(buckets, program_args(job)["base_output_directory"])
    )


def test_pod_failure_policy_ignore_replaces_a_preempted_pod(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:preempt")
    job = render(buckets, "convert")
    job["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    }
    create(kube, job)
    finish(sim, job)
    done = kube.get("jobs", job["metadata"]["name"], namespace=NS)
    assert condition(done, "Complete")["status"] == "True"
    phases = sorted(p["status"]["phase"] for p in pods_of(kube, f"job-name={job['metadata']['name']}"))
    assert phases == ["Failed", "Succeeded"]  # the ignored failure was not counted against backoffLimit 0


@pytest.mark.parametrize("target", ["worker", "head"])
def test_preempted_training_fails_the_jobset_and_keeps_the_evidence(
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
    target: str,
) -> None:
    """The rendered podFailurePolicy fails the disrupted pod's Job at once; that failed Job (and
    its pod) outlive the JobSet's cleanup of active Jobs, so the preemption stays visible."""
    pods = capture(kube, "pods")
    sim = simulate(f"train:preempt@3:{target}")
    train = render(buckets, "train", training={"num_batches": 10})
    seed(buckets, program_args(train)["load_parameters_path"])
    create(kube, train)
    finish(sim, train)
    name = train["metadata"]["name"]
    js = kube.get("jobsets", name, namespace=NS)
    assert condition(js, "Failed")["status"] == "True" and js["status"]["terminalState"] == "Failed"
    disrupted = [p for p in pods if (c := condition(p, "DisruptionTarget")) and c["status"] == "True"]
    rjob = "pathways-head" if target == "head" else "worker"
    assert disrupted and disrupted[0]["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == rjob
    remaining = {p["metadata"]["name"] for p in pods_of(kube, f"jobset.sigs.k8s.io/jobset-name={name}")}
    assert disrupted[0]["metadata"]["name"] in remaining
    jobs = kube.list("jobs", namespace=NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
    failed = [j for j in jobs if (c := condition(j, "Failed")) and c.get("reason") == "PodFailurePolicy"]
    assert failed and "DisruptionTarget" in condition(failed[0], "Failed")["message"]


def test_unschedulable_pods_wait_then_run(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    pods = capture(kube, "pods")
    sim = simulate("convert:unschedulable:2000", timing=Timing(scale=0.0001, ttl=False, poll=0.01))
    job = render(buckets, "convert")
    create(kube, job)
    finish(sim, job)
    scheduled = [condition(p, "PodScheduled") for p in pods]
    reasons = [(c["status"], c.get("reason")) for c in scheduled if c]
    assert ("False", "Unschedulable") in reasons
    assert reasons.index(("False", "Unschedulable")) < reasons.index(("True", None))
    assert "Running" in [p["status"]["phase"] for p in pods]
    (pod,) = pods_of(kube, f"job-name={job['metadata']['name']}")
    assert "FailedScheduling" in events_for(kube, pod["metadata"]["name"])
    assert condition(kube.get("jobs", job["metadata"]["name"], namespace=NS), "Complete")["status"] == "True"


def test_oom_kills_the_container_with_137(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:oom")
    job = render(buckets, "convert")
    create(kube, job)
    finish(sim, job)
    (pod,) = pods_of(kube, f"job-name={job['metadata']['name']}")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
    assert condition(kube.get("jobs", job["metadata"]["name"], namespace=NS), "Failed")["status"] == "True"
    written = blobs(buckets, program_args(job)["base_output_directory"])
    assert written and not any(n.endswith("commit_success.txt") for n in written)  # a partial checkpoint


def test_exit_code_fault(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:exit:3")
    job = render(buckets, "convert")
    create(kube, job)
    finish(sim, job)
    (pod,) = pods_of(kube, f"job-name={job['metadata']['name']}")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert "exited with status 3" in kube.pod_log(pod["metadata"]["name"], namespace=NS)
    assert (
        condition(kube.get("jobs", job["metadata"]["name"], namespace=NS), "Failed")["reason"]
        == "BackoffLimitExceeded"
    )


def test_image_pull_failure_waits_forever_until_deleted(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:image-pull")
    job = render(buckets, "convert")
    create(kube, job)
    assert sim.wait_idle(ceiling(10))
    time.sleep(0.2)
    (pod,) = pods_of(kube, f"job-name={job['metadata']['name']}")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    assert {"Failed", "BackOff"} <= set(events_for(kube, pod["metadata"]["name"]))
    messages = [e["message"] for e in kube.list("events", namespace=NS)]
    assert "Error: ErrImagePull" in messages and "Error: ImagePullBackOff" in messages
    now = kube.get("jobs", job["metadata"]["name"], namespace=NS)
    assert not condition(now, "Complete") and not condition(now, "Failed")
    client.BatchV1Api(kube.api_client()).delete_namespaced_job(job["metadata"]["name"], NS)
    finish(sim, job)


def test_api_5xx_fails_the_next_requests(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    simulate("convert:api-5xx:2")
    job = render(buckets, "convert")
    create(kube, job)
    batch = client.BatchV1Api(kube.api_client())
    codes = []
    for _ in range(3):
        try:
            batch.read_namespaced_job(job["metadata"]["name"], NS)
            codes.append(200)
        except ApiException as exc:
            codes.append(exc.status)
    assert codes == [503, 503, 200]


def test_stall_keeps_running(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:stall")
    job = render(buckets, "convert")
    create(kube, job)
    assert sim.wait_idle(ceiling(10))
    time.sleep(0.2)
    (pod,) = pods_of(kube, f"job-name={job['metadata']['name']}")
    assert pod["status"]["phase"] == "Running"
    now = kube.get("jobs", job["metadata"]["name"], namespace=NS)
    assert now["status"]["active"] == 1 and not condition(now, "Complete") and not condition(now, "Failed")
    assert sim.files_written(job["metadata"]["name"]) == []


def test_a_fault_for_attempt_1_leaves_attempt_2_alone(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:1:exit:3")
    first, second = render(buckets, "convert", 1), render(buckets, "convert", 2)
    create(kube, first)
    create(kube, second)
    finish(sim, first)
    finish(sim, second)
    assert condition(kube.get("jobs", first["metadata"]["name"], namespace=NS), "Failed")
    assert condition(kube.get("jobs", second["metadata"]["name"], namespace=NS), "Complete")


# ---------------------------------------------------------------- lifecycle


def test_deleting_a_workload_stops_its_simulation(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate(timing=Timing(scale=0.001, ttl=False, poll=0.01, checkpoint_save=0.0))
    train = render(buckets, "train", training={"num_batches": 400})
    args = program_args(train)
    seed(buckets, args["load_parameters_path"])
    create(kube, train)
    name = train["metadata"]["name"]
    deadline = time.monotonic() + ceiling(15)
    while not sim.files_written(name) or len(sim.history_of(name, "step")) < 3:
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.01)
    client.CustomObjectsApi(kube.api_client()).delete_namespaced_custom_object(
        GROUP, VERSION, NS, "jobsets", name
    )
    finish(sim, train)
    written, steps = len(sim.files_written(name)), len(sim.history_of(name, "step"))
    objects = blobs(buckets, args["base_output_directory"])
    time.sleep(0.3)  # ten more steps' worth of time
    assert (len(sim.files_written(name)), len(sim.history_of(name, "step"))) == (written, steps)
    assert blobs(buckets, args["base_output_directory"]) == objects
    assert not pods_of(kube, f"jobset.sigs.k8s.io/jobset-name={name}")  # cascaded with the child Jobs
    assert not kube.list("jobs", namespace=NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")


def test_finished_workloads_are_deleted_after_their_ttl(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate(timing=Timing(scale=0.0001, poll=0.01))  # ttlSecondsAfterFinished 3600 → 0.36 s
    job = render(buckets, "convert")
    create(kube, job)
    finish(sim, job)
    assert condition(kube.get("jobs", job["metadata"]["name"], namespace=NS), "Complete")  # readable at first
    assert sim.wait_idle(ceiling(5))
    deadline = time.monotonic() + ceiling(5)
    while kube.find("jobs", job["metadata"]["name"], namespace=NS) is not None:
        assert time.monotonic() < deadline, "the finished Job was never deleted"
        time.sleep(0.01)
    assert [e.detail for e in sim.history_of(job["metadata"]["name"], "phase")][-1].startswith(
        "deleted after ttl"
    )


# ---------------------------------------------------------------- scenarios and programs


def test_scenario_strings_and_documents() -> None:
    faults = Scenario.from_strings(
        [
            "train:1:preempt@30",
            "convert:oom",
            "export:2:exit:3",
            "train:unschedulable:120",
            "train:api-5xx:2",
            "drop-events:train",
            "train:preempt@100:head:scheduler",
        ]
    ).faults
    assert (faults[0].stage, faults[0].attempt, faults[0].kind, faults[0].step) == ("train", 1, "preempt", 30)
    assert (faults[1].stage, faults[1].attempt, faults[1].kind) == ("convert", None, "oom")
    assert (faults[2].attempt, faults[2].code) == (2, 3)
    assert faults[3].seconds == 120 and faults[4].count == 2 and faults[5].kind == "drop-events"
    assert (faults[6].target, faults[6].disruption_reason) == ("head", "PreemptionByScheduler")
    doc = Scenario.loads("faults:\n  - {stage: train, attempt: 1, fault: preempt@30}\n  - convert:oom\n")
    assert doc.faults == (parse_fault("train:1:preempt@30"), parse_fault("convert:oom"))
    scenario = Scenario(faults)
    assert Scenario.from_document(scenario.to_document()) == scenario
    assert scenario.first("preempt", "train", 2) is faults[6]  # attempt 1 only for the first
    assert scenario.drops_events_for("runs/r/trained/rl/checkpoints/actor/50/commit_success.txt")
    assert not scenario.drops_events_for("cache/maxtext/k/r-a1/0/commit_success.txt")
    assert not scenario.drops_events_for("runs/r/hf/model.safetensors.index.json")


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("train:1:preemt@30", "did you mean 'preempt'"),
        ("oom", "no stage"),
        ("training:oom", "unknown stage 'training'"),
        ("train:0:oom", "attempts count from 1"),
        ("convert:exit:0", "success, not a fault"),
        ("convert:exit:300", "out of range"),
        ("train:unschedulable:soon", "unschedulable:<seconds>"),
        ("convert:preempt@30:head", "only applies to the training JobSet"),
        ("train:oom:now", "takes no argument"),
        ("train:evict@30:drained", "unknown evict reason 'drained'"),
        ("train:evict@soon", "evict needs a step number"),
        ("train:preempt@30:head:head-first", "train only"),
        ("train:preempt@30:nodeshutdown", "kubelet, scheduler, taint, eviction-api, podgc"),
        ("convert:hold@3", "write 'train:hold@<step>'"),
        ("train:hold", "write 'train:hold@<step>'"),
        ("train:hold@0", "step >= 1"),
        ("train:oom@3", "only preempt, evict and hold take '@<step>'"),
    ],
)
def test_bad_fault_strings_name_the_entry_and_the_fix(spec: str, needle: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_fault(spec)
    assert needle in str(info.value) and repr(spec) in str(info.value)


def test_a_hold_parses_with_its_step_and_round_trips() -> None:
    fault = parse_fault("train:1:hold@20")
    assert (fault.kind, fault.stage, fault.attempt, fault.step) == ("hold", "train", 1, 20)
    assert parse_fault(fault.spec()) == fault


def test_kueue_evictions_and_disruption_reasons_parse_and_round_trip() -> None:
    """``evict@<step>[:<why>]`` (Kueue eviction reasons) and ``preempt`` by any disruption reason,
    with the ``head-first`` race; every fault survives the document form."""
    specs = [
        "train:1:evict@70",
        "train:evict@70:pods-ready-timeout",
        "convert:evict@0:deactivated",
        "train:preempt@30:worker:taint:head-first",
        "convert:preempt:podgc",
        "export:preempt:eviction-api",
    ]
    faults = Scenario.from_strings(specs).faults
    assert (faults[0].kind, faults[0].step, faults[0].why) == ("evict", 70, None)
    assert faults[1].why == "pods-ready-timeout" and faults[2].why == "deactivated"
    assert (faults[3].disruption_reason, faults[3].head_first) == ("DeletionByTaintManager", True)
    assert faults[4].disruption_reason == "DeletionByPodGC"
    assert faults[5].disruption_reason == "EvictionByEvictionAPI"
    assert [f.spec() for f in faults] == [
        "train:1:evict@70",
        "train:evict@70:pods-ready-timeout",
        "convert:evict@0:deactivated",
        "train:preempt@30:worker:taint:head-first",
        "convert:preempt@0:podgc",
        "export:preempt@0:eviction-api",
    ]
    scenario = Scenario(faults)
    assert Scenario.from_document(scenario.to_document()) == scenario


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"fault": [{"stage": "train", "fault": "oom"}]}, "unknown top-level key"),
        (
            {"faults": [{"stage": "train", "fault": "oom", "attmpt": 1}]},
            "faults[0]: unknown key(s) ['attmpt']",
        ),
        (
            {"faults": [{"stage": "train", "attempt": "1", "fault": "oom"}]},
            "'attempt' must be a whole number",
        ),
        ({"faults": [{"fault": "oom"}]}, "'stage' is required"),
        ({"faults": ["train:oom", {"stage": "train"}]}, "faults[1]: 'fault' is required"),
    ],
)
def test_bad_scenario_documents_name_the_entry(doc: Any, needle: str) -> None:
    with pytest.raises(ScenarioError, match=None) as info:
        Scenario.from_document(doc, source="s.json")
    assert needle in str(info.value) and str(info.value).startswith("s.json")


def test_drop_events_follows_the_attempt_that_wrote_the_object(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:2:drop-events")
    first, second = render(buckets, "convert", 1), render(buckets, "convert", 2)
    for job in (first, second):
        create(kube, job)
        finish(sim, job)
    kept, dropped = (
        sim.files_written(first["metadata"]["name"]),
        sim.files_written(second["metadata"]["name"]),
    )
    assert kept and dropped
    assert not any(sim.drops_event(uri) for uri in kept)
    assert all(sim.drops_event(uri) for uri in dropped)
    name = dropped[-1].split("/", 3)[3]
    assert sim.drops_event(name, bucket=buckets.artifacts)  # bucket-relative names work too


def test_drop_events_follows_the_export_attempt_whose_script_step_uploaded_the_object(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    """The manifest step's uploads are the workload's: its manifest, no MaxText file name, too."""
    sim = simulate("export:2:drop-events")
    first, second = (
        render(buckets, "export", 1, run_id="rdropa"),
        render(buckets, "export", 2, run_id="rdropb"),
    )
    for job in (first, second):
        seed(buckets, program_args(job)["load_parameters_path"])
        create(kube, job)
        finish(sim, job)
    kept, dropped = (
        sim.files_written(first["metadata"]["name"]),
        sim.files_written(second["metadata"]["name"]),
    )
    assert kept[-1].endswith("/rlpipe-export.json") and dropped[-1].endswith("/rlpipe-export.json")
    assert not any(sim.drops_event(uri) for uri in kept)
    assert all(sim.drops_event(uri) for uri in dropped)


def test_run_scoped_faults_in_documents() -> None:
    doc = {
        "faults": [
            {"stage": "train", "attempt": 1, "fault": "preempt@30", "run": "ra"},
            {"fault": "drop-events:convert", "run": "rb"},
            "export:exit:3",
        ]
    }
    scenario = Scenario.from_document(doc)
    preempt, drop, exit_ = scenario.faults
    assert (preempt.run, drop.run, exit_.run) == ("ra", "rb", None)
    assert Scenario.from_document(scenario.to_document()) == scenario
    assert (
        scenario.to_document()["faults"][0]["run"] == "ra"
        and "run" not in scenario.to_document()["faults"][2]
    )
    assert scenario.for_workload("train", 1, "ra") == [preempt]
    assert scenario.for_workload("train", 1, "rb") == [] and scenario.for_workload("train", 1) == []
    assert scenario.first("exit", "export", 1, "anyone") is exit_  # no run: every run
    assert scenario.drops_events_for("convert", 1, "rb")
    assert not scenario.drops_events_for("convert", 1, "ra") and not scenario.drops_events_for("convert", 1)
    with pytest.raises(ScenarioError, match=r"faults\[0\]: 'run' must be a run id"):
        Scenario.from_document({"faults": [{"stage": "train", "fault": "oom", "run": "no spaces"}]})


def test_a_run_scoped_fault_strikes_only_that_runs_workloads(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate()
    sim.set_scenario(
        Scenario.from_document(
            {
                "faults": [
                    {"stage": "convert", "attempt": 1, "fault": "exit:3", "run": "runa"},
                    {"fault": "drop-events:convert", "run": "runb"},
                ]
            }
        )
    )
    a1, b1 = render(buckets, "convert", run_id="runa"), render(buckets, "convert", run_id="runb")
    a2 = render(buckets, "convert", 2, run_id="runa")
    for job in (a1, b1, a2):
        create(kube, job)
        finish(sim, job)
    failing, dropping, clean = (job["metadata"]["name"] for job in (a1, b1, a2))
    assert condition(kube.get("jobs", failing, namespace=NS), "Failed")
    assert condition(kube.get("jobs", dropping, namespace=NS), "Complete")
    assert condition(kube.get("jobs", clean, namespace=NS), "Complete")
    assert [e.detail for e in sim.history_of(failing, "fault")] == ["convert:1:exit:3"]
    assert sim.history_of(dropping, "fault") == [] and sim.history_of(clean, "fault") == []
    dropped, kept = sim.files_written(dropping), sim.files_written(clean)
    assert dropped and all(sim.drops_event(uri) for uri in dropped)
    assert kept and not any(sim.drops_event(uri) for uri in kept)


def test_programs_are_read_from_the_container_as_rendered() -> None:
    assert parse_argv(["python3", "-m", "maxtext.checkpoint_conversion.to_maxtext", "a=1"]) == (
        "maxtext.checkpoint_conversion.to_maxtext",
        ["a=1"],
        False,
    )
    gated = (
        'set -eu\nif [ "${JOB_COMPLETION_INDEX:-0}" != "0" ]; then\n  echo skip\n  exit 0\nfi\n'
        'exec python3 -m maxtext.checkpoint_conversion.to_huggingface "$@"\n'
    )
    assert parse_argv(["/bin/bash", "-c", gated, "rlpipe-stage", "x=1"]) == (
        "maxtext.checkpoint_conversion.to_huggingface",
        ["x=1"],
        True,
    )
    plain = 'set -eu\necho hi\nexec python3 -m maxtext.trainers.post_train.rl.train_rl "$@"\n'
    assert parse_argv(["/bin/bash", "-c", plain, "n", "run_name=rl"])[1:] == (["run_name=rl"], False)
    assert parse_argv(["/bin/bash", "-c", "echo hi", "n"]) is None
    assert parse_argv(["busybox", "true"]) is None


def test_time_is_simulated_through_the_injected_clock_and_sleep(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    slept: list[float] = []
    timing = Timing(scale=2.0, ttl=False)  # two real seconds per simulated second, if sleep were real
    sim = simulate(timing=timing, clock=lambda: 1_800_000_000.0, sleep=slept.append)
    job = render(buckets, "convert")
    create(kube, job)
    finish(sim, job)  # real sleeps would take half an hour: the ceiling would fail it
    expected = timing.admission_delay + timing.schedule_delay + timing.image_pull + timing.container_start
    assert sum(slept) == pytest.approx(2.0 * (expected + timing.convert))
    done = kube.get("jobs", job["metadata"]["name"], namespace=NS)
    assert done["status"]["startTime"] == done["status"]["completionTime"] == "2027-01-15T08:00:00Z"


def test_threads_end_when_the_simulator_stops(
    kube: KubeApiServer, buckets: Buckets, simulate: Callable[..., ClusterSimulator]
) -> None:
    sim = simulate("convert:stall")
    create(kube, render(buckets, "convert"))
    assert sim.wait_idle(ceiling(10))
    sim.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("simulated-")]
