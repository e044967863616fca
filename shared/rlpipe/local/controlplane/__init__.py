"""The real Kubernetes control plane, built from Go modules, as a supervised part of the local stack."""

from rlpipe.local.controlplane.cluster import ControlPlane
from rlpipe.local.controlplane.components import missing_reason

__all__ = ["ControlPlane", "missing_reason"]
