"""The teams' shares of the cluster as Kueue objects, rendered from the teams declaration.

Why Kueue and not the control plane divides the TPUs: Kueue already decides which workload holds
which chips, and it can take chips back (preemption) where the control plane could only refuse to
launch. So each team gets a ClusterQueue whose nominal quota is its ``quota.chips``; idle chips of
one team are lent to another through their shared cohort; and a team that asks for its own chips
back gets them by Kueue preempting the borrower, whose run is then ``preempted`` and resumes from
its checkpoint on the next attempt.

Per team, in namespace ``rlpipe-<team>`` (``Team.k8s_namespace``):

* the Namespace, labelled with the team;
* ClusterQueue ``rlpipe-<team>`` in the cohort :data:`COHORT`, admitting only that namespace
  (``kubernetes.io/metadata.name``, a label the API server sets and no one can forge);
* LocalQueue ``user-queue``, the queue name every request already carries (``core.presets``), so the
  namespace, not the request, decides whose quota a workload takes;
* what the workloads and the pipeline need there, as ``infra/cluster/k8s`` gives namespace
  ``rlpipe``: ServiceAccount ``rlpipe-workload``, the ``hf-token`` secret sync and its
  ServiceAccount, and Role/RoleBinding ``rlpipe-pipeline`` for the stage and reconcile identities.
  The deployment's values stay placeholders (``WORKLOAD_GSA``, ``STAGE_GSA``, ``RECONCILE_GSA``,
  ``HF_TOKEN_SECRET_VERSION``), which the kustomization's replacements fill as they fill the base's:
  they select by kind and name, in every namespace.

Kueue v1beta2 fields, at Kueue v0.17.1 (what the tests' control plane runs; Cluster Toolkit
installs v0.17.x):

* ``cohortName``: apis/kueue/v1beta2/clusterqueue_types.go:68-81; ``namespaceSelector`` :99-105.
* ``nominalQuota`` / ``borrowingLimit`` / ``lendingLimit`` per flavor and resource: :232-275
  (null limits: borrow without limit, lend everything; docs site/content/en/docs/concepts/
  cluster_queue.md:59-64, :303-353, :355-407).
* ``preemption``: :434-532, docs cluster_queue.md:409-465 and concepts/preemption.md:73-117:

  - ``reclaimWithinCohort: Any``: a workload that fits its queue's nominal quota preempts workloads
    of queues in the cohort that are over theirs, "irrespective of priority" (:456-475). rlpipe's
    workloads carry no priority (all 0), so ``LowerPriority`` would never reclaim anything
    (pkg/scheduler/preemption/common/preemption_policy.go:32-50). Only workloads of queues over
    their nominal quota are candidates (pkg/scheduler/preemption/classical/
    hierarchical_preemption.go:198-205), the most recently admitted first (pkg/scheduler/
    preemption/common/ordering.go:72-74; preemption.md:86-90): a team within its share is never
    preempted by another.
  - ``borrowWithinCohort: Never``: a workload that must borrow never preempts anyone (:477-531):
    borrowing takes only what is idle.
  - ``withinClusterQueue: Never``: a team's own runs wait their turn, first in first out, as in the
    deployment's ClusterQueue ``rlpipe``.

  That is Kueue's classic preemption, the default (fair sharing is off unless Kueue's configuration
  sets ``fairSharing``: config/components/manager/controller_manager_config.yaml:67-68). Under fair
  sharing ``reclaimWithinCohort: Any`` still reclaims, by fair-sharing strategies (:461-470).

Why each team's ClusterQueue holds cpu-np quota of its own (and does not borrow it from a shared
queue, as flex-start's does): Kueue reclaims for a workload only if *all* its requests fit its
queue's own quota. The check is ``QuantitiesFitInQuota`` on the queue (pkg/cache/scheduler/
resource_node.go:223-233, called at pkg/scheduler/preemption/classical/hierarchical_preemption.go:
158); failing it, other queues' workloads are candidates only "without borrowing"
(hierarchical_preemption.go:100-106), and a workload that borrows any resource, cpu included, never
fits that way (preemption.go:599-610). A Pathways head with zero cpu quota of its own would borrow
cpu, so its team could never take its chips back (so the real Kueue does: tests/cluster/real_plane/
test_real_teams.py). The cpu-np pool (params.env ``CPU_NP_*``) is
therefore split between the teams in proportion to their chips; idle cpu is lent like idle chips.

Why a cohort of its own (:data:`COHORT`), not ``rlpipe``: the deployment's ClusterQueue ``rlpipe``
is in cohort ``rlpipe`` with the whole cluster as its quota (``TPU_CHIPS``, ``CPU_NP_*``). In the
same cohort it would lend all of it to the teams on top of their own shares, and Kueue would admit
twice the chips the cluster has. With teams declared every run is a team's and runs in the team's
namespace (a drop outside every team's folder is refused, ``core.teams``), so that queue, which
admits namespace ``rlpipe`` only, stays idle; its quota counts the same chips again, harmlessly while
nothing is submitted there. Flex-start (``rlpipe-flex``, namespace ``rlpipe`` only) is not offered
to teams.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import yaml

from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.teams import Team, Teams

Obj = dict[str, Any]

KUEUE = "kueue.x-k8s.io/v1beta2"
COHORT = "rlpipe-teams"
LOCAL_QUEUE = "user-queue"  # the queue every preset names (core.presets)
QUEUE_PREFIX = "rlpipe-"  # a team's ClusterQueue: rlpipe-<team>
TEAM_LABEL = "rlpipe.dev/team"
PART_OF = {"app.kubernetes.io/part-of": "rlpipe"}
TPU = "google.com/tpu"
# ClusterQueues infra/cluster/k8s already has (kueue.yaml, flex-start/): no team's may take a name.
DEPLOYMENT_QUEUES = frozenset({"rlpipe", "rlpipe-flex"})
# params.env keys (infra/cluster/k8s/params.env.example, terraform output k8s_params_env).
PARAM_TPU_CHIPS = "TPU_CHIPS"
PARAMS_CPU_NP = {
    "cpu": "CPU_NP_CPU",
    "memory": "CPU_NP_MEMORY",
    "ephemeral-storage": "CPU_NP_EPHEMERAL_STORAGE",
}
# Placeholders the kustomization's replacements fill (infra/cluster/k8s/kustomization.yaml).
WORKLOAD_GSA, STAGE_GSA, RECONCILE_GSA = "WORKLOAD_GSA", "STAGE_GSA", "RECONCILE_GSA"
HF_TOKEN_SECRET_VERSION = "HF_TOKEN_SECRET_VERSION"

HEADER = """\
# The teams' Kueue queues and namespaces (docs/teams.md, "Quota and fair sharing"), part of
# infra/cluster/k8s. Written by `rlpipe teams render`; do not edit: render it again from the
# teams declaration and params.env:
#   rlpipe teams render --teams TEAMS_FILE --params infra/cluster/k8s/params.env \\
#       --output infra/cluster/k8s/teams.yaml
"""
NO_TEAMS = "# No teams declared: nothing here, and the deployment is the one team of namespace rlpipe.\n"


@dataclass(frozen=True)
class Flavors:
    """The ResourceFlavors of infra/cluster/k8s a team's ClusterQueue gives quota in: the TPU
    flavors in the order Kueue tries them (kueue.yaml, kueue-spot.yaml), and the cpu-np flavor."""

    tpu: tuple[str, ...] = ("rlpipe-tpu-v6e-slice", "rlpipe-tpu-v6e-spot")
    cpu_np: str = "rlpipe-cpu-np"


@dataclass(frozen=True)
class Capacity:
    """What the teams share: the cluster's TPU chips per flavor and its cpu-np pool, as params.env
    gives them to the deployment's ClusterQueue ``rlpipe``."""

    tpu_chips: int
    cpu_np: Mapping[str, str]  # cpu, memory, ephemeral-storage → a Kubernetes quantity

    @classmethod
    def from_params(cls, params: Mapping[str, str], source: str = "params.env") -> Capacity:
        """From params.env's keys; raises ``RequestInvalid`` naming each missing or wrong one."""
        problems = [
            Problem(f"{source}.{key}", "is missing", "generate params.env from terraform (k8s_params_env)")
            for key in (PARAM_TPU_CHIPS, *PARAMS_CPU_NP.values())
            if not params.get(key, "").strip()
        ]
        chips = params.get(PARAM_TPU_CHIPS, "").strip()
        if chips and not chips.isdigit():
            problems.append(
                Problem(
                    f"{source}.{PARAM_TPU_CHIPS}",
                    f"{chips!r} is not a whole number",
                    "give the chips, e.g. 64",
                )
            )
        if problems:
            raise RequestInvalid(problems)
        return cls(int(chips), {r: params[k].strip() for r, k in PARAMS_CPU_NP.items()})


