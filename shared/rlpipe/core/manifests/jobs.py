"""Conversion and export as ``batch/v1`` Jobs, in either placement.

``cpu`` (the default) is one pod on the CPU pool holding no TPU: MaxText's converters force CPU
anyway, so the tutorials' slice-wide Job kept 7 or 15 hosts of TPU idle while host 0 worked.
``tpu-slice`` keeps the tutorials' shape: an Indexed Job across the slice's hosts where only
completion index 0 runs the program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlpipe.core import commands, tpu
from rlpipe.core.manifests.common import (
    PREEMPTION_FAILS_JOB,
    TPU_CHIPS_PER_POD,
    TPU_TOLERATIONS,
    hf_token_env,
    labels,
    metadata,
    tpu_node_selector,
)

if TYPE_CHECKING:
    from rlpipe.core.identity import Stage
    from rlpipe.core.manifests import RenderContext
    from rlpipe.core.request import Request

CONTAINER_NAME = "workload-container"
JOB_TTL_SECONDS = 3600


def stage_job(
    req: Request, ctx: RenderContext, stage: Stage, attempt: int, module: str, args: list[str]
) -> dict[str, Any]:
    meta = metadata(req, ctx.run_id, stage, attempt, ctx.namespace)
    pod_labels = labels(req, ctx.run_id, stage, attempt)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": req.image,
        "env": [hf_token_env(req)],
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": ctx.service_account,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
    }
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
        "podFailurePolicy": PREEMPTION_FAILS_JOB,
    }
    if req.placement == "cpu":
        container["command"] = ["python3", "-m", module]
        container["args"] = list(args)
        requests = {"cpu": req.cpu_job.cpu, "memory": req.cpu_job.memory}
        if req.cpu_job.ephemeral_storage:
            requests["ephemeral-storage"] = req.cpu_job.ephemeral_storage
        container["resources"] = {"requests": dict(requests), "limits": {"memory": req.cpu_job.memory}}
        pod_spec["nodeSelector"] = {"cloud.google.com/gke-nodepool": req.cpu_job.node_pool}
        spec.update({"parallelism": 1, "completions": 1})
    else:
        hosts = tpu.SHAPES[req.tpu.type].hosts
        container["command"] = ["/bin/bash", "-c", commands.indexed_gate_script(module), commands.SCRIPT_NAME]
        container["args"] = list(args)
        container["resources"] = {"limits": dict(TPU_CHIPS_PER_POD)}
        pod_spec.update(
            {
                "hostNetwork": True,
                "dnsPolicy": "ClusterFirstWithHostNet",
                "nodeSelector": tpu_node_selector(req),
                "tolerations": [dict(t) for t in TPU_TOLERATIONS],
            }
        )
        spec.update({"completionMode": "Indexed", "parallelism": hosts, "completions": hosts})
    spec["template"] = {"metadata": {"labels": pod_labels}, "spec": pod_spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
