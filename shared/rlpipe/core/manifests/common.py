"""Pieces every rendered workload shares: metadata, the HF token reference, TPU placement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlpipe.core import commands, identity, tpu
from rlpipe.core.request import checks

if TYPE_CHECKING:
    from rlpipe.core.identity import Stage
    from rlpipe.core.request import Request


def labels(req: Request, run_id: str, stage: Stage, attempt: int, team: str) -> dict[str, str]:
    """User labels first, so the pipeline's own labels always win on a clash."""
    return {
        **req.labels,
        checks.MODEL_LABEL: req.model,
        **identity.run_labels(run_id, stage, attempt, team),
    }


def metadata(
    req: Request, run_id: str, stage: Stage, attempt: int, namespace: str, team: str
) -> dict[str, Any]:
    return {
        "name": identity.workload_name(run_id, stage, attempt),
        "namespace": namespace,
        "labels": {**labels(req, run_id, stage, attempt, team), identity.LABEL_QUEUE: req.tpu.queue},
    }


# Every container rlpipe renders ends with its last log lines as its termination message when it
# fails without writing one (k8s.io/api core/v1 Container.terminationMessagePolicy:
# FallbackToLogsOnError, "the last chunk of container log output ... limited to 2048 bytes or 80
# lines, whichever is smaller"; the default, File, reads only /dev/termination-log, which neither
# MaxText nor our scripts write). The status read puts that message into the attempt's reason
# (cluster.evidence, bounded and with tokens masked), so a failed program is recorded with its own
# last words (the exception line), not an exit code alone.
TERMINATION_MESSAGE: dict[str, str] = {"terminationMessagePolicy": "FallbackToLogsOnError"}


def hf_token_env(req: Request) -> dict[str, Any]:
    """The token reaches the container from a Secret; manifests only ever name the Secret."""
    return {
        "name": commands.HF_TOKEN_ENV,
        "valueFrom": {"secretKeyRef": {"name": req.hf_token_secret.name, "key": req.hf_token_secret.key}},
    }


def plain_env(values: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def tpu_node_selector(req: Request) -> dict[str, str]:
    """TPU type and topology, then the capacity ``tpu.provisioning`` names (docs/provisioning.md):
    a specific reservation by name; Spot nodes by the label GKE puts on them; on-demand and
    flex-start by nothing more (flex-start nodes come from the ProvisioningRequest Kueue makes)."""
    selector = {
        "cloud.google.com/gke-tpu-accelerator": tpu.GKE_ACCELERATOR,
        "cloud.google.com/gke-tpu-topology": req.tpu.topology,
    }
    mode = req.tpu.provisioning
    if mode == "reservation" and req.tpu.reservation:
        selector["cloud.google.com/reservation-name"] = req.tpu.reservation
        selector["cloud.google.com/reservation-affinity"] = "specific"
    if mode == "spot":
        selector[SPOT_LABEL] = "true"
    return selector


def tpu_tolerations(req: Request) -> list[dict[str, str]]:
    """The TPU taint always; Spot nodes' taint (where the pool carries it: Autopilot, NAP, or
    ``--node-taints``; harmless otherwise); queued-provisioning nodes' ``gke-queued`` taint."""
    tolerations = [dict(t) for t in TPU_TOLERATIONS]
    if req.tpu.provisioning == "spot":
        tolerations.append({"key": SPOT_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    if req.tpu.provisioning == "flex-start":
        tolerations.append({"key": QUEUED_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


SPOT_LABEL = "cloud.google.com/gke-spot"
QUEUED_TAINT = "cloud.google.com/gke-queued"
TPU_TOLERATIONS = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
TPU_CHIPS_PER_POD = {"google.com/tpu": str(tpu.CHIPS_PER_HOST)}


# A pod disrupted by preemption, maintenance or eviction fails its Job at once, and the Job's
# Failed condition (reason PodFailurePolicy) keeps naming the DisruptionTarget after the pod is
# gone: the only preemption evidence that survives a JobSet's cleanup of its child Jobs.
# Kubernetes requires restartPolicy Never for a podFailurePolicy.
PREEMPTION_FAILS_JOB = {
    "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
}
