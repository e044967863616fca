"""What the local stack puts in each team's namespace on the real control plane
(local/controlplane/team_namespaces.py), from the deploy as ``kubectl kustomize`` renders it: the
deploy's own ServiceAccount, Role, RoleBinding and LocalQueue, unchanged but for the namespace
and the team label; the Secrets the team's allowlists name; and the ClusterQueue admitting the
team namespaces as well as its own. A deploy that no longer holds one of the copied objects is
refused, naming it, instead of leaving a team's namespace without it."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.local.controlplane import missing_reason
from rlpipe.local.controlplane.team_namespaces import COPIED, team_documents
from rlpipe.local.teams_declaration import read_teams_file
from tests.conftest import ROOT
from tests.harness.real_cluster import K8S_DIR, deploy_documents

TEAMS = read_teams_file(ROOT / "examples" / "teams" / "teams.yaml").teams
pytestmark = pytest.mark.skipif(
    missing_reason(("kubectl",)) is not None, reason=str(missing_reason(("kubectl",)))
)
Obj = dict[str, Any]


def _by(documents: list[Obj], namespace: str | None) -> dict[tuple[str, str], Obj]:
    return {
        (d["kind"], d["metadata"]["name"]): d
        for d in documents
        if d["metadata"].get("namespace") == namespace
    }


def _without_metadata(doc: Obj) -> Obj:
    return {k: v for k, v in doc.items() if k != "metadata"}


def test_each_team_namespace_holds_the_deploys_objects_and_its_own_secrets() -> None:
    deployed = deploy_documents()
    documents = team_documents(TEAMS, deployed)
    originals = _by(deployed, "rlpipe")
    for team in TEAMS:
        mine = _by(documents, team.k8s_namespace)
        assert set(COPIED) <= set(mine), sorted(mine)
        for key in COPIED:  # the same rules, subjects, annotations and queue, in the team's namespace
            assert _without_metadata(mine[key]) == _without_metadata(originals[key]), key
            assert mine[key]["metadata"]["labels"]["rlpipe.dev/team"] == team.name
        secrets = {name: doc for (kind, name), doc in mine.items() if kind == "Secret"}
        assert set(secrets) == {entry.split(":")[0] for entry in (*team.read_secrets, *team.write_secrets)}
        assert all(base64.b64decode(s["data"]["token"]) for s in secrets.values())
        [namespace] = [
            d for d in documents if d["kind"] == "Namespace" and d["metadata"]["name"] == team.k8s_namespace
        ]
        assert namespace["metadata"]["labels"]["rlpipe.dev/team"] == team.name
    [queue] = [d for d in documents if d["kind"] == "ClusterQueue"]
    [selector] = queue["spec"]["namespaceSelector"]["matchExpressions"]
    assert (selector["key"], selector["operator"]) == ("kubernetes.io/metadata.name", "In")
    assert selector["values"] == ["rlpipe", "rlpipe-vision", "rlpipe-speech"]
    original = next(d for d in deployed if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "rlpipe")
    assert queue["spec"]["resourceGroups"] == original["spec"]["resourceGroups"], "only the selector changes"


def test_a_deploy_without_the_local_queue_is_refused_naming_it(tmp_path: Path) -> None:
    """A copy of infra/cluster/k8s whose kueue.yaml lost its LocalQueue."""
    copy = tmp_path / K8S_DIR.name
    shutil.copytree(K8S_DIR, copy)
    kueue = copy / "kueue.yaml"
    kept = [d for d in yaml.safe_load_all(kueue.read_text()) if d and d.get("kind") != "LocalQueue"]
    kueue.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    with pytest.raises(ValueError, match=r"no longer holds \[\('LocalQueue', 'user-queue'\)\]"):
        team_documents(TEAMS, deploy_documents(copy))
