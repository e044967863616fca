"""The teams' Kueue objects (``core.manifests.team_queues``), checked without a cluster.

The expected ClusterQueue is written by hand from Kueue's v1beta2 API and docs (v0.17.1:
apis/kueue/v1beta2/clusterqueue_types.go:232-275 for where nominalQuota, borrowingLimit and
lendingLimit sit, :434-532 for preemption; site/content/en/docs/concepts/cluster_queue.md:303-465),
not read back from the renderer. Every rendered object validates strictly: Kueue's and the GKE
add-ons' kinds against tests/schemas, built-in kinds against Kubernetes' own schema, plus the CRD's
CEL rules the schemas cannot hold. Each check is also run once on a mutated copy, to show it bites.
The real Kueue admitting, lending and reclaiming with these objects: tests/cluster/real_plane/
test_real_teams.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cluster import role_rules
from rlpipe.core.manifests import team_queues
from rlpipe.core.manifests.team_queues import Capacity, quantity
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.teams import Teams, parse_teams

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "infra" / "cluster" / "k8s"
SCHEMAS = ROOT / "tests" / "schemas"
K8S_VERSION = "1.32"  # as tests/repo/test_infra.py
Obj = dict[str, Any]

TEAMS = {
    "vision": {"quota": {"chips": 16, "borrowing_limit": 16, "lending_limit": 8}},
    "speech": {"quota": {"chips": 32}},
    "guest": {},  # no quota: owns nothing, borrows what is idle
}
CAPACITY = Capacity(64, {"cpu": "180", "memory": "640Gi", "ephemeral-storage": "800Gi"})
LABELS = {"app.kubernetes.io/part-of": "rlpipe", "rlpipe.dev/team": "vision"}


def _tpu_flavors(resource: Obj) -> list[Obj]:
    return [
        {"name": flavor, "resources": [resource]}
        for flavor in ("rlpipe-tpu-v6e-slice", "rlpipe-tpu-v6e-spot")
    ]


# Written from the docs: a ClusterQueue in the teams' cohort, admitting the team's namespace only,
# reclaiming lent quota from any borrower, never preempting to borrow or within itself; 16 chips
# nominal in each TPU flavor, 16 more it may borrow, 8 it may lend; a third (16 of the teams' 48
# chips) of cpu-np: 180 / 3 = 60 CPU, 640Gi / 3 = 218453.3Mi and 800Gi / 3 = 273066.7Mi, rounded down.
VISION_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "rlpipe-vision", "labels": LABELS},
    "spec": {
        "cohortName": "rlpipe-teams",
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "rlpipe-vision"}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "Never",
        },
        "resourceGroups": [
            {
                "coveredResources": ["google.com/tpu"],
                "flavors": _tpu_flavors(
                    {"name": "google.com/tpu", "nominalQuota": 16, "borrowingLimit": 16, "lendingLimit": 8}
                ),
            },
            {
                "coveredResources": ["cpu", "memory", "ephemeral-storage"],
                "flavors": [
                    {
                        "name": "rlpipe-cpu-np",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "60"},
                            {"name": "memory", "nominalQuota": "218453Mi"},
                            {"name": "ephemeral-storage", "nominalQuota": "273066Mi"},
                        ],
                    }
                ],
            },
        ],
    },
}
VISION_LOCAL_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "LocalQueue",
    "metadata": {"name": "user-queue", "namespace": "rlpipe-vision", "labels": LABELS},
    "spec": {"clusterQueue": "rlpipe-vision"},
}


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    return team_queues.render(parse_teams(TEAMS), CAPACITY, role_rules())


def _one(objs: list[Obj], kind: str, name: str, namespace: str | None = None) -> Obj:
    hits = [
        o
        for o in objs
        if o["kind"] == kind and o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
    ]
    assert len(hits) == 1, f"{kind} {namespace}/{name}: {len(hits)} found"
    return hits[0]


# ---- what each team gets ----------------------------------------------------------------------------


def test_a_team_gets_its_queue_with_its_chips_limits_and_share_of_cpu_np(rendered: list[Obj]) -> None:
    assert _one(rendered, "ClusterQueue", "rlpipe-vision") == VISION_QUEUE
    assert _one(rendered, "LocalQueue", "user-queue", "rlpipe-vision") == VISION_LOCAL_QUEUE
    assert _one(rendered, "Namespace", "rlpipe-vision") == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "rlpipe-vision", "labels": LABELS},
    }


def test_no_limit_declared_is_no_limit_field_and_no_quota_is_no_share() -> None:
    """Kueue reads an absent borrowingLimit as "borrow without limit" and an absent lendingLimit as
    "lend everything" (clusterqueue_types.go:258-271); a team without a quota owns nothing."""
    objs = team_queues.render(parse_teams(TEAMS), CAPACITY, role_rules())
    speech = _one(objs, "ClusterQueue", "rlpipe-speech")["spec"]["resourceGroups"]
    guest = _one(objs, "ClusterQueue", "rlpipe-guest")["spec"]["resourceGroups"]
    assert speech[0]["flavors"] == _tpu_flavors({"name": "google.com/tpu", "nominalQuota": 32})
    assert [r["nominalQuota"] for r in speech[1]["flavors"][0]["resources"]] == [
        "120",
        "436906Mi",
        "546133Mi",
    ]
    assert guest[0]["flavors"] == _tpu_flavors({"name": "google.com/tpu", "nominalQuota": 0})
    assert [r["nominalQuota"] for r in guest[1]["flavors"][0]["resources"]] == ["0", "0", "0"]


@pytest.mark.parametrize(
    ("chips", "pool"),
    [([1, 1, 1], {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "10"}), ([7, 5], CAPACITY.cpu_np)],
)
def test_the_cpu_np_shares_never_add_up_to_more_than_the_pool(chips: list[int], pool: dict[str, str]) -> None:
    teams = parse_teams({f"t{i}": {"quota": {"chips": c}} for i, c in enumerate(chips)})
    objs = team_queues.render(teams, Capacity(sum(chips), pool), role_rules())
    for resource, total in pool.items():
        shares = [
            quantity(r["nominalQuota"])
            for o in objs
            if o["kind"] == "ClusterQueue"
            for r in o["spec"]["resourceGroups"][1]["flavors"][0]["resources"]
            if r["name"] == resource
        ]
        assert None not in shares and len(shares) == len(chips)
        assert sum(s for s in shares if s is not None) <= (quantity(total) or 0), resource


def test_the_pipeline_gets_in_each_team_namespace_what_it_has_in_rlpipe(rendered: list[Obj]) -> None:
    """The workloads' ServiceAccount, the secret sync and the pipeline's Role and RoleBinding are
    infra/cluster/k8s's own, in the team's namespace, labelled with the team."""
    assert not mirror_differences(rendered, "vision", _base_objects(K8S_DIR))


def test_the_mirror_check_reports_a_base_object_the_team_copy_differs_from(
    rendered: list[Obj], tmp_path: Path
) -> None:
    base = _copy_k8s(tmp_path)
    rbac = base / "rbac.yaml"
    rbac.write_text(
        rbac.read_text().replace("verbs: [create, delete, get, list]", "verbs: [create, get, list]", 1)
    )
    assert mirror_differences(rendered, "vision", _base_objects(base)) == ["Role rlpipe-pipeline"]


# ---- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declaration", "path", "words"),
    [
        ({"a": {"quota": {"chips": 48}}, "b": {"quota": {"chips": 32}}}, "teams", "add up to 80, more than"),
        ({"flex": {"quota": {"chips": 8}}}, "teams.flex", "rlpipe-flex, which the deployment has"),
        # refused by the declaration itself (core.teams), before anything is rendered
        (
            {"a": {"quota": {"chips": 8}, "namespace": "kube-system"}},
            "RLPIPE_TEAMS.a.namespace",
            "kube-system",
        ),
        ({"a": {"quota": {"chips": 8}, "namespace": "rlpipe"}}, "RLPIPE_TEAMS.a.namespace", "'rlpipe'"),
        ({"a": {}, "b": {"quota": {"chips": 0}}}, "teams", "no team has quota.chips"),
    ],
)
def test_a_declaration_the_cluster_cannot_hold_is_refused_naming_the_field(
    declaration: Obj, path: str, words: str
) -> None:
    with pytest.raises(RequestInvalid) as caught:
        team_queues.render(parse_teams(declaration), CAPACITY, role_rules())
    assert [p.path for p in caught.value.problems] == [path]
    assert words in caught.value.problems[0].message


def test_the_deployments_own_queue_names_are_the_ones_a_team_may_not_take() -> None:
    assert deployment_queue_names(K8S_DIR) == team_queues.DEPLOYMENT_QUEUES


def test_the_queue_name_check_reports_a_new_queue_of_the_deployment(tmp_path: Path) -> None:
    base = _copy_k8s(tmp_path)
    flex = base / "flex-start" / "kueue-flex-start.yaml"
    queue = "kind: ClusterQueue\nmetadata:\n  name: rlpipe-flex\n"
    assert queue in flex.read_text()
    flex.write_text(flex.read_text().replace(queue, queue.replace("rlpipe-flex", "rlpipe-urgent")))
    assert deployment_queue_names(base) == {"rlpipe", "rlpipe-urgent"} != team_queues.DEPLOYMENT_QUEUES


def test_params_env_gives_the_capacity_and_a_missing_or_wrong_key_is_named() -> None:
    params = {
        "TPU_CHIPS": "64",
        "CPU_NP_CPU": "180",
        "CPU_NP_MEMORY": "640Gi",
        "CPU_NP_EPHEMERAL_STORAGE": "800Gi",
    }
    assert Capacity.from_params(params) == CAPACITY
    with pytest.raises(RequestInvalid) as caught:
        Capacity.from_params({**params, "TPU_CHIPS": "lots", "CPU_NP_MEMORY": ""})
    assert sorted(p.path for p in caught.value.problems) == [
        "params.env.CPU_NP_MEMORY",
        "params.env.TPU_CHIPS",
    ]
    with pytest.raises(RequestInvalid) as caught:
        team_queues.render(parse_teams(TEAMS), Capacity(64, {**CAPACITY.cpu_np, "memory": "640GB"}), [])
    assert [p.path for p in caught.value.problems] == ["CPU_NP_MEMORY"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("180", Fraction(180)),
        ("640Gi", Fraction(640 * 2**30)),
        ("1.5", Fraction(3, 2)),
        ("500m", Fraction(1, 2)),
        ("1e3", Fraction(1000)),
        ("2E", Fraction(2 * 10**18)),
        ("12Kb", None),
        ("-1", None),
        ("", None),
    ],
)
def test_quantities_are_read_as_kubernetes_writes_them(text: str, value: Fraction | None) -> None:
    assert quantity(text) == value


def test_a_queue_a_team_may_name_but_has_no_local_queue_is_warned_of() -> None:
    teams = parse_teams({"a": {}, "b": {"queues": ["user-queue"]}, "c": {"queues": ["urgent", "user-queue"]}})
    warnings = team_queues.unserved_queues(teams, ("flex-queue", "user-queue"))
    assert [w.split(" may name queue ")[0] for w in warnings] == ["team a", "team c"]
    assert "flex-queue, which has no LocalQueue in rlpipe-a" in warnings[0]
    assert "urgent, which has no LocalQueue in rlpipe-c" in warnings[1]


# ---- every object validates ------------------------------------------------------------------------


def test_every_rendered_object_validates_against_the_api_schemas(rendered: list[Obj]) -> None:
    assert not invalid(rendered)


def test_the_schema_check_reports_a_limit_in_the_wrong_place_and_a_wrong_policy(
    rendered: list[Obj], tmp_path: Path
) -> None:
    """A copy of the rendered file, mutated: borrowingLimit one level up (on the flavor, not the
    resource), and a reclaim policy Kueue does not have."""
    path = tmp_path / "teams.yaml"
    path.write_text(yaml.safe_dump_all(rendered, sort_keys=False))
    text = path.read_text()
    moved = text.replace(
        "      resources:\n      - name: google.com/tpu",
        "      borrowingLimit: 4\n      resources:\n      - name: google.com/tpu",
        1,
    )
    wrong = text.replace("reclaimWithinCohort: Any", "reclaimWithinCohort: Always", 1)
    for mutated in (moved, wrong):
        assert mutated != text
        problems = invalid([d for d in yaml.safe_load_all(mutated) if d])
        assert len(problems) == 1 and problems[0].startswith("ClusterQueue rlpipe-vision"), problems


def test_the_cel_rules_are_checked_too(rendered: list[Obj]) -> None:
    queue = json.loads(json.dumps(_one(rendered, "ClusterQueue", "rlpipe-vision")))
    queue["spec"]["resourceGroups"][1]["flavors"][0]["resources"].pop()
    del queue["spec"]["cohortName"]
    queue["spec"]["preemption"]["reclaimWithinCohort"] = "Never"
    queue["spec"]["preemption"]["borrowWithinCohort"]["policy"] = "LowerPriority"
    assert [p.split(": ", 1)[1] for p in invalid([queue])] == [
        "flavors must have the same number of resources as the coveredResources",
        "borrowingLimit must be nil when cohort is empty",
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
    ]


# ---- the file infra/cluster/k8s includes -------------------------------------------------------------


def test_with_no_teams_the_file_the_kustomization_includes_holds_no_objects() -> None:
    assert "teams.yaml" in yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())["resources"]
    assert not default_file_problems(K8S_DIR / "teams.yaml")


def test_the_default_file_check_reports_an_object_in_it(tmp_path: Path) -> None:
    copy = tmp_path / "teams.yaml"
    copy.write_text(
        (K8S_DIR / "teams.yaml").read_text() + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"
    )
    assert default_file_problems(copy)


def test_kustomize_fills_the_deployments_values_in_every_team_namespace(tmp_path: Path) -> None:
    """The kustomization's replacements select by kind and name in every namespace, so the
    placeholders of the teams' objects are filled as the base's are."""
    kubectl = _kubectl()
    teams = parse_teams(TEAMS)
    text = team_queues.render_file(teams, CAPACITY, role_rules())
    objs = _kustomized(kubectl, tmp_path / "ok", text)
    assert not placeholders_left(objs)
    assert {
        o["metadata"].get("namespace") for o in objs if team_queues.TEAM_LABEL in o["metadata"]["labels"]
    } == {
        None,
        "rlpipe-vision",
        "rlpipe-speech",
        "rlpipe-guest",
    }
    # Mutated: a ServiceAccount named otherwise than the base's is not one the replacement selects.
    renamed = text.replace(
        "name: rlpipe-workload\n  namespace: rlpipe-vision",
        "name: rlpipe-workloads\n  namespace: rlpipe-vision",
    )
    assert renamed != text
    assert placeholders_left(_kustomized(kubectl, tmp_path / "mutated", renamed)) == [
        "ServiceAccount rlpipe-vision/rlpipe-workloads: WORKLOAD_GSA"
    ]


# ---- the checks ---------------------------------------------------------------------------------------


def invalid(objs: list[Obj]) -> list[str]:
    """Each object that does not validate, and why: custom kinds against tests/schemas, built-in
    kinds against Kubernetes' schema (unknown fields refused), and the ClusterQueue's CEL rules
    (clusterqueue_types.go:56, :186, :454)."""
    import jsonschema
    import kubernetes_validate

    problems = []
    for obj in objs:
        where = f"{obj['kind']} {obj['metadata']['name']}"
        group, _, version = obj["apiVersion"].rpartition("/")
        schema = SCHEMAS / f"{group}_{version}_{obj['kind'].lower()}.json"
        if schema.exists():
            validator = jsonschema.Draft202012Validator(json.loads(schema.read_text()))
            problems += [f"{where}: {e.message}" for e in validator.iter_errors(obj)]
        else:
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{where}: {exc}")
        if obj["kind"] == "ClusterQueue":
            problems += [f"{where}: {rule}" for rule in _cel_problems(obj["spec"])]
    return problems


def _cel_problems(spec: Obj) -> list[str]:
    out = []
    groups = spec.get("resourceGroups", [])
    if any(len(f["resources"]) != len(g["coveredResources"]) for g in groups for f in g["flavors"]):
        out.append("flavors must have the same number of resources as the coveredResources")
    limits = [r for g in groups for f in g["flavors"] for r in f["resources"] if "borrowingLimit" in r]
    if not spec.get("cohortName") and limits:
        out.append("borrowingLimit must be nil when cohort is empty")
    preemption = spec.get("preemption") or {}
    if preemption.get("reclaimWithinCohort", "Never") == "Never" and (
        (preemption.get("borrowWithinCohort") or {}).get("policy", "Never") != "Never"
    ):
        out.append("reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
    return out


NAMESPACED_KINDS = {
    ("ServiceAccount", "rlpipe-workload"),
    ("ServiceAccount", "rlpipe-secret-sync"),
    ("Role", "rlpipe-pipeline"),
    ("RoleBinding", "rlpipe-pipeline"),
    ("SecretProviderClass", "rlpipe-hf-token"),
    ("SecretSync", "hf-token"),
}


def _base_objects(k8s_dir: Path) -> list[Obj]:
    files = ("serviceaccounts.yaml", "rbac.yaml", "secretsync.yaml")
    return [d for name in files for d in yaml.safe_load_all((k8s_dir / name).read_text()) if d]


def mirror_differences(rendered: list[Obj], team: str, base: list[Obj]) -> list[str]:
    """The base's namespaced objects whose copy in ``team``'s namespace is not the base's own with
    only the namespace and the team label changed."""
    namespace = f"rlpipe-{team}"
    out = []
    for kind, name in sorted(NAMESPACED_KINDS):
        want = json.loads(json.dumps(_one(base, kind, name, "rlpipe")))
        want["metadata"]["namespace"] = namespace
        want["metadata"]["labels"][team_queues.TEAM_LABEL] = team
        if _one(rendered, kind, name, namespace) != want:
            out.append(f"{kind} {name}")
    return out


def deployment_queue_names(k8s_dir: Path) -> set[str]:
    """The ClusterQueues infra/cluster/k8s and its flex-start kustomization define (not the teams')."""
    return {
        d["metadata"]["name"]
        for path in sorted(k8s_dir.rglob("*.yaml"))
        if path.name != "teams.yaml"
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") == "ClusterQueue"
    }


def default_file_problems(path: Path) -> list[str]:
    text = path.read_text()
    problems = []
    if text != team_queues.render_file(Teams(), None, role_rules()):
        problems.append("not what `rlpipe teams render` writes for no teams")
    if [d for d in yaml.safe_load_all(text) if d]:
        problems.append("holds objects")
    return problems


def placeholders_left(objs: list[Obj]) -> list[str]:
    words = ("WORKLOAD_GSA", "STAGE_GSA", "RECONCILE_GSA", "HF_TOKEN_SECRET_VERSION")
    return [
        f"{o['kind']} {o['metadata'].get('namespace')}/{o['metadata']['name']}: {w}"
        for o in objs
        if team_queues.TEAM_LABEL in o["metadata"].get("labels", {})
        for w in words
        if w in json.dumps(o)
    ]


def _copy_k8s(tmp_path: Path) -> Path:
    target = tmp_path / "k8s"
    shutil.copytree(K8S_DIR, target, ignore=shutil.ignore_patterns("params.env"))
    return target


def _kubectl() -> str:
    found = shutil.which("kubectl") or str(ROOT / ".cache" / "components" / "bin" / "kubectl")
    if not Path(found).is_file():
        pytest.skip("no kubectl (on PATH or from `make components`) to run kustomize")
    return found


def _kustomized(kubectl: str, where: Path, teams_text: str) -> list[Obj]:
    work = _copy_k8s(where)
    (work / "teams.yaml").write_text(teams_text)
    shutil.copy(work / "params.env.example", work / "params.env")
    out = subprocess.run([kubectl, "kustomize", str(work)], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]
