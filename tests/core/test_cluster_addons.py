"""Cluster side of the provisioning modes (docs/provisioning.md): the Kueue objects of
infra/cluster/k8s (spot flavor) and infra/cluster/k8s/flex-start (queued provisioning), and the
Spot / flex-start TPU pools of infra/cluster/apply-blueprint-changes.sh.

Static: the YAML is parsed, field names are checked against Kueue's v1beta2 API (tests/schemas
where a schema exists; the fields of AdmissionCheck and ProvisioningRequestConfig below), and
Kueue's flavor assignment is replayed for the pipeline's provisioning goldens. `kubectl kustomize`
is used when kubectl is on PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "infra" / "cluster" / "k8s"
FLEX_DIR = K8S_DIR / "flex-start"
SCHEMAS = ROOT / "tests" / "schemas"
SCRIPT = ROOT / "infra" / "cluster" / "apply-blueprint-changes.sh"
CHECK_ADDONS = ROOT / "infra" / "cluster" / "check-addons.sh"
BLUEPRINT = ROOT / "tests" / "fixtures" / "gke-tpu-v6e-advanced.yaml"
GOLDEN_MODES = ROOT / "tests" / "golden" / "provisioning"

KUEUE = "kueue.x-k8s.io/v1beta2"
TPU = "google.com/tpu"
ACCELERATOR = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
QUEUED_TAINT = {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"}

# Spec fields of the two kinds tests/schemas has no schema for, from Kueue v0.17.3:
# apis/kueue/v1beta2/admissioncheck_types.go:47-82 and provisioningrequestconfig_types.go:36-158.
ADMISSION_CHECK_SPEC = {"controllerName", "parameters"}
ADMISSION_CHECK_PARAMETERS = {"apiGroup", "kind", "name"}
PROVISIONING_REQUEST_CONFIG_SPEC = {
    "provisioningClassName",
    "parameters",
    "managedResources",
    "retryStrategy",
    "podSetUpdates",
    "podSetMergePolicy",
}
RETRY_STRATEGY = {"backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kustomization(directory: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((directory / "kustomization.yaml").read_text()))


def _objects(directory: Path) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for name in _kustomization(directory)["resources"]:
        if (directory / name).is_file():
            objs += _docs(directory / name)
    return objs


def _one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind}/{name}, found {len(hits)}"
    return hits[0]


def _params(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return _objects(K8S_DIR)


@pytest.fixture(scope="module")
def flex() -> list[dict[str, Any]]:
    return _objects(FLEX_DIR)


# ------------------------------------------------------------------------------ spot


def test_spot_flavor(base: list[dict[str, Any]]) -> None:
    spot = _one(base, "ResourceFlavor", "rlpipe-tpu-v6e-spot")
    assert spot["apiVersion"] == KUEUE
    assert spot["spec"]["nodeLabels"] == {**ACCELERATOR, "cloud.google.com/gke-spot": "true"}
    assert spot["spec"]["nodeTaints"] == [SPOT_TAINT]
    # A matching toleration on the flavor would switch the taint check off
    # (resourceflavor_types.go:72-73) and let every TPU workload spill onto spot quota.
    assert "tolerations" not in spot["spec"]


def test_spot_flavor_is_second_in_the_tpu_group(base: list[dict[str, Any]]) -> None:
    cq = _one(base, "ClusterQueue", "rlpipe")
    (tpu_group,) = [g for g in cq["spec"]["resourceGroups"] if TPU in g["coveredResources"]]
    assert [f["name"] for f in tpu_group["flavors"]] == ["rlpipe-tpu-v6e-slice", "rlpipe-tpu-v6e-spot"]
    for flavor in tpu_group["flavors"]:
        assert flavor["resources"] == [{"name": TPU, "nominalQuota": "TPU_CHIPS"}]
    assert cq["spec"]["cohortName"] == "rlpipe"
    # Both quotas are substituted from params.env (kustomization replacements).
    kustomization = _kustomization(K8S_DIR)
    paths = [
        p
        for r in kustomization["replacements"]
        if r["source"]["fieldPath"] == "data.TPU_CHIPS"
        for t in r["targets"]
        if t["select"] == {"kind": "ClusterQueue", "name": "rlpipe"}
        for p in t["fieldPaths"]
    ]
    group = cq["spec"]["resourceGroups"].index(tpu_group)
    assert sorted(paths) == [
        f"spec.resourceGroups.{group}.flavors.{i}.resources.[name={TPU}].nominalQuota" for i in (0, 1)
    ]


# ------------------------------------------------------------------------------ flex-start


def test_flex_start_objects(flex: list[dict[str, Any]], base: list[dict[str, Any]]) -> None:
    for obj in flex:
        assert obj["apiVersion"] == KUEUE, f"{obj['kind']}/{obj['metadata']['name']}"
    assert sorted(o["kind"] for o in flex) == [
        "AdmissionCheck",
        "ClusterQueue",
        "LocalQueue",
        "ProvisioningRequestConfig",
        "ResourceFlavor",
    ]
    (flavor,) = [o for o in flex if o["kind"] == "ResourceFlavor"]
    assert flavor["spec"]["nodeLabels"] == {**ACCELERATOR, "cloud.google.com/gke-queued": "true"}
    assert flavor["spec"]["nodeTaints"] == [QUEUED_TAINT]
    assert "tolerations" not in flavor["spec"]

    (prc,) = [o for o in flex if o["kind"] == "ProvisioningRequestConfig"]
    assert set(prc["spec"]) <= PROVISIONING_REQUEST_CONFIG_SPEC
    assert prc["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    assert prc["spec"]["managedResources"] == [TPU]
    retry = prc["spec"]["retryStrategy"]
    assert set(retry) <= RETRY_STRATEGY
    # docs/provisioning.md states these numbers (Kueue's defaults, provisioningrequestconfig_types.go:67-77).
    assert retry == {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}

    (check,) = [o for o in flex if o["kind"] == "AdmissionCheck"]
    assert set(check["spec"]) <= ADMISSION_CHECK_SPEC
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    params = check["spec"]["parameters"]
    assert set(params) == ADMISSION_CHECK_PARAMETERS
    assert params == {
        "apiGroup": "kueue.x-k8s.io",
        "kind": "ProvisioningRequestConfig",
        "name": prc["metadata"]["name"],
    }

    (lq,) = [o for o in flex if o["kind"] == "LocalQueue"]
    assert (lq["metadata"]["name"], lq["metadata"]["namespace"]) == ("flex-queue", "rlpipe")
    cq = _one(flex, "ClusterQueue", lq["spec"]["clusterQueue"])
    assert cq["metadata"]["name"] == "rlpipe-flex"
    assert cq["spec"]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "rlpipe"}
    assert "admissionChecks" not in cq["spec"], "v1beta2 has only admissionChecksStrategy"
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": check["metadata"]["name"], "onFlavors": [flavor["metadata"]["name"]]}
    ]
    groups = {tuple(g["coveredResources"]): g["flavors"] for g in cq["spec"]["resourceGroups"]}
    assert groups[(TPU,)] == [
        {"name": flavor["metadata"]["name"], "resources": [{"name": TPU, "nominalQuota": "FLEX_TPU_CHIPS"}]}
    ]
    # The Pathways head's cpu/memory: rlpipe's cpu-np flavor, no quota of its own, borrowed from
    # ClusterQueue rlpipe through the shared cohort.
    assert groups[("cpu", "memory")] == [
        {
            "name": "rlpipe-cpu-np",
            "resources": [{"name": "cpu", "nominalQuota": 0}, {"name": "memory", "nominalQuota": 0}],
        }
    ]
    _one(base, "ResourceFlavor", "rlpipe-cpu-np")
    assert cq["spec"]["cohortName"] == _one(base, "ClusterQueue", "rlpipe")["spec"]["cohortName"]
    for group in cq["spec"]["resourceGroups"]:  # the CRD's CEL rule (clusterqueue_types.go ResourceGroup)
        for f in group["flavors"]:
            assert [r["name"] for r in f["resources"]] == group["coveredResources"]


def test_flex_queue_is_the_pipelines(flex: list[dict[str, Any]]) -> None:
    from rlpipe.core import presets

    queue = getattr(presets, "FLEX_START_QUEUE", None)
    if queue is None:
        pytest.skip("rlpipe.core.presets has no FLEX_START_QUEUE yet")
    (lq,) = [o for o in flex if o["kind"] == "LocalQueue"]
    assert lq["metadata"]["name"] == queue


def test_new_objects_validate_against_the_kueue_schemas(
    base: list[dict[str, Any]], flex: list[dict[str, Any]]
) -> None:
    import jsonschema

    new = [_one(base, "ResourceFlavor", "rlpipe-tpu-v6e-spot"), _one(base, "ClusterQueue", "rlpipe")]
    new += [o for o in flex if o["kind"] in {"ResourceFlavor", "ClusterQueue", "LocalQueue"}]
    placeholders = {**_params(K8S_DIR / "params.env.example"), **_params(FLEX_DIR / "params.env.example")}
    for obj in new:
        obj = json.loads(json.dumps(obj))
        for group in obj.get("spec", {}).get("resourceGroups", []):
            for flavor in group["flavors"]:
                for r in flavor["resources"]:
                    r["nominalQuota"] = placeholders.get(str(r["nominalQuota"]), r["nominalQuota"])
        path = SCHEMAS / f"kueue.x-k8s.io_v1beta2_{obj['kind'].lower()}.json"
        errors = list(jsonschema.Draft202012Validator(json.loads(path.read_text())).iter_errors(obj))
        assert not errors, f"{obj['kind']}/{obj['metadata']['name']}: " + "; ".join(e.message for e in errors)


# ------------------------------------------------------------------------------ kustomizations


def test_kustomizations_list_every_file() -> None:
    for directory in (K8S_DIR, FLEX_DIR):
        listed = set(_kustomization(directory)["resources"])
        files = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
        assert files == listed, f"{directory.relative_to(ROOT)}: files {files} vs resources {listed}"
    assert "kueue-spot.yaml" in _kustomization(K8S_DIR)["resources"]
    assert _kustomization(FLEX_DIR)["resources"] == ["kueue-flex-start.yaml"]


def test_flex_start_params_match_its_placeholders() -> None:
    params = _params(FLEX_DIR / "params.env.example")
    kustomization = _kustomization(FLEX_DIR)
    (generator,) = kustomization["configMapGenerator"]
    assert generator["envs"] == ["params.env"]
    assert generator["options"]["annotations"] == {"config.kubernetes.io/local-config": "true"}
    used = {r["source"]["fieldPath"].removeprefix("data.") for r in kustomization["replacements"]}
    assert used == set(params) == {"FLEX_TPU_CHIPS"}
    assert int(params["FLEX_TPU_CHIPS"]) % 4 == 0, "ct6e-standard-4t nodes have 4 chips each"
    # The base's keys are terraform's k8s_params_env output (tests/repo/test_infra.py); flex-start's
    # own key must not collide with them.
    assert not set(params) & set(_params(K8S_DIR / "params.env.example"))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH (kubectl kustomize renders the kustomizations)")
    work = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S_DIR, work, ignore=shutil.ignore_patterns("params.env"))
    shutil.copy(K8S_DIR / "params.env.example", work / "params.env")
    shutil.copy(FLEX_DIR / "params.env.example", work / "flex-start" / "params.env")
    out = {}
    for name, directory in (("base", work), ("flex", work / "flex-start")):
        proc = subprocess.run(
            [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        out[name] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return out


def test_kustomize_renders_the_quotas(rendered: dict[str, list[dict[str, Any]]]) -> None:
    chips = _params(K8S_DIR / "params.env.example")["TPU_CHIPS"]
    flex_chips = _params(FLEX_DIR / "params.env.example")["FLEX_TPU_CHIPS"]
    cq = _one(rendered["base"], "ClusterQueue", "rlpipe")
    (tpu_group,) = [g for g in cq["spec"]["resourceGroups"] if TPU in g["coveredResources"]]
    assert [str(f["resources"][0]["nominalQuota"]) for f in tpu_group["flavors"]] == [chips, chips]
    flex_cq = _one(rendered["flex"], "ClusterQueue", "rlpipe-flex")
    assert (
        str(flex_cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]) == flex_chips
    )
    text = yaml.safe_dump_all(rendered["flex"])
    assert "FLEX_TPU_CHIPS" not in text
    assert not [o for o in rendered["flex"] if o["kind"] == "ConfigMap"], (
        "the params ConfigMap is local-config"
    )
    assert len(rendered["flex"]) == len(_objects(FLEX_DIR))
    assert {o["metadata"]["name"] for o in rendered["base"]}.isdisjoint(
        {o["metadata"]["name"] for o in rendered["flex"] if o["kind"] == "ClusterQueue"}
    )


# ------------------------------------------------------------------------------ Kueue's flavor assignment


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _eligible(pod: dict[str, Any], group: dict[str, Any], flavors: dict[str, dict[str, Any]]) -> list[str]:
    """Flavors of a resource group Kueue may assign to a pod set (v0.17.3 flavorassigner.go:
    checkFlavorForPodSets and flavorSelector): nodeTaints tolerated by the pod's and the flavor's
    tolerations, and nodeLabels matching the pod's nodeSelector restricted to the label keys of
    the group's flavors (pkg/cache/scheduler/clusterqueue.go:354-382)."""
    keys = {k for f in group["flavors"] for k in flavors[f["name"]]["spec"].get("nodeLabels", {})}
    selector = {k: v for k, v in pod.get("nodeSelector", {}).items() if k in keys}
    out = []
    for f in group["flavors"]:
        spec = flavors[f["name"]]["spec"]
        tolerations = [*pod.get("tolerations", []), *spec.get("tolerations", [])]
        if not all(_tolerates(tolerations, t) for t in spec.get("nodeTaints", [])):
            continue
        labels = spec.get("nodeLabels", {})
        if all(labels.get(k) == v for k, v in selector.items()):
            out.append(f["name"])
    return out


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    return []


