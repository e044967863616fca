"""Tests for rlpipe.local.kube_api.validation: a real Pathways JobSet passes, and each likely mistake fails at its path.

The JobSet is written out by hand from docs/design.md#what-we-hand-kubernetes-kueue-and-jobset and manifests.md §2.2, not
produced by the renderer, so a renderer bug cannot hide a validator bug here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import jsonschema
import pytest

from rlpipe.local.kube_api.validation import validate_job, validate_jobset, validate_object

NAME = "r7f3a-grpo-a1"
HEAD_ENV = {
    "name": "PATHWAYS_HEAD",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}},
}
LABELS = {"rlpipe.dev/run-id": "r7f3a", "rlpipe.dev/stage": "grpo", "rlpipe.dev/attempt": "1"}


def pathways_jobset() -> dict[str, Any]:
    """A 1-slice v6e-32 (4x8) Pathways GRPO JobSet the way rlpipe is meant to submit it."""
    head_pod = {
        "nodeSelector": {"cloud.google.com/gke-nodepool": "cpu-np"},
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "restartPolicy": "Never",
        "initContainers": [
            {
                "name": "pathways-proxy",
                "image": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.6.2",
                "ports": [{"containerPort": 29000}],
                "args": [
                    "--server_port=29000",
                    "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                    "--gcs_scratch_location=gs://bucket/pathways/",
                ],
                "env": [HEAD_ENV],
                "restartPolicy": "Always",
                "resources": {"limits": {"cpu": "16", "memory": "100Gi"}},
            },
            {
                "name": "pathways-rm",
                "image": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.6.2",
                "ports": [{"containerPort": 29001}, {"containerPort": 29002}],
                "args": [
                    "--server_port=29001",
                    "--gcs_scratch_location=gs://bucket/pathways/",
                    "--node_type=resource_manager",
                    "--instance_count=1",
                    "--instance_type=tpuv6e:4x8",
                ],
                "env": [
                    {"name": "HOST_ADDRESS", "valueFrom": HEAD_ENV["valueFrom"]},
                    {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
                ],
                "restartPolicy": "Always",
                "resources": {"limits": {"cpu": "8", "memory": "32Gi"}},
            },
        ],
        "containers": [
            {
                "name": "workload-container",
                "image": "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4",
                "command": ["python3", "-m", "maxtext.trainers.post_train.rl.train_rl"],
                "args": ["run_name=rl", "base_output_directory=gs://bucket/m/trained/"],
                "env": [
                    HEAD_ENV,
                    {"name": "JAX_PLATFORMS", "value": "proxy,cpu"},
                    {"name": "JAX_BACKEND_TARGET", "value": "grpc://$(PATHWAYS_HEAD):29000"},
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
                ],
                "securityContext": {"privileged": True},
                "resources": {
                    "limits": {"cpu": "24", "memory": "100Gi"},
                    "requests": {"cpu": "2", "memory": "8Gi"},
                },
            }
        ],
    }
    worker_pod = {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": "4x8",
        },
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "pathways-worker",
                "image": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.6.2",
                "ports": [{"containerPort": p} for p in (29005, 29006, 8471, 8080)],
                "args": [
                    "--server_port=29005",
                    "--resource_manager_address=$(PATHWAYS_HEAD):29001",
                    "--gcs_scratch_location=gs://bucket/pathways/",
                ],
                "env": [
                    HEAD_ENV,
                    {
                        "name": "MEGASCALE_NUM_SLICES",
                        "valueFrom": {
                            "fieldRef": {
                                "fieldPath": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']"
                            }
                        },
                    },
                    {
                        "name": "MEGASCALE_SLICE_ID",
                        "valueFrom": {
                            "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}
                        },
                    },
                ],
                "resources": {"limits": {"google.com/tpu": "4"}},
            }
        ],
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": NAME,
            "namespace": "default",
            "labels": {**LABELS, "kueue.x-k8s.io/queue-name": "tpu-queue"},
        },
        "spec": {
            "ttlSecondsAfterFinished": 86400,
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "coordinator": {"replicatedJob": "pathways-head"},
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["pathways-head"]},
            "failurePolicy": {
                "maxRestarts": 0,
                "restartStrategy": "Recreate",
                # No rule name, as gcluster renders it: the webhook names it failurePolicyRule0.
                "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
            },
            "replicatedJobs": [
                {
                    "name": "pathways-head",
                    "replicas": 1,
                    "template": {
                        "metadata": {
                            "labels": LABELS,
                            "annotations": {
                                "alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"
                            },
                        },
                        "spec": {
                            "completionMode": "Indexed",
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": {"metadata": {"labels": LABELS}, "spec": head_pod},
                        },
                    },
                },
                {
                    "name": "worker",
                    "replicas": 1,
                    "template": {
                        "metadata": {
                            "labels": LABELS,
                            "annotations": {
                                "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
                            },
                        },
                        "spec": {
                            "completionMode": "Indexed",
                            "parallelism": 8,
                            "completions": 8,
                            "backoffLimit": 32,
                            "template": {"metadata": {"labels": LABELS}, "spec": worker_pod},
                        },
                    },
                },
            ],
        },
    }


def conversion_job() -> dict[str, Any]:
    """A plain batch/v1 Job like the HF->MaxText conversion step, index 0 doing the work."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "r7f3a-convert-a1", "labels": LABELS},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 8,
            "completions": 8,
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "convert",
                            "image": "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4",
                            "command": [
                                "/bin/bash",
                                "-c",
                                '[ "$JOB_COMPLETION_INDEX" != "0" ] || python3 -m x',
                            ],
                            "resources": {"limits": {"google.com/tpu": "4"}},
                        }
                    ],
                }
            },
        },
    }


