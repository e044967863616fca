"""Publishing the export to the Hugging Face Hub as a ``batch/v1`` Job on the CPU pool.

Weights never pass through a function: the Job streams the export's files from GCS to the Hub one
at a time (``rlpipe.publisher.program``, shipped inside this manifest as ``python3 -c``, so no
object a workload can write decides what runs with the write token). The write token comes from
its own Secret (``publish.token_secret``), never the read token's. The model card travels in the
manifest too (an env value), so no training container can rewrite what the card says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlpipe.core import commands, pinning
from rlpipe.core.manifests.common import PREEMPTION_FAILS_JOB, TERMINATION_MESSAGE, labels, metadata

if TYPE_CHECKING:
    from rlpipe.core.manifests import RenderContext
    from rlpipe.core.request import Request

CONTAINER_NAME = "workload-container"
CARD_ENV = "RLPIPE_MODEL_CARD"
JOB_TTL_SECONDS = 3600
# Enough for one shard in flight (the program deletes each file once it is uploaded) and the
# client's hashing; memory stays bounded because files are read in chunks.
# Measured: ~75 MiB peak (bench/publish.py); 2Gi leaves room for the client's own buffers.
CPU, MEMORY = "2", "2Gi"
# The program exits 75 (EX_TEMPFAIL) on a failure worth retrying (429, 5xx, a lost race): the
# stage classifies it ``transient``; 2 (permanent: 401/403, bad input) and others stay permanent.
TRANSIENT_EXIT_CODES = (75,)
PUBLISHER_MARK = "rlpipe-publisher"  # first line of the program: how the simulator recognises it


def publish_args(
    req: Request, ctx: RenderContext, source_uri: str, manifest_uri: str, receipt_uri: str
) -> list[str]:
    """The program pushes exactly the files the export manifest lists (``--manifest``), each
    checked against its sha256, and refuses any other object under ``--source``."""
    assert req.publish is not None
    return [
        "--source",
        source_uri,
        "--manifest",
        manifest_uri,
        "--receipt",
        receipt_uri,
        "--repo",
        req.publish.repo,
        "--branch",
        req.publish.branch,
        "--private",
        "true" if req.publish.private else "false",
        "--run-id",
        ctx.run_id,
        "--request-id",
        req.request_id or ctx.run_id,
        "--tmpdir",
        pinning.TMP_DIR,
        # the manifest's bytes as the control plane judged them when export ended: a manifest
        # rewritten since (to list a planted file) is refused before anything is sent
        *(["--manifest-sha256", ctx.export_manifest_sha256] if ctx.export_manifest_sha256 else []),
    ]


def publish_job(
    req: Request, ctx: RenderContext, attempt: int, args: list[str], *, card: str, program: str
) -> dict[str, Any]:
    if req.publish is None:
        raise ValueError("the request has no publish section; there is nothing to publish")
    if not program.startswith(f"# {PUBLISHER_MARK}"):
        raise ValueError(f"the publisher program must start with '# {PUBLISHER_MARK}'")
    secret = req.publish.token_secret
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": req.image,
        "command": ["python3", "-c", program],
        **TERMINATION_MESSAGE,
        "args": list(args),
        "env": [
            {"name": "TMPDIR", "value": pinning.TMP_DIR},
            # The LFS upload path is the one measured and tested (bench/publish.py); with hf_xet
            # installed the client would switch to Xet, whose disk and memory use are not bounded here.
            {"name": "HF_HUB_DISABLE_XET", "value": "1"},
            {"name": CARD_ENV, "value": card},
            {
                "name": commands.HF_TOKEN_ENV,
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            },
        ],
        "resources": {"requests": {"cpu": CPU, "memory": MEMORY}, "limits": {"memory": MEMORY}},
        "volumeMounts": [{"name": pinning.SCRATCH_VOLUME, "mountPath": pinning.SCRATCH_MOUNT}],
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": ctx.service_account,
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": {"cloud.google.com/gke-nodepool": req.cpu_job.node_pool},
        "containers": [container],
        "volumes": [{"name": pinning.SCRATCH_VOLUME, "emptyDir": {"sizeLimit": req.scratch.export}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(req, ctx.run_id, "publish", attempt, ctx.namespace, ctx.team),
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
            "podFailurePolicy": PREEMPTION_FAILS_JOB,
            "parallelism": 1,
            "completions": 1,
            "template": {
                "metadata": {"labels": labels(req, ctx.run_id, "publish", attempt, ctx.team)},
                "spec": pod_spec,
            },
        },
    }