def _requests(pod: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for c in [*pod["containers"], *pod.get("initContainers", [])]:
        res = c.get("resources", {})
        names |= set(res.get("limits", {})) | set(res.get("requests", {}))
    return names


EXPECTED_TPU_FLAVOR = {
    "reservation": "rlpipe-tpu-v6e-slice",
    "on-demand": "rlpipe-tpu-v6e-slice",
    "spot": "rlpipe-tpu-v6e-spot",
    "flex-start": "rlpipe-tpu-v6e-flex",
}


@pytest.mark.parametrize("mode", sorted(EXPECTED_TPU_FLAVOR))
def test_each_modes_golden_gets_exactly_its_flavor(
    mode: str, base: list[dict[str, Any]], flex: list[dict[str, Any]]
) -> None:
    """The pipeline's rendering of each mode (tests/golden/provisioning) against these objects:
    its LocalQueue exists, its TPU workers can be given exactly one flavor, the mode's, and its
    other pods fit cpu-np."""
    goldens = sorted((GOLDEN_MODES / mode).glob("*.yaml")) if (GOLDEN_MODES / mode).is_dir() else []
    if not goldens:
        pytest.skip(f"no golden for {mode} under tests/golden/provisioning")
    objs = base + flex
    flavors = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ResourceFlavor"}
    local_queues = {o["metadata"]["name"]: o for o in objs if o["kind"] == "LocalQueue"}
    queues = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterQueue"}
    seen_tpu = False
    for path in goldens:
        for obj in _docs(path):
            pods = _pod_specs(obj)
            if not pods:
                continue
            lq = local_queues[obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]]
            cq = queues[lq["spec"]["clusterQueue"]]
            for pod in pods:
                for resource in _requests(pod):
                    (group,) = [g for g in cq["spec"]["resourceGroups"] if resource in g["coveredResources"]]
                    eligible = _eligible(pod, group, flavors)
                    if resource == TPU:
                        seen_tpu = True
                        assert eligible == [EXPECTED_TPU_FLAVOR[mode]], f"{path.name}: {eligible}"
                    else:
                        assert eligible == ["rlpipe-cpu-np"], f"{path.name} {resource}: {eligible}"
            if mode == "flex-start" and obj["kind"] == "JobSet":
                rules = cq["spec"]["admissionChecksStrategy"]["admissionChecks"]
                assert any(EXPECTED_TPU_FLAVOR[mode] in r["onFlavors"] for r in rules)
    assert seen_tpu, f"{mode}: no TPU pod in the goldens"