def render(
    teams: Teams, capacity: Capacity, role_rules: Sequence[Mapping[str, Any]], flavors: Flavors = Flavors()
) -> list[Obj]:
    """Every team's objects, team by team in declaration order. ``role_rules`` are the pipeline's
    Role rules (``rlpipe.cluster.role_rules()``, which the deployment's Role equals). Raises
    ``RequestInvalid`` for a declaration the cluster cannot hold, naming each problem."""
    _refuse(teams, capacity)
    owned = sum(_chips(t) for t in teams)
    out: list[Obj] = []
    for team in teams:
        share = Fraction(_chips(team), owned)
        out += _namespace_objects(team, role_rules)
        out += [_cluster_queue(team, capacity, share, flavors), _local_queue(team)]
    return out


def render_file(
    teams: Teams,
    capacity: Capacity | None,
    role_rules: Sequence[Mapping[str, Any]],
    flavors: Flavors = Flavors(),
) -> str:
    """The text of ``infra/cluster/k8s/teams.yaml``: the header, then the objects. No teams: the
    header only, which kustomize reads as no objects (the file the repository holds)."""
    if not teams.declared:
        return HEADER + NO_TEAMS
    if capacity is None:
        raise RequestInvalid(
            [Problem("params", "is needed to share the cluster", "pass infra/cluster/k8s/params.env")]
        )
    objects = render(teams, capacity, role_rules, flavors)
    owned = sum(_chips(t) for t in teams)
    summary = [
        f"# Teams' TPU chips: {owned} of the cluster's {capacity.tpu_chips} per TPU flavor "
        f"({', '.join(f'{t.name} {_chips(t)}' for t in teams)}); cpu-np split in that proportion.\n"
    ]
    return HEADER + "".join(summary) + yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False)


