"""Nodes shaped like a GKE cluster's for the tutorials: the CPU pool and TPU v6e slices.

Labels, taints and capacities are GKE's (GKE "Plan TPUs" and "About TPUs in GKE"; Cluster Toolkit
``pkg/config/hardware.go``): a v6e slice of topology AxB has A*B/4 ``ct6e-standard-4t`` hosts of
four chips each, labelled ``cloud.google.com/gke-tpu-accelerator: tpu-v6e-slice`` and
``cloud.google.com/gke-tpu-topology``, with ``google.com/tpu`` capacity and the
``google.com/tpu=present:NoSchedule`` taint GKE puts on every TPU node. Spot and flex-start pools
add ``cloud.google.com/gke-spot`` and ``cloud.google.com/gke-queued``, each as label and taint.
The CPU pool ``cpu-np`` is c4d-standard-96 (96 vCPU, 360 GB), as ``infra/cluster/k8s/kueue.yaml``
sizes it: a conversion pod asks for 32 CPU and 256Gi. Nothing runs on these nodes: they are data
the real scheduler binds pods to, and the pod player (``kubelet.py``) plays their containers.
"""

from __future__ import annotations

from typing import Any

CHIPS_PER_HOST = 4


def _node(
    name: str, labels: dict[str, str], capacity: dict[str, str], taints: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels},
        },
        "spec": {"taints": taints} if taints else {},
    }


def node_status(capacity: dict[str, str]) -> dict[str, Any]:
    """A Ready node's status (written through the status subresource, as a kubelet would)."""
    return {
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "played by rlpipe"}
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.12-played",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
        }
    }


def cpu_pool(count: int = 2, pool: str = "cpu-np") -> list[tuple[dict[str, Any], dict[str, str]]]:
    capacity = {"cpu": "96", "memory": "360Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    labels = {"cloud.google.com/gke-nodepool": pool, "node.kubernetes.io/instance-type": "c4d-standard-96"}
    return [(_node(f"gke-{pool}-{i}", labels, capacity, []), capacity) for i in range(count)]


def tpu_chips(nodes: list[tuple[dict[str, Any], dict[str, str]]]) -> int:
    """The TPU chips ``nodes`` give (their ``google.com/tpu`` capacity): what Kueue may admit on them."""
    return sum(int(capacity.get("google.com/tpu", "0")) for _, capacity in nodes)


def tpu_slice(
    topology: str = "4x8", pool: str = "tpu-v6e-4x8", *, spot: bool = False, queued: bool = False
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    a, b = (int(x) for x in topology.split("x"))
    hosts = a * b // CHIPS_PER_HOST
    capacity = {"cpu": "180", "memory": "720Gi", "pods": "110", "google.com/tpu": str(CHIPS_PER_HOST)}
    labels = {
        "cloud.google.com/gke-nodepool": pool,
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": topology,
        "node.kubernetes.io/instance-type": "ct6e-standard-4t",
    }
    taints = [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
    if spot:
        labels["cloud.google.com/gke-spot"] = "true"
        taints.append({"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"})
    if queued:
        # A queued-provisioning (flex-start) pool: GKE taints its nodes cloud.google.com/gke-queued
        # (GKE how-to "provisioningrequest"; Cluster Toolkit modules/compute/gke-node-pool/main.tf
        # 69-75 adds only the label, saying GKE applies the taint itself), so only workloads that
        # tolerate it land there. Value and effect as infra/cluster/k8s/flex-start's ResourceFlavor
        # declares them (nodeTaints).
        labels["cloud.google.com/gke-queued"] = "true"
        taints.append({"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"})
    return [(_node(f"gke-{pool}-{i}", labels, capacity, taints), capacity) for i in range(hosts)]
