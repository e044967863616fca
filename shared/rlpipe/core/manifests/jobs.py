"""Conversion and export as ``batch/v1`` Jobs, in either placement.

``cpu`` (the default) is one pod on the CPU pool holding no TPU: MaxText's converters force CPU
anyway, so the tutorials' slice-wide Job kept 7 or 15 hosts of TPU idle while host 0 worked.
``tpu-slice`` keeps the tutorials' shape: an Indexed Job across the slice's hosts where only
completion index 0 runs the program.

In both, the container runs a fixed script (``commands.convert_script`` / ``export_script``) that
first reads the HF repo at the pinned sha (``pinning``) and then runs the program with ``"$@"``
(export then uploads what the program wrote, with its manifest: ``export_manifest``), and the
stage's disk is an emptyDir sized by ``scratch.<stage>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from rlpipe.core import commands, pinning, tpu
from rlpipe.core.manifests.common import (
    PREEMPTION_FAILS_JOB,
    TERMINATION_MESSAGE,
    TPU_CHIPS_PER_POD,
    hf_token_env,
    labels,
    metadata,
    tpu_node_selector,
    tpu_tolerations,
)

if TYPE_CHECKING:
    from rlpipe.core.manifests import RenderContext
    from rlpipe.core.request import Request

CONTAINER_NAME = "workload-container"
JOB_TTL_SECONDS = 3600
# An ephemeral-storage request equal to the volume's sizeLimit lets the scheduler place the pod
# only where the disk fits. Kueue admits only resources its ClusterQueue covers ("resource
# ephemeral-storage unavailable in ClusterQueue", kubernetes-sigs/kueue#4848, and the real Kueue
# v0.17.1 in tests/cluster/real_plane/test_real_conformance.py): infra/cluster/k8s/kueue.yaml covers it on cpu-np
# (CPU_NP_EPHEMERAL_STORAGE). A resource belongs to one resource group, and the TPU group's flavors
# are the TPU pools, so a TPU-placed Job does not request it.
REQUEST_EPHEMERAL_STORAGE = True
# The stages whose workload is this script Job: a new stage is given its own builder, never one of
# these two's scripts, disks and environments (the type checker refuses another stage here).
ScriptStage = Literal["convert", "export"]


def stage_env(
    req: Request,
    stage: ScriptStage,
    revision: str,
    pinned_uri: str,
    step_env: list[dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Values the stage's script reads (never pasted into it), then the token from its Secret.
    ``step_env``: the entries of the script's own last step (export: ``export_manifest.env``)."""
    env = [
        {"name": "TMPDIR", "value": pinning.TMP_DIR},
        {"name": pinning.ENV_PINNED_URI, "value": pinned_uri},
    ]
    if stage == "convert":
        env += [
            {"name": "HF_HOME", "value": pinning.HF_HOME_DIR},
            {"name": "HF_XET_CHUNK_CACHE_SIZE_BYTES", "value": "0"},
            {"name": pinning.ENV_REPO, "value": req.hf_repo},
            {"name": pinning.ENV_REVISION, "value": revision},
            {"name": pinning.ENV_SNAPSHOT_DIR, "value": pinning.SNAPSHOT_DIR},
        ]
    else:
        env.append({"name": pinning.ENV_PINNED_DIR, "value": pinning.EXPORT_PINNED_DIR})
    return [*env, *(step_env or []), hf_token_env(req)]


def stage_job(
    req: Request,
    ctx: RenderContext,
    stage: ScriptStage,
    attempt: int,
    args: list[str],
    *,
    revision: str,
    pinned_uri: str,
    step_env: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    meta = metadata(req, ctx.run_id, stage, attempt, ctx.namespace, ctx.team)
    pod_labels = labels(req, ctx.run_id, stage, attempt, ctx.team)
    gated = req.placement != "cpu"
    script = (
        commands.convert_script(gated=gated) if stage == "convert" else commands.export_script(gated=gated)
    )
    disk = req.scratch.convert if stage == "convert" else req.scratch.export
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": req.image,
        "command": ["/bin/bash", "-c", script, commands.SCRIPT_NAME],
        "args": list(args),
        "env": stage_env(req, stage, revision, pinned_uri, step_env),
        "volumeMounts": [{"name": pinning.SCRATCH_VOLUME, "mountPath": pinning.SCRATCH_MOUNT}],
        **TERMINATION_MESSAGE,
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": ctx.service_account,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [{"name": pinning.SCRATCH_VOLUME, "emptyDir": {"sizeLimit": disk}}],
    }
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
        "podFailurePolicy": PREEMPTION_FAILS_JOB,
    }
    disk_request = {"ephemeral-storage": disk} if REQUEST_EPHEMERAL_STORAGE else {}
    if req.placement == "cpu":
        requests = {"cpu": req.cpu_job.cpu, "memory": req.cpu_job.memory, **disk_request}
        container["resources"] = {"requests": requests, "limits": {"memory": req.cpu_job.memory}}
        pod_spec["nodeSelector"] = {"cloud.google.com/gke-nodepool": req.cpu_job.node_pool}
        spec.update({"parallelism": 1, "completions": 1})
    else:
        hosts = tpu.SHAPES[req.tpu.type].hosts
        container["resources"] = {"limits": dict(TPU_CHIPS_PER_POD)}
        pod_spec.update(
            {
                "hostNetwork": True,
                "dnsPolicy": "ClusterFirstWithHostNet",
                "nodeSelector": tpu_node_selector(req),
                "tolerations": tpu_tolerations(req),
            }
        )
        spec.update({"completionMode": "Indexed", "parallelism": hosts, "completions": hosts})
    spec["template"] = {"metadata": {"labels": pod_labels}, "spec": pod_spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