# ------------------------------------------------------------------------------ blueprint pools


def _run(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHON": sys.executable, **env},
    )


def _modules(text: str) -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(text)
    return {m["id"]: m for g in doc["deployment_groups"] for m in g["modules"]}


@pytest.fixture
def blueprint(tmp_path: Path) -> Path:
    path = tmp_path / "gke-tpu-v6e-advanced.yaml"
    shutil.copy(BLUEPRINT, path)
    return path


def test_no_extra_pools_by_default(blueprint: Path) -> None:
    proc = _run(blueprint)
    assert proc.returncode == 0, proc.stderr
    modules = _modules(blueprint.read_text())
    assert "cpu-np" in modules
    assert not {"tpu-spot-pool", "tpu-flex-pool"} & set(modules)
    assert "spot_pool_max_nodes" not in blueprint.read_text()


def test_spot_and_flex_pools(blueprint: Path) -> None:
    proc = _run(blueprint, SPOT_POOL="1", FLEX_POOL="1")
    assert proc.returncode == 0, proc.stderr
    text = blueprint.read_text()
    doc = yaml.safe_load(text)
    modules = _modules(text)
    tpu = modules["gke-tpu-v6e-pool"]
    order = [m["id"] for m in doc["deployment_groups"][0]["modules"]]
    at = order.index("gke-tpu-v6e-pool")
    assert order[at : at + 4] == ["gke-tpu-v6e-pool", "cpu-np", "tpu-spot-pool", "tpu-flex-pool"]
    assert doc["vars"]["spot_pool_max_nodes"] == 8 and doc["vars"]["flex_pool_max_nodes"] == 8

    copied = {"num_slices", "machine_type", "zones", "disk_type", "disk_size_gb", "placement_policy"}
    copied |= {"additional_networks", "auto_upgrade"}
    for module_id in ("tpu-spot-pool", "tpu-flex-pool"):
        module = modules[module_id]
        assert module["source"] == "modules/compute/gke-node-pool"
        assert module["use"] == tpu["use"]
        assert "outputs" not in module
        settings = module["settings"]
        for key in copied:
            assert settings[key] == tpu["settings"][key], (module_id, key)
        # The module refuses spot and flex-start with a reservation (main.tf:424-437).
        assert "reservation_affinity" not in settings
        assert settings["autoscaling_min_node_count"] == 0
        assert "static_node_count" not in settings and "autoscaling_total_min_nodes" not in settings
    # The TPU pool itself is unchanged.
    assert tpu["settings"]["reservation_affinity"]["consume_reservation_type"] == "SPECIFIC_RESERVATION"

    spot = modules["tpu-spot-pool"]["settings"]
    assert spot["name"] == "rlpipe-tpu-spot"
    assert spot["spot"] is True
    assert spot["autoscaling_max_node_count"] == "$(vars.spot_pool_max_nodes)"
    assert not {"enable_flex_start", "enable_queued_provisioning"} & set(spot)
    # The pool's taint is the one the Kueue spot flavor declares (provider spelling NO_SCHEDULE).
    (flavor_taint,) = _one(_objects(K8S_DIR), "ResourceFlavor", "rlpipe-tpu-v6e-spot")["spec"]["nodeTaints"]
    assert spot["taints"] == [{**flavor_taint, "effect": "NO_SCHEDULE"}]

    flex = modules["tpu-flex-pool"]["settings"]
    assert flex["name"] == "rlpipe-tpu-flex"
    assert flex["enable_flex_start"] is True and flex["enable_queued_provisioning"] is True
    assert flex["auto_repair"] is False, "the module requires auto_repair: false for flex-start"
    assert flex["autoscaling_max_node_count"] == "$(vars.flex_pool_max_nodes)"
    assert "spot" not in flex and "taints" not in flex

    # Idempotent; the sizes are settings.
    assert _run(blueprint, SPOT_POOL="1", FLEX_POOL="1").returncode == 0
    assert blueprint.read_text() == text
    assert _run(blueprint, SPOT_POOL="1", FLEX_POOL="1", FLEX_POOL_MAX_NODES="16").returncode == 0
    again = yaml.safe_load(blueprint.read_text())
    assert again["vars"]["flex_pool_max_nodes"] == 16 and again["vars"]["spot_pool_max_nodes"] == 8
    assert blueprint.read_text().count("- id: tpu-flex-pool") == 1