def _rj(js: dict[str, Any], i: int) -> dict[str, Any]:
    return js["spec"]["replicatedJobs"][i]


def _pod(js: dict[str, Any], i: int) -> dict[str, Any]:
    return _rj(js, i)["template"]["spec"]["template"]["spec"]


def _rename(d: dict[str, Any], old: str, new: str) -> None:
    d[new] = d.pop(old)


def test_pathways_jobset_is_valid() -> None:
    js = pathways_jobset()
    assert validate_jobset(js) == []
    assert validate_object(js) == []


def test_jobset_read_back_with_server_metadata_and_status_is_valid() -> None:
    """The fake API server stores server-set metadata and status; reading the object back must still validate."""
    js = pathways_jobset()
    js["metadata"] |= {
        "uid": "6f1c1c8e-0000-4000-8000-000000000001",
        "resourceVersion": "42",
        "generation": 1,
        "creationTimestamp": "2026-07-01T12:00:00Z",
        "finalizers": ["example.com/cleanup"],
        "managedFields": [
            {
                "manager": "rlpipe",
                "operation": "Update",
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "time": "2026-07-01T12:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {},
            }
        ],
    }
    js["status"] = {
        "restarts": 0,
        "terminalState": "Completed",
        "conditions": [
            {
                "type": "Completed",
                "status": "True",
                "reason": "AllJobsCompleted",
                "message": "jobset completed successfully",
                "lastTransitionTime": "2026-07-01T13:00:00Z",
            }
        ],
        "replicatedJobsStatus": [
            {"name": "worker", "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
        ],
    }
    assert validate_jobset(js) == []


Mutation = Callable[[dict[str, Any]], None]

# (id, mutation, the path every reported problem must start with, a word the problem must contain)
JOBSET_MUTATIONS: list[tuple[str, Mutation, str, str]] = [
    (
        "typo at spec level",
        lambda js: _rename(js["spec"], "successPolicy", "sucessPolicy"),
        "$.spec.sucessPolicy: unknown field",
        "successPolicy",
    ),
    (
        "typo in a replicatedJob",
        lambda js: _rename(_rj(js, 1), "replicas", "replica"),
        "$.spec.replicatedJobs[1].replica: unknown field",
        "replicas",
    ),
    (
        "typo in a failurePolicy rule",
        lambda js: _rename(
            js["spec"]["failurePolicy"]["rules"][0], "onJobFailureReasons", "onJobFailureReason"
        ),
        "$.spec.failurePolicy.rules[0].onJobFailureReason: unknown field",
        "onJobFailureReasons",
    ),
    (
        "typo in the Job template metadata",
        lambda js: _rename(_rj(js, 0)["template"]["metadata"], "annotations", "annotation"),
        "$.spec.replicatedJobs[0].template.metadata.annotation: unknown field",
        "annotations",
    ),
    (
        "typo in a worker container",
        lambda js: _rename(_pod(js, 1)["containers"][0], "args", "arg"),
        "$.spec.replicatedJobs[1].template.spec.template.spec.containers[0].arg: unknown field",
        "args",
    ),
    (
        "typo in a native sidecar",
        lambda js: _rename(_pod(js, 0)["initContainers"][1], "restartPolicy", "restartpolicy"),
        "$.spec.replicatedJobs[0].template.spec.template.spec.initContainers[1].restartpolicy: unknown field",
        "restartPolicy",
    ),
    (
        "typo in the Job spec",
        lambda js: _rename(_rj(js, 1)["template"]["spec"], "backoffLimit", "backOffLimit"),
        "$.spec.replicatedJobs[1].template.spec.backOffLimit: unknown field",
        "backoffLimit",
    ),
    (
        "typo in metadata",
        lambda js: _rename(js["metadata"], "labels", "label"),
        "$.metadata.label: unknown field",
        "labels",
    ),
    (
        "field from a newer JobSet",
        lambda js: js["spec"].__setitem__("volumeClaimPolicies", []),
        "$.spec.volumeClaimPolicies: unknown field",
        "unknown",
    ),
    (
        "wrong startupPolicyOrder",
        lambda js: js["spec"]["startupPolicy"].__setitem__("startupPolicyOrder", "Sequential"),
        "$.spec.startupPolicy.startupPolicyOrder:",
        "Sequential",
    ),
    (
        "wrong successPolicy operator",
        lambda js: js["spec"]["successPolicy"].__setitem__("operator", "all"),
        "$.spec.successPolicy.operator:",
        "'all'",
    ),
    (
        "wrong failure reason",
        lambda js: js["spec"]["failurePolicy"]["rules"][0].__setitem__("onJobFailureReasons", ["OOMKilled"]),
        "$.spec.failurePolicy.rules[0].onJobFailureReasons[0]:",
        "OOMKilled",
    ),
    (
        "wrong type: TTL as a duration",
        lambda js: js["spec"].__setitem__("ttlSecondsAfterFinished", "24h"),
        "$.spec.ttlSecondsAfterFinished:",
        "integer",
    ),
    (
        "wrong type: boolean as a string",
        lambda js: js["spec"]["network"].__setitem__("enableDNSHostnames", "true"),
        "$.spec.network.enableDNSHostnames:",
        "boolean",
    ),
    (
        "wrong type in the pod template",
        lambda js: _rj(js, 1)["template"]["spec"].__setitem__("parallelism", "8"),
        "$.spec.replicatedJobs[1].template.spec.parallelism:",
        "integer",
    ),
    (
        "missing replicatedJob name",
        lambda js: _rj(js, 0).pop("name"),
        "$.spec.replicatedJobs[0].name: required field is missing",
        "required",
    ),
    (
        "missing replicatedJob template",
        lambda js: _rj(js, 1).pop("template"),
        "$.spec.replicatedJobs[1].template: required field is missing",
        "required",
    ),
    (
        "missing pod template",
        lambda js: _rj(js, 1)["template"]["spec"].pop("template"),
        "$.spec.replicatedJobs[1].template.spec.template: required field is missing",
        "required",
    ),
    (
        "negative replicas",
        lambda js: _rj(js, 1).__setitem__("replicas", -1),
        "$.spec.replicatedJobs[1].replicas:",
        "minimum",
    ),
    (
        "negative TTL",
        lambda js: js["spec"].__setitem__("ttlSecondsAfterFinished", -1),
        "$.spec.ttlSecondsAfterFinished:",
        "minimum",
    ),
    (
        "wrong apiVersion",
        lambda js: js.__setitem__("apiVersion", "jobset.x-k8s.io/v1alpha1"),
        "$.apiVersion:",
        "v1alpha2",
    ),
    (
        "invalid label value",
        lambda js: js["metadata"]["labels"].__setitem__("rlpipe.dev/model", "google/gemma-3-1b"),
        '$.metadata.labels["rlpipe.dev/model"]:',
        "gemma",
    ),
    # Cross-field rules of the JobSet webhook, which no schema can express.
    (
        "coordinator names no replicatedJob",
        lambda js: js["spec"]["coordinator"].__setitem__("replicatedJob", "head"),
        "$.spec.coordinator.replicatedJob:",
        "'head'",
    ),
    (
        "coordinator pod index out of range",
        lambda js: js["spec"]["coordinator"].__setitem__("podIndex", 1),
        "$.spec.coordinator.podIndex:",
        "1 completions",
    ),
    (
        "successPolicy target names no replicatedJob",
        lambda js: js["spec"]["successPolicy"].__setitem__("targetReplicatedJobs", ["pathways_head"]),
        "$.spec.successPolicy.targetReplicatedJobs[0]:",
        "pathways_head",
    ),
    (
        "duplicate replicatedJob name",
        lambda js: _rj(js, 1).__setitem__("name", "pathways-head"),
        "$.spec.replicatedJobs[1].name:",
        "duplicate",
    ),
    (
        "duplicate failure rule name",
        lambda js: js["spec"]["failurePolicy"]["rules"].append(
            {"name": "failurePolicyRule0", "action": "RestartJobSet"}
        ),
        "$.spec.failurePolicy.rules[1].name:",
        "failurePolicyRule0",
    ),
    (
        "JobSet name too long for its pod names",
        lambda js: js["metadata"].__setitem__("name", "r" * 40),
        "$.spec.replicatedJobs[",
        "63",
    ),
    (
        "dependsOn together with InOrder",
        lambda js: _rj(js, 1).__setitem__("dependsOn", [{"name": "pathways-head", "status": "Ready"}]),
        "$.spec.startupPolicy:",
        "mutually exclusive",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "word"), [m[1:] for m in JOBSET_MUTATIONS], ids=[m[0] for m in JOBSET_MUTATIONS]
)
def test_jobset_mistake_is_reported_at_its_path(mutate: Mutation, path: str, word: str) -> None:
    js = pathways_jobset()
    mutate(js)
    problems = validate_jobset(js)
    assert problems, "the mistake went unnoticed"
    # Every problem is about this one mistake: nothing else in the JobSet is flagged.
    assert all(p.startswith(path) for p in problems), problems
    assert any(word in p for p in problems), problems


def test_all_jobset_problems_are_reported_not_just_the_first() -> None:
    js = pathways_jobset()
    _rename(js["spec"], "coordinator", "cordinator")
    js["spec"]["startupPolicy"]["startupPolicyOrder"] = "Sequential"
    _rename(_pod(js, 1)["containers"][0], "image", "imgae")
    problems = validate_jobset(js)
    assert len(problems) == 3, problems
    assert problems[0].startswith("$.spec.cordinator: unknown field (did you mean 'coordinator'?)")
    assert problems[1].startswith("$.spec.startupPolicy.startupPolicyOrder:")
    assert problems[2].startswith("$.spec.replicatedJobs[1].template.spec.template.spec.containers[0].imgae:")


def test_failure_policy_rule_name_may_be_left_to_the_webhook_but_must_be_well_formed() -> None:
    js = pathways_jobset()
    assert "name" not in js["spec"]["failurePolicy"]["rules"][0]
    js["spec"]["failurePolicy"]["rules"][0]["name"] = "1-bad name"
    problems = validate_jobset(js)
    assert len(problems) == 1 and problems[0].startswith("$.spec.failurePolicy.rules[0].name:"), problems


def test_generate_name_is_accepted_instead_of_name() -> None:
    js = pathways_jobset()
    js["metadata"]["generateName"] = js["metadata"].pop("name") + "-"
    assert validate_jobset(js) == []
    del js["metadata"]["generateName"]
    problems = validate_jobset(js)
    assert problems and all(p.startswith("$.metadata:") for p in problems), problems


def test_valid_job_passes() -> None:
    assert validate_job(conversion_job()) == []
    assert validate_object(conversion_job()) == []


def test_job_with_typo_in_container_fails_at_its_path() -> None:
    job = conversion_job()
    _rename(job["spec"]["template"]["spec"]["containers"][0], "command", "comand")
    assert validate_job(job) == [
        "$.spec.template.spec.containers[0].comand: unknown field (did you mean 'command'?)"
    ]


def test_job_with_wrong_type_fails_at_its_path() -> None:
    job = conversion_job()
    job["spec"]["backoffLimit"] = "two"
    problems = validate_job(job)
    assert len(problems) == 1 and problems[0].startswith("$.spec.backoffLimit:"), problems


def test_validate_object_dispatches_on_api_version_and_kind() -> None:
    # A Job-shaped typo is caught whichever way the object arrives.
    job = conversion_job()
    job["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    assert validate_object(job) == validate_job(job) != []
    js = pathways_jobset()
    _rename(js["spec"], "network", "networks")
    assert validate_object(js) == validate_jobset(js) != []


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}},
        {"apiVersion": "jobset.x-k8s.io/v1alpha1", "kind": "JobSet", "metadata": {"name": "x"}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"}},
        {"kind": "Job"},
    ],
    ids=["deployment", "old-jobset-version", "cronjob", "no-api-version"],
)
def test_unsupported_kind_gives_one_problem(obj: dict[str, Any]) -> None:
    problems = validate_object(obj)
    assert len(problems) == 1 and "not supported" in problems[0], problems


