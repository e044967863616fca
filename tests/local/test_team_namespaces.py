"""What the local stack puts on the real control plane for the declared teams
(local/controlplane/team_namespaces.py): what ``rlpipe teams render`` writes into
infra/cluster/k8s/teams.yaml, as ``kubectl kustomize`` gives it with the deploy's params, for the
TPU chips of the plane's nodes; and the Secrets the teams' allowlists name. The deploy's own
ClusterQueue ``rlpipe`` is left as deployed. A declaration the plane cannot hold, and a
kustomization that no longer takes teams.yaml, are refused, naming what is wrong."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.core.problems import RequestInvalid
from rlpipe.core.teams import parse_teams
from rlpipe.local.controlplane import missing_reason
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_chips, tpu_slice
from rlpipe.local.controlplane.team_namespaces import team_documents
from rlpipe.local.teams_declaration import read_teams_file
from tests.conftest import ROOT
from tests.harness.real_cluster import K8S_DIR, deploy_documents

TEAMS_FILE = ROOT / "examples" / "teams" / "teams.yaml"
TEAMS = read_teams_file(TEAMS_FILE).teams
PLANE_CHIPS = 32  # the local stack's one v6e 4x8 slice: 8 hosts of 4 chips (GKE "About TPUs in GKE")
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


def test_the_stacks_plane_gives_one_v6e_32_slice_of_chips() -> None:
    assert tpu_chips([*cpu_pool(), *tpu_slice("4x8")]) == PLANE_CHIPS
    assert tpu_chips(cpu_pool()) == 0


def test_each_team_gets_its_namespace_queue_and_the_deployments_identities() -> None:
    deployed = deploy_documents()
    documents = team_documents(TEAMS, PLANE_CHIPS)
    originals = _by(deployed, "rlpipe")
    declared = yaml.safe_load(TEAMS_FILE.read_text())["teams"]
    for team in TEAMS:
        mine = _by(documents, team.k8s_namespace)
        # the pipeline's identities and rules are the deployment's, placeholders filled as it fills them
        for key in (("Role", "rlpipe-pipeline"), ("RoleBinding", "rlpipe-pipeline")):
            assert {k: v for k, v in mine[key].items() if k != "metadata"} == {
                k: v for k, v in originals[key].items() if k != "metadata"
            }, key
        workload_sa = mine[("ServiceAccount", "rlpipe-workload")]["metadata"]["annotations"]
        assert workload_sa == originals[("ServiceAccount", "rlpipe-workload")]["metadata"]["annotations"]
        assert mine[("LocalQueue", "user-queue")]["spec"] == {"clusterQueue": f"rlpipe-{team.name}"}
        secrets = {name: doc for (kind, name), doc in mine.items() if kind == "Secret"}
        assert set(secrets) == {entry.split(":")[0] for entry in (*team.read_secrets, *team.write_secrets)}
        assert all(base64.b64decode(s["data"]["token"]) for s in secrets.values())
        queue = _by(documents, None)[("ClusterQueue", f"rlpipe-{team.name}")]
        assert queue["spec"]["cohortName"] == "rlpipe-teams"
        assert queue["spec"]["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": team.k8s_namespace}
        }
        [tpu] = {r["name"]: r for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}.values()
        quota = declared[team.name]["quota"]
        assert tpu["nominalQuota"] == quota["chips"]
        assert tpu.get("borrowingLimit") == quota.get("borrowing_limit")
    assert not [d for d in documents if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "rlpipe"]
    assert not [d for d in documents if d["kind"] in ("SecretProviderClass", "SecretSync")]  # GKE-only


def test_the_example_has_a_borrower_and_an_owner_of_the_whole_plane() -> None:
    """What makes a real reclaim possible on the stack's plane: speech's v6e-32 run fits speech's own
    quota, so it may take back the chips vision borrowed (team_queues: reclaimWithinCohort)."""
    chips = {team.name: team.quota.chips if team.quota else 0 for team in TEAMS}
    assert chips == {"vision": 0, "speech": PLANE_CHIPS}


def test_a_declaration_the_plane_cannot_hold_is_refused_naming_its_chips() -> None:
    """The example's declaration as it was (32 chips each) on the stack's 32-chip plane."""
    document = yaml.safe_load(TEAMS_FILE.read_text())["teams"]
    document["vision"]["quota"] = {"chips": 32}
    with pytest.raises(RequestInvalid, match=r"add up to 64, more than the cluster's 32"):
        team_documents(parse_teams(document), PLANE_CHIPS)


def test_a_kustomization_without_teams_yaml_is_refused_naming_what_each_team_lacks(tmp_path: Path) -> None:
    """A copy of infra/cluster/k8s whose kustomization lost teams.yaml from its resources."""
    copy = tmp_path / K8S_DIR.name
    shutil.copytree(K8S_DIR, copy)
    kustomization = yaml.safe_load((copy / "kustomization.yaml").read_text())
    kustomization["resources"].remove("teams.yaml")
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    with pytest.raises(
        ValueError, match=r"lacks ClusterQueue rlpipe-vision, .*LocalQueue rlpipe-speech/user-queue"
    ):
        team_documents(TEAMS, PLANE_CHIPS, directory=copy)


def test_the_operator_the_stack_plays_operates_every_team_and_nothing_else_changes() -> None:
    """`rlpipe cancel`, `retry` and `promote` on a teams stack call as the played operator: it is
    added to each team's operators (once), the rest of the declaration is the file's, and the
    functions read it as a valid declaration that lets it act on every team's runs."""
    import json

    from rlpipe.local.identities import operator_account

    local = read_teams_file(ROOT / "examples" / "teams" / "teams.yaml")
    operator = f"serviceAccount:{operator_account('rlpipe-local')}"
    once = json.loads(local.env_json_operated_by(operator))
    assert json.loads(local.env_json_operated_by(operator)) == once  # the same every time
    teams = parse_teams(once)
    for team in teams:
        assert operator in team.operators and team.operators.count(operator) == 1
        assert [o for o in team.operators if o != operator] == list(local.teams.named(team.name).operators)
    file = json.loads(local.env_json)
    assert {n: {k: v for k, v in b.items() if k != "operators"} for n, b in once.items()} == {
        n: {k: v for k, v in b.items() if k != "operators"} for n, b in file.items()
    }