def test_each_pool_on_its_own(blueprint: Path, tmp_path: Path) -> None:
    other = tmp_path / "flex.yaml"
    shutil.copy(blueprint, other)
    assert _run(blueprint, SPOT_POOL="1").returncode == 0
    modules = _modules(blueprint.read_text())
    assert "tpu-spot-pool" in modules and "tpu-flex-pool" not in modules
    assert _run(other, FLEX_POOL="1").returncode == 0
    modules = _modules(other.read_text())
    assert "tpu-flex-pool" in modules and "tpu-spot-pool" not in modules


def test_flex_pool_matches_the_flex_quota_example() -> None:
    """FLEX_TPU_CHIPS' example is one slice of FLEX_POOL_MAX_NODES' default (4 chips a node)."""
    default = re.search(r'FLEX_POOL_MAX_NODES="\$\{FLEX_POOL_MAX_NODES:-(\d+)\}"', SCRIPT.read_text())
    assert default
    assert int(_params(FLEX_DIR / "params.env.example")["FLEX_TPU_CHIPS"]) == 4 * int(default.group(1))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SPOT_POOL": "yes"}, "SPOT_POOL"),
        ({"FLEX_POOL": "1", "FLEX_POOL_MAX_NODES": "0"}, "FLEX_POOL_MAX_NODES"),
    ],
)
def test_invalid_settings_are_refused(blueprint: Path, env: dict[str, str], message: str) -> None:
    original = blueprint.read_text()
    proc = _run(blueprint, **env)
    assert proc.returncode != 0 and message in proc.stderr
    assert blueprint.read_text() == original


