"""TPU v6e slice shapes: the facts that tie a type to a topology, chips and hosts.

Multi-host v6e slices run on ``ct6e-standard-4t`` VMs with 4 chips each, so hosts = chips / 4
(Cluster Toolkit and xpk derive the same numbers; reference/manifests.md §1).
"""

from __future__ import annotations

from dataclasses import dataclass

CHIPS_PER_HOST = 4
MACHINE_TYPE = "ct6e-standard-4t"
GKE_ACCELERATOR = "tpu-v6e-slice"
PATHWAYS_INSTANCE_PREFIX = "tpuv6e"


@dataclass(frozen=True)
class SliceShape:
    type: str
    topology: str

    @property
    def chips(self) -> int:
        x, y = (int(v) for v in self.topology.split("x"))
        return x * y

    @property
    def hosts(self) -> int:
        return self.chips // CHIPS_PER_HOST

    @property
    def pathways_instance_type(self) -> str:
        return f"{PATHWAYS_INSTANCE_PREFIX}:{self.topology}"


SHAPES: dict[str, SliceShape] = {
    s.type: s
    for s in (
        SliceShape("v6e-16", "4x4"),
        SliceShape("v6e-32", "4x8"),
        SliceShape("v6e-64", "8x8"),
        SliceShape("v6e-128", "8x16"),
        SliceShape("v6e-256", "16x16"),
    )
}
