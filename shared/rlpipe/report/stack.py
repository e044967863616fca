"""What every page says when its runs ran on the local stack: that they were simulated, and on
which cluster.

Why: the pages show rewards, accuracies and chip-hours and are made to be shared. A page of a run
on the local stack that looks like a page of a run on GCP passes simulated numbers off as a trained
model's. So each page (run report, comparison, sweep) carries this notice in its header and title.

The ledger record has no field for where a run ran, so the notice comes from whoever renders the
page, from its own settings (``control.lifecycle.run_report.local_cluster``): the CLI from the deployment it
talks to, the control plane from its own. The local stack keeps its buckets in memory
(``local/gcs.py``), so a stack's ledger holds only runs of that stack's cluster. ``None`` is a
deployment on Google Cloud: the page says nothing of the kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Cluster = Literal["double", "real"]
CLUSTERS: tuple[Cluster, ...] = ("double", "real")

_WHAT: dict[Cluster, str] = {
    "double": "the Kubernetes API double and the cluster simulator: the cluster, the TPU and the programs "
    "(MaxText's training and evaluation, conversion, export, publish) were SIMULATED",
    "real": "a real Kubernetes control plane (kube-apiserver, controllers, scheduler) with JobSet and "
    "Kueue; the nodes, the containers and the programs (MaxText's training and evaluation, "
    "conversion, export, publish) were PLAYED",
}


@dataclass(frozen=True)
class LocalStack:
    """The notice of a page whose runs ran on the local stack."""

    cluster: Cluster

    @property
    def what(self) -> str:
        """Which cluster, and what of it was real, in one sentence."""
        return _WHAT[self.cluster]

    @property
    def title(self) -> str:
        """The page title's suffix: a shared tab or link says it too."""
        return f"SIMULATED (local stack, cluster {self.cluster})"


def local_stack(cluster: str | None) -> LocalStack | None:
    """The notice for ``cluster`` (``double`` or ``real``); None (no notice) for a run on GCP.
    Anything else is refused: a page never guesses where its runs ran."""
    if cluster is None:
        return None
    for known in CLUSTERS:
        if cluster == known:
            return LocalStack(known)
    raise ValueError(f"cluster must be one of {', '.join(CLUSTERS)} or None (GCP), not {cluster!r}")
