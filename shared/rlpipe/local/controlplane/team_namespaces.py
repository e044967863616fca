"""Each declared team's namespace on the real control plane, made usable for its runs.

Why copies of the deploy's own objects: a team's workloads need in ``rlpipe-<team>`` what
``infra/cluster/k8s`` gives namespace ``rlpipe`` (namespace.yaml, serviceaccounts.yaml, rbac.yaml,
the LocalQueue of kueue.yaml): the ServiceAccount its pods run as, the Role and RoleBinding that
let the pipeline's identities (the stage and reconcile functions) act there and nowhere else, and
the LocalQueue ``user-queue`` every request names (``core.presets``). Copied from the rendered
deploy (``deploy.deploy_documents``), so the identities and rules are the deployment's, and the
copy cannot drift from the original.

Until the teams' own ClusterQueues exist (one per team in a cohort of their own, rendered from the
same declaration: docs/teams-local.md, "Kueue"), each team's LocalQueue points at the deploy's
ClusterQueue ``rlpipe``, whose ``namespaceSelector`` (``kubernetes.io/metadata.name: rlpipe``)
is widened here to the team namespaces too. Kueue admits a LocalQueue's workloads only from
namespaces its ClusterQueue selects (Kueue v0.17.1 apis/kueue/v1beta2/clusterqueue_types.go:99-105);
without the widening they would wait forever.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from rlpipe.core.teams import Team, Teams
from rlpipe.local.teams_declaration import TEAM_LABEL, secret_documents

Obj = dict[str, Any]
PART_OF = {"app.kubernetes.io/part-of": "rlpipe"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # the API server sets it on every Namespace
CLUSTER_QUEUE = "rlpipe"
# The deploy's objects a team's namespace holds a copy of, by (kind, name).
COPIED = frozenset(
    {
        ("ServiceAccount", "rlpipe-workload"),
        ("Role", "rlpipe-pipeline"),
        ("RoleBinding", "rlpipe-pipeline"),
        ("LocalQueue", "user-queue"),
    }
)


def team_documents(teams: Teams, deployed: Iterable[Obj]) -> list[Obj]:
    """Per team: its Namespace, the deploy's objects of :data:`COPIED` in it, and the Secrets its
    allowlists name; then the ClusterQueue ``rlpipe`` admitting the team namespaces too."""
    deployed = list(deployed)
    missing = COPIED - {(d.get("kind"), (d.get("metadata") or {}).get("name")) for d in deployed}
    if missing:  # the deploy changed: say what, rather than leave a team without it
        raise ValueError(f"the deploy no longer holds {sorted(missing)}: update {__name__}.COPIED")
    documents: list[Obj] = []
    for team in teams:
        documents.append(_namespace(team))
        for doc in deployed:
            if (doc.get("kind"), doc["metadata"].get("name")) in COPIED:
                documents.append(_in_namespace(doc, team))
        documents += secret_documents(team)
    queue = next(
        d for d in deployed if (d.get("kind"), d["metadata"].get("name")) == ("ClusterQueue", CLUSTER_QUEUE)
    )
    documents.append(admitting(queue, [t.k8s_namespace for t in teams]))
    return documents


def admitting(cluster_queue: Obj, team_namespaces: list[str]) -> Obj:
    """The ClusterQueue, selecting its own namespace and the team namespaces."""
    own = ((cluster_queue["spec"].get("namespaceSelector") or {}).get("matchLabels") or {}).get(
        NAMESPACE_NAME_LABEL
    )
    if own is None:
        raise ValueError(f"ClusterQueue {CLUSTER_QUEUE} no longer selects one namespace by name")
    widened = copy.deepcopy(cluster_queue)
    widened["spec"]["namespaceSelector"] = {
        "matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [own, *team_namespaces]}
        ]
    }
    return widened


def _labels(team: Team) -> dict[str, str]:
    return {**PART_OF, TEAM_LABEL: team.name}


def _namespace(team: Team) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": team.k8s_namespace, "labels": _labels(team)},
    }


def _in_namespace(doc: Obj, team: Team) -> Obj:
    copied = copy.deepcopy(doc)
    copied["metadata"]["namespace"] = team.k8s_namespace
    copied["metadata"]["labels"] = {**(copied["metadata"].get("labels") or {}), TEAM_LABEL: team.name}
    return copied