def test_pools_refuse_an_ambiguous_tpu_pool(blueprint: Path) -> None:
    """Two TPU pools: which one to copy is unclear, so nothing is written."""
    text = blueprint.read_text()
    start = text.index("  - id: gke-tpu-v6e-pool\n")
    end = text.index("    outputs: [instructions]\n", start) + len("    outputs: [instructions]\n")
    pool = text[start:end]
    blueprint.write_text(text[:end] + "\n" + pool.replace("gke-tpu-v6e-pool", "second-pool") + text[end:])
    assert _run(blueprint).returncode == 0  # without the pools the second TPU pool is no problem
    changed = blueprint.read_text()
    proc = _run(blueprint, SPOT_POOL="1")
    assert proc.returncode != 0 and "exactly one TPU gke-node-pool module" in proc.stderr
    assert blueprint.read_text() == changed


def test_pools_need_the_tpu_pools_settings(blueprint: Path) -> None:
    text = blueprint.read_text()
    start = text.index("  - id: gke-tpu-v6e-pool")
    broken = text[:start] + text[start:].replace("    settings:\n", "    config:\n", 1)
    blueprint.write_text(broken)
    proc = _run(blueprint, FLEX_POOL="1")
    assert proc.returncode != 0 and "settings" in proc.stderr
    assert blueprint.read_text() == broken


# ------------------------------------------------------------------------------ check-addons.sh


def test_check_addons_names_the_objects(base: list[dict[str, Any]], flex: list[dict[str, Any]]) -> None:
    script = CHECK_ADDONS.read_text()
    for kind, name in (
        ("ResourceFlavor", "rlpipe-tpu-v6e-spot"),
        ("ClusterQueue", "rlpipe-flex"),
        ("AdmissionCheck", "rlpipe-flex-prov"),
        ("LocalQueue", "flex-queue"),
    ):
        _one(base + flex, kind, name)
        assert name in script, f"check-addons.sh does not check {kind}/{name}"
    assert "provisioningrequests.autoscaling.x-k8s.io" in script
