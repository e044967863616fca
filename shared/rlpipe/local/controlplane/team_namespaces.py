"""Each declared team's namespace and Kueue queue on the real control plane, as a deploy with teams
holds them.

Why the rendering a deployment applies, and not objects made here: ``rlpipe teams render`` writes
infra/cluster/k8s/teams.yaml from the declaration (``core.manifests.team_queues``): per team its
Namespace, the ServiceAccount its pods run as, the Role and RoleBinding that let the pipeline's
identities act there and nowhere else, its ClusterQueue ``rlpipe-<team>`` in the teams' cohort
with ``quota.chips`` as nominal quota, and the LocalQueue ``user-queue`` every request names. The
stack renders the same file into a copy of infra/cluster/k8s and takes the teams' objects from
``kubectl kustomize`` (``deploy.deploy_documents``) with the deploy's params, so the placeholders
are filled by the kustomization's replacements as on a deployment, and the real Kueue borrows,
lends and reclaims between the teams as it would there.

The capacity the teams share is the plane's: the TPU chips its played nodes give (one slice, not
the deploy's ``TPU_CHIPS``, which is larger than the plane), and the deploy's cpu-np pool. The
deploy's ClusterQueue ``rlpipe`` stays as deployed: it admits namespace ``rlpipe`` only.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlpipe.cluster import role_rules
from rlpipe.core.manifests import team_queues
from rlpipe.core.teams import Teams
from rlpipe.local.controlplane.deploy import K8S_DIR, PARAMS, deploy_documents
from rlpipe.local.teams_declaration import secret_documents

Obj = dict[str, Any]
# What each team's namespace must hold once rendered, by (kind, name): its runs need every one.
NAMESPACED = (
    ("ServiceAccount", "rlpipe-workload"),
    ("Role", "rlpipe-pipeline"),
    ("RoleBinding", "rlpipe-pipeline"),
    ("LocalQueue", team_queues.LOCAL_QUEUE),
)


def team_documents(
    teams: Teams,
    tpu_chips: int,
    *,
    directory: Path = K8S_DIR,
    params: Mapping[str, str] = PARAMS,
) -> list[Obj]:
    """The teams' objects of ``directory`` with ``teams.yaml`` rendered for ``teams`` on
    ``tpu_chips`` chips, as ``kubectl kustomize`` gives them, then the Secrets each team's
    allowlists name. Raises ``RequestInvalid`` for a declaration the plane cannot hold (naming it),
    ``ValueError`` if the kustomization leaves out a team's objects."""
    values = {**params, team_queues.PARAM_TPU_CHIPS: str(tpu_chips)}
    capacity = team_queues.Capacity.from_params(values, "the local control plane")
    text = team_queues.render_file(teams, capacity, role_rules())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / directory.name
        shutil.copytree(directory, work, ignore=shutil.ignore_patterns("params.env"))
        (work / "teams.yaml").write_text(text)
        rendered = [
            d
            for d in deploy_documents(work, values)
            if team_queues.TEAM_LABEL in ((d.get("metadata") or {}).get("labels") or {})
        ]
    _refuse_incomplete(teams, rendered)
    documents = list(rendered)
    for team in teams:
        documents += secret_documents(team)
    return documents


def _refuse_incomplete(teams: Teams, rendered: list[Obj]) -> None:
    """Say what a team would lack (the kustomization no longer takes teams.yaml, say), rather than
    start a stack whose team runs wait forever."""
    held = {(d.get("kind"), d["metadata"].get("namespace"), d["metadata"].get("name")) for d in rendered}
    missing = [
        f"{kind} {namespace or ''}/{name}".replace(" /", " ")
        for team in teams
        for kind, namespace, name in (
            ("ClusterQueue", None, team_queues.cluster_queue_name(team)),
            *((kind, team.k8s_namespace, name) for kind, name in NAMESPACED),
        )
        if (kind, namespace, name) not in held
    ]
    if missing:
        raise ValueError(
            f"the kustomization's output lacks {', '.join(missing)}: is teams.yaml still among its resources?"
        )
