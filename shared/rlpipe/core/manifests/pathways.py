"""GRPO training as a Pathways JobSet (docs/design.md#what-we-hand-kubernetes-kueue-and-jobset; Cluster Toolkit's Pathways template as reference).

The head (``pathways-head``) runs on the CPU pool: the Pathways proxy and resource manager as
native sidecars, and train_rl as the main container. The workers are one Job per slice on the TPU
node pools. Only the head decides success, because Pathways workers are servers that never exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlpipe.core import commands, identity, pinning, staging, tpu
from rlpipe.core.manifests.common import (
    PREEMPTION_FAILS_JOB,
    TERMINATION_MESSAGE,
    TPU_CHIPS_PER_POD,
    hf_token_env,
    labels,
    metadata,
    plain_env,
    tpu_node_selector,
    tpu_tolerations,
)

if TYPE_CHECKING:
    from rlpipe.core.manifests import RenderContext
    from rlpipe.core.request import Request

HEAD = "pathways-head"
WORKER = "worker"
MAIN_CONTAINER = "workload-container"
PROXY_PORT = 29000
RM_PORT = 29001
RM_AUX_PORT = 29002
WORKER_PORTS = (29005, 29006, 8471, 8080)
PIPE_TIMEOUT_FLAGS = "--pathways_pipe_unreachable_timeout=60s"
GRACE_SECONDS = 30  # terminationGracePeriodSeconds of every pod (the Kubernetes default)
# How long the head holds a failed exit (commands._held_exit): a disrupted worker's Job is Failed
# at most the victim's grace period plus the other workers' after the disruption (k8s
# job_controller.go: FailureTarget once the victim is Failed, Failed once no pod terminates), even
# if the program gave up at the very moment; 30 s more cover the controllers' syncs.
HEAD_EXIT_HOLD_SECONDS = 2 * GRACE_SECONDS + 30

_COORDINATOR = "metadata.labels['jobset.sigs.k8s.io/coordinator']"
_JOBSET_NAME = "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"
_RJOB_NAME = "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"
_RJOB_REPLICAS = "metadata.labels['jobset.sigs.k8s.io/replicatedjob-replicas']"
_JOB_INDEX = "metadata.labels['jobset.sigs.k8s.io/job-index']"


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _ports(*numbers: int) -> list[dict[str, int]]:
    return [{"containerPort": n} for n in numbers]


# Both tools mount the TPU host's /tmp into the Pathways worker (xpk pathways_workload_create.yaml.j2,
# gcluster pathways_jobset.tmpl); the slice's node pool is the JobSet's alone (exclusive-topology),
# so nothing is shared with another tenant. docs/differences.md.
SHARED_TMP = "shared-tmp"


def _pinned_env(req: Request, pinned_uri: str) -> list[dict[str, Any]]:
    if not commands.fetches_pinned_source(req):
        return []
    return [
        {"name": pinning.ENV_PINNED_URI, "value": pinned_uri},
        {"name": pinning.ENV_PINNED_DIR, "value": pinning.HEAD_PINNED_DIR},
    ]


def train_jobset(
    req: Request, ctx: RenderContext, attempt: int, args: list[str], *, pinned_uri: str
) -> dict[str, Any]:
    shape = tpu.SHAPES[req.tpu.type]
    scratch = ctx.pathways_scratch_uri
    pod_labels = labels(req, ctx.run_id, "train", attempt, ctx.team)
    p = req.pathways

    proxy = {
        "name": "pathways-proxy",
        "image": p.proxy_image,
        **TERMINATION_MESSAGE,
        "restartPolicy": "Always",
        "args": [
            f"--server_port={PROXY_PORT}",
            f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
            f"--gcs_scratch_location={scratch}",
        ],
        "env": [
            *plain_env(p.env.proxy),
            # then the pipeline's own: of two entries with one name the later wins (k8s#58477),
            # so no request variable can override one, whatever an allowlist lets through
            _field_env("PATHWAYS_HEAD", _COORDINATOR),
            {"name": "ABSL_FLAGS", "value": PIPE_TIMEOUT_FLAGS},
        ],
        "ports": _ports(PROXY_PORT),
        "resources": {"limits": {"cpu": "16", "memory": "100Gi"}},
    }
    resource_manager = {
        "name": "pathways-rm",
        "image": p.server_image,
        **TERMINATION_MESSAGE,
        "restartPolicy": "Always",
        "args": [
            f"--server_port={RM_PORT}",
            f"--gcs_scratch_location={scratch}",
            "--node_type=resource_manager",
            f"--instance_count={req.tpu.slices}",
            f"--instance_type={shape.pathways_instance_type}",
        ],
        "env": [
            *plain_env(p.env.resource_manager),
            # then the pipeline's own: of two entries with one name the later wins (k8s#58477),
            # so no request variable can override one, whatever an allowlist lets through
            _field_env("REPLICATED_JOB_NAME", _RJOB_NAME),
            _field_env("JOBSET_NAME", _JOBSET_NAME),
            _field_env("HOST_ADDRESS", _COORDINATOR),
            {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
            {"name": "ABSL_FLAGS", "value": PIPE_TIMEOUT_FLAGS},
        ],
        "ports": _ports(RM_PORT, RM_AUX_PORT),
        "resources": {"limits": {"cpu": "8", "memory": "32Gi"}},
    }
    main = {
        "name": MAIN_CONTAINER,
        "image": req.image,
        **TERMINATION_MESSAGE,
        "command": [
            "/bin/bash",
            "-c",
            commands.train_script(req, hold_seconds=HEAD_EXIT_HOLD_SECONDS),
            commands.SCRIPT_NAME,
        ],
        "args": list(args),
        "env": [
            *plain_env(req.training.command_env),
            *plain_env(p.env.workload),
            # then the pipeline's own: of two entries with one name the later wins (k8s#58477),
            # so no request variable can override one, whatever an allowlist lets through
            _field_env("PATHWAYS_HEAD", _COORDINATOR),
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
            {"name": "JAX_BACKEND_TARGET", "value": f"grpc://$(PATHWAYS_HEAD):{PROXY_PORT}"},
            {"name": "ABSL_FLAGS", "value": PIPE_TIMEOUT_FLAGS},
            *_pinned_env(req, pinned_uri),
            *staging.env(ctx.run, ctx.data, ctx.inputs),
            hf_token_env(req),
        ],
        "resources": {"limits": {"cpu": "24", "memory": "100Gi"}, "requests": {"cpu": "2", "memory": "8Gi"}},
    }
    head_job = {
        "name": HEAD,
        "replicas": 1,
        "template": {
            "metadata": {
                "labels": dict(pod_labels),
                "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"},
            },
            "spec": {
                "completionMode": "Indexed",
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "podFailurePolicy": PREEMPTION_FAILS_JOB,
                "template": {
                    "metadata": {"labels": dict(pod_labels)},
                    "spec": {
                        "serviceAccountName": ctx.service_account,
                        "nodeSelector": {"cloud.google.com/gke-nodepool": p.head_node_pool},
                        "hostNetwork": True,
                        "dnsPolicy": "ClusterFirstWithHostNet",
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": GRACE_SECONDS,
                        "initContainers": [proxy, resource_manager],
                        "containers": [main],
                    },
                },
            },
        },
    }
    worker = {
        "name": "pathways-worker",
        "image": p.worker_image or p.server_image,
        **TERMINATION_MESSAGE,
        "args": [
            "--server_port=29005",
            f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
            f"--gcs_scratch_location={scratch}",
        ],
        "env": [
            *plain_env(p.env.worker),
            # then the pipeline's own (the later of two entries with one name wins)
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
            {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": "false"},
            _field_env("MEGASCALE_NUM_SLICES", _RJOB_REPLICAS),
            _field_env("JOBSET_NAME", _JOBSET_NAME),
            _field_env("REPLICATED_JOB_NAME", _RJOB_NAME),
            _field_env("MEGASCALE_SLICE_ID", _JOB_INDEX),
            _field_env("PATHWAYS_HEAD", _COORDINATOR),
            _field_env("MEGASCALE_COORDINATOR_ADDRESS", _COORDINATOR),
            {"name": "ABSL_FLAGS", "value": PIPE_TIMEOUT_FLAGS},
        ],
        "ports": _ports(*WORKER_PORTS),
        "resources": {"limits": dict(TPU_CHIPS_PER_POD)},
        "volumeMounts": [{"name": SHARED_TMP, "mountPath": "/tmp"}],
    }
    worker_job = {
        "name": WORKER,
        "replicas": req.tpu.slices,
        "template": {
            "metadata": {
                "labels": dict(pod_labels),
                "annotations": {
                    "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
                },
            },
            "spec": {
                "completionMode": "Indexed",
                "parallelism": shape.hosts,
                "completions": shape.hosts,
                "backoffLimit": 4 * shape.hosts,
                "podFailurePolicy": PREEMPTION_FAILS_JOB,
                "template": {
                    "metadata": {"labels": dict(pod_labels)},
                    "spec": {
                        "serviceAccountName": ctx.service_account,
                        "nodeSelector": tpu_node_selector(req),
                        "tolerations": tpu_tolerations(req),
                        "hostNetwork": True,
                        "dnsPolicy": "ClusterFirstWithHostNet",
                        # Never (not gcluster's OnFailure): required by the podFailurePolicy; a
                        # crashed worker is still replaced, up to backoffLimit, as a new pod.
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": GRACE_SECONDS,
                        "containers": [worker],
                        "volumes": [
                            {"name": SHARED_TMP, "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}
                        ],
                    },
                },
            },
        },
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata(req, ctx.run_id, "train", attempt, ctx.namespace, ctx.team),
        "spec": {
            "ttlSecondsAfterFinished": p.ttl_seconds_after_finished,
            "network": {
                "enableDNSHostnames": True,
                "publishNotReadyAddresses": True,
                "subdomain": identity.network_subdomain(ctx.run_id, attempt),
            },
            "coordinator": {"replicatedJob": HEAD},
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD]},
            # The pipeline owns retries (classified, budgeted); a JobSet-level restart would hide them.
            "failurePolicy": {"maxRestarts": 0, "restartStrategy": "Recreate"},
            "replicatedJobs": [head_job, worker_job],
        },
    }