def _schema() -> dict[str, Any]:
    text = (
        resources.files("rlpipe.local.kube_api")
        .joinpath("schemas", "jobset-v1alpha2.schema.json")
        .read_text()
    )
    return json.loads(text)


def _objects(node: Any, path: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _objects(value, f"{path}/{i}")


def test_schema_is_valid_and_strict_everywhere() -> None:
    schema = _schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "jobset" in schema["$comment"] and "v0.10.1" in schema["$comment"]
    loose = [
        path
        for path, node in _objects(schema)
        if "properties" in node and node.get("additionalProperties") is not False
    ]
    assert loose == []


def test_schema_has_exactly_the_v0_10_1_jobset_spec_and_status_fields() -> None:
    defs = _schema()["$defs"]
    assert set(defs["JobSetSpec"]["properties"]) == {
        "replicatedJobs",
        "network",
        "successPolicy",
        "failurePolicy",
        "startupPolicy",
        "suspend",
        "coordinator",
        "managedBy",
        "ttlSecondsAfterFinished",
    }
    assert set(defs["ReplicatedJob"]["properties"]) == {
        "name",
        "groupName",
        "template",
        "replicas",
        "dependsOn",
    }
    assert set(defs["JobSetStatus"]["properties"]) == {
        "conditions",
        "restarts",
        "restartsCountTowardsMax",
        "terminalState",
        "replicatedJobsStatus",
    }
    assert defs["ReplicatedJob"]["properties"]["replicas"]["default"] == 1
    assert defs["FailurePolicy"]["properties"]["restartStrategy"]["enum"] == ["Recreate", "BlockingRecreate"]