def unserved_queues(teams: Teams, presets_queues: Sequence[str]) -> list[str]:
    """Queue names a team may submit to (its ``queues``, else the presets') that have no LocalQueue
    in its namespace: requests naming them are never admitted (Kueue finds no such LocalQueue) and
    end ``capacity`` after ``timeouts.queued``. One line per team."""
    lines = []
    for team in teams:
        allowed = team.queues if team.queues is not None else tuple(presets_queues)
        missing = sorted(set(allowed) - {LOCAL_QUEUE})
        if missing:
            lines.append(
                f"team {team.name} may name queue {', '.join(missing)}, which has no LocalQueue in "
                f"{team.k8s_namespace} (only {LOCAL_QUEUE}): such requests wait until timeouts.queued; "
                f"set teams.{team.name}.queues to [{LOCAL_QUEUE}]"
            )
    return lines


# ---- refusals -------------------------------------------------------------------------------------


def _refuse(teams: Teams, capacity: Capacity) -> None:
    problems: list[Problem] = []
    for team in teams:
        where = f"teams.{team.name}"
        if cluster_queue_name(team) in DEPLOYMENT_QUEUES:
            problems.append(
                Problem(
                    where,
                    f"its ClusterQueue would be {cluster_queue_name(team)}, which the deployment has",
                    "name the team otherwise",
                )
            )
    for resource in PARAMS_CPU_NP:
        value = capacity.cpu_np.get(resource, "")
        if quantity(value) is None:
            problems.append(
                Problem(
                    PARAMS_CPU_NP[resource],
                    f"{value!r} is not a quantity",
                    f"give {resource} as 180 or 640Gi",
                )
            )
    owned = sum(_chips(t) for t in teams)
    if owned > capacity.tpu_chips:
        problems.append(
            Problem(
                "teams",
                f"the teams' quota.chips add up to {owned}, more than the cluster's {capacity.tpu_chips} "
                f"({PARAM_TPU_CHIPS}): Kueue would admit runs no slice can hold",
                "lower the teams' chips, or give the cluster more",
            )
        )
    if owned == 0:
        problems.append(
            Problem("teams", "no team has quota.chips: Kueue would admit no TPU run", "give a team chips")
        )
    if problems:
        raise RequestInvalid(problems)


# ---- objects --------------------------------------------------------------------------------------


def cluster_queue_name(team: Team) -> str:
    return f"{QUEUE_PREFIX}{team.name}"


def _labels(team: Team) -> dict[str, str]:
    return {**PART_OF, TEAM_LABEL: team.name}


def _meta(team: Team, name: str, *, namespaced: bool = True) -> Obj:
    meta: Obj = {"name": name}
    if namespaced:
        meta["namespace"] = team.k8s_namespace
    meta["labels"] = _labels(team)
    return meta


def _chips(team: Team) -> int:
    """A team without a quota owns no chips: it runs on what the others leave idle, and gives it
    back when they ask."""
    return team.quota.chips if team.quota else 0


def _namespace_objects(team: Team, role_rules: Sequence[Mapping[str, Any]]) -> list[Obj]:
    """What infra/cluster/k8s gives namespace rlpipe (namespace.yaml, serviceaccounts.yaml,
    rbac.yaml, secretsync.yaml), in the team's namespace."""
    ns = team.k8s_namespace
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(team, ns, namespaced=False)},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                **_meta(team, "rlpipe-workload"),
                "annotations": {"iam.gke.io/gcp-service-account": WORKLOAD_GSA},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(team, "rlpipe-secret-sync"),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(team, "rlpipe-pipeline"),
            "rules": [dict(rule) for rule in role_rules],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(team, "rlpipe-pipeline"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rlpipe-pipeline"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": who}
                for who in (STAGE_GSA, RECONCILE_GSA)
            ],
        },
        {
            "apiVersion": "secrets-store.csi.x-k8s.io/v1",
            "kind": "SecretProviderClass",
            "metadata": _meta(team, "rlpipe-hf-token"),
            "spec": {
                "provider": "gke",
                "parameters": {"secrets": f'- resourceName: "{HF_TOKEN_SECRET_VERSION}"\n  path: "token"\n'},
            },
        },
        {
            "apiVersion": "secret-sync.gke.io/v1",
            "kind": "SecretSync",
            "metadata": _meta(team, "hf-token"),
            "spec": {
                "serviceAccountName": "rlpipe-secret-sync",
                "secretProviderClassName": "rlpipe-hf-token",
                "secretObject": {
                    "type": "Opaque",
                    "labels": dict(PART_OF),
                    "data": [{"sourcePath": "token", "targetKey": "token"}],
                },
            },
        },
    ]


def _cluster_queue(team: Team, capacity: Capacity, share: Fraction, flavors: Flavors) -> Obj:
    tpu: Obj = {"name": TPU, "nominalQuota": _chips(team)}
    if team.quota and team.quota.borrowing_limit is not None:
        tpu["borrowingLimit"] = team.quota.borrowing_limit
    if team.quota and team.quota.lending_limit is not None:
        tpu["lendingLimit"] = team.quota.lending_limit
    cpu_np = [
        {"name": resource, "nominalQuota": _share_of(resource, capacity.cpu_np[resource], share)}
        for resource in PARAMS_CPU_NP
    ]
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": _meta(team, cluster_queue_name(team), namespaced=False),
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.k8s_namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "Never"},
                "withinClusterQueue": "Never",
            },
            "resourceGroups": [
                {
                    "coveredResources": [TPU],
                    "flavors": [{"name": f, "resources": [dict(tpu)]} for f in flavors.tpu],
                },
                {
                    "coveredResources": list(PARAMS_CPU_NP),
                    "flavors": [{"name": flavors.cpu_np, "resources": cpu_np}],
                },
            ],
        },
    }


def _local_queue(team: Team) -> Obj:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": _meta(team, LOCAL_QUEUE),
        "spec": {"clusterQueue": cluster_queue_name(team)},
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the secret sync's ``secrets``) as block literals, as the base writes them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


# ---- quantities -------------------------------------------------------------------------------------

# Kubernetes' quantity suffixes (k8s.io/apimachinery pkg/api/resource/quantity.go: binarySI,
# decimalSI and decimal exponents).
_SUFFIXES: dict[str, Fraction] = {
    **{s: Fraction(2) ** (10 * (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Fraction(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6))},
    **{s: Fraction(10) ** e for s, e in (("G", 9), ("T", 12), ("P", 15), ("E", 18))},
}
_QUANTITY = re.compile(
    r"^(?P<number>\d+(\.\d*)?|\.\d+)(?:(?P<suffix>[KMGTPE]i|[numkMGTPE]?)|[eE](?P<exp>[+-]?\d+))$"
)
MI = 2**20


def quantity(text: str) -> Fraction | None:
    """A non-negative Kubernetes quantity, exactly (cores or bytes); None if it is not one."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        return None
    number = Fraction(match["number"])
    if match["exp"] is not None:
        return number * Fraction(10) ** int(match["exp"])
    return number * _SUFFIXES[match["suffix"] or ""]


def _share_of(resource: str, pool: str, share: Fraction) -> str:
    """``share`` of ``pool``, rounded down so the teams' shares never add up to more than it: cpu
    in millicores, memory and disk in MiB (written as Gi when whole)."""
    total = quantity(pool)
    assert total is not None  # _refuse checked it
    if resource == "cpu":
        milli = math.floor(total * share * 1000)
        return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    mib = math.floor(total * share / MI)
    if mib == 0:
        return "0"
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"
