"""Teams' TPU quota and fair sharing, by the real Kueue v0.17.1 on the real control plane.

Two teams from one declaration: ``a`` owns 16 chips and may borrow 16 more, ``b`` owns 32 (of the
plane's 64, params ``TPU_CHIPS``). Their objects are what ``rlpipe teams render`` writes into
infra/cluster/k8s/teams.yaml, put through ``kubectl kustomize`` with the deploy's params as a deploy
does (the placeholders filled by the kustomization's replacements). The workloads are rlpipe's own
train JobSets (``rlpipe.core.manifests.render`` with the team's namespace): a's on v6e-16 slices
(4 workers × 4 chips), b's on a v6e-32. They are created, read and deleted as the pipeline does,
as the stage identity, with the Role the render grants in each team's namespace; the pod player
runs their pods on the plane's played nodes.

Where the double (``rlpipe.local.simulator``) plays Kueue, its verdict is compared with the real
one: a workload its queue has no quota for (fault ``no-quota``), and a preemption (``evict@N:
preempted``). The double plays one ClusterQueue and no cohort: it has no borrowing, no borrowing
limit and no reclaim, so those verdicts are the real Kueue's alone (docs/teams.md, "Quota and fair
sharing").
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cluster import role_rules
from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.core import manifests, request, sweep
from rlpipe.core.failures import FailureClass
from rlpipe.core.manifests import team_queues
from rlpipe.core.teams import parse_teams
from rlpipe.local.controlplane import ControlPlane
from rlpipe.local.controlplane.kubelet import Outcome, PodPlayer
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_slice
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator
from tests.conftest import Buckets, minimal_request
from tests.harness.conformance import settled, verdict_on_double
from tests.harness.patience import ceiling, wait_until
from tests.harness.real_cluster import K8S_DIR, PARAMS, deploy_documents
from tests.local.test_simulator import NS, kube, render, simulate  # noqa: F401

STAGE_USER = PARAMS["STAGE_GSA"]
TEAMS = {
    "a": {"quota": {"chips": 16, "borrowing_limit": 16}, "queues": ["user-queue"]},
    "b": {"quota": {"chips": 32}, "queues": ["user-queue"]},
}
NS_A, NS_B = "rlpipe-a", "rlpipe-b"
CQ_A, CQ_B = "rlpipe-a", "rlpipe-b"
V6E_16 = {"tpu": {"type": "v6e-16", "topology": "4x4"}}  # 16 chips: a's quota, and what a borrows
TPU = "google.com/tpu"
SLICE_FLAVOR = "rlpipe-tpu-v6e-slice"
WORKLOADS = "workloads.kueue.x-k8s.io"
QUOTA_WORDS = "insufficient unused quota for google.com/tpu in flavor rlpipe-tpu-v6e-slice"
Obj = dict[str, Any]
# How long a reclaim that should not happen is watched for: five times what the reclaim took when it
# does happen (about a second, measured on this plane).
NEVER_SECONDS = 5.0


# ---- the teams' objects, and the nodes their runs need ---------------------------------------------


def team_documents(tmp: Path) -> list[Obj]:
    """infra/cluster/k8s with the rendered teams.yaml, as ``kubectl kustomize`` gives it with the
    deploy's params: the teams' objects only (the base is deployed already)."""
    work = tmp / "k8s"
    shutil.copytree(K8S_DIR, work, ignore=shutil.ignore_patterns("params.env"))
    capacity = team_queues.Capacity.from_params(PARAMS)
    (work / "teams.yaml").write_text(team_queues.render_file(parse_teams(TEAMS), capacity, role_rules()))
    return [
        d for d in deploy_documents(work, PARAMS) if team_queues.TEAM_LABEL in d["metadata"].get("labels", {})
    ]


@pytest.fixture(scope="module")
def teams(real_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The teams' objects applied until both ClusterQueues are Active, and removed afterwards: the
    plane is shared with the worker's other files, whose workloads stay in namespace rlpipe."""
    documents = team_documents(tmp_path_factory.mktemp("teams"))
    real_cluster.apply(documents)
    try:
        real_cluster.kubectl(
            "wait",
            "--for=condition=Active",
            f"clusterqueues.kueue.x-k8s.io/{CQ_A}",
            f"clusterqueues.kueue.x-k8s.io/{CQ_B}",
            f"--timeout={ceiling(5):.0f}s",
        )
        yield real_cluster
    finally:
        real_cluster.kubectl(
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(documents, sort_keys=False),
        )


@pytest.fixture(scope="module")
def team_nodes(real_cluster: ControlPlane) -> set[str]:
    """cpu-np for the Pathways heads, two v6e-16 slices for a's runs, a v6e-32 slice for b's."""
    return real_cluster.add_nodes(
        [
            *cpu_pool(),
            *tpu_slice("4x4", "tpu-v6e-4x4-a"),
            *tpu_slice("4x4", "tpu-v6e-4x4-b"),
            *tpu_slice("4x8"),
        ]
    )


@pytest.fixture
def running(teams: ControlPlane, team_nodes: set[str]) -> Iterator[PodPlayer]:
    """Pods run until deleted; afterwards the player checks it met no error."""
    player = PodPlayer(teams.kubeconfig(), team_nodes, lambda pod: Outcome(exit_code=None)).start()
    yield player
    player.stop()
    assert not [e for e in player.errors if "listing pods" not in e], list(player.errors)


# ---- launching and reading, as the pipeline does ---------------------------------------------------


def client_for(plane: ControlPlane, namespace: str) -> ClusterClient:
    return ClusterClient(plane.api_client(STAGE_USER), namespace)


def train(namespace: str, run_id: str, req: Any = None, **fields: Any) -> Obj:
    """rlpipe's train JobSet for a run of the team whose namespace this is."""
    req = req or request.validate_request(minimal_request(**fields))
    return manifests.render(
        req,
        "train",
        1,
        manifests.RenderContext(run_id=run_id, bucket="rlpipe-artifacts", namespace=namespace),
    )


@contextlib.contextmanager
def launched(plane: ControlPlane) -> Iterator[Callable[[Obj], Obj]]:
    """``launch(obj)`` creates a workload as the stage identity; on leaving, every one is deleted
    and both teams' queues are empty again, for the next test."""
    made: list[Obj] = []

    def launch(obj: Obj) -> Obj:
        client_for(plane, obj["metadata"]["namespace"]).apply(obj)
        made.append(obj)
        return obj

    try:
        yield launch
    finally:
        for obj in made:
            with contextlib.suppress(Exception):
                client_for(plane, obj["metadata"]["namespace"]).delete("JobSet", obj["metadata"]["name"])
        wait_until(
            lambda: all(usage(plane, cq) == (0, 0) for cq in (CQ_A, CQ_B)) and not workloads(plane),
            15,
            what="the teams' queues empty again",
        )


def workloads(plane: ControlPlane, namespace: str | None = None) -> list[Obj]:
    """Kueue's Workloads in a team's namespace (both, if None); read as admin (the pipeline's Role
    reads no Workloads)."""
    where = ["-n", namespace] if namespace else ["--all-namespaces"]
    items: list[Obj] = json.loads(plane.kubectl("get", WORKLOADS, *where, "-o", "json"))["items"]
    return [w for w in items if w["metadata"]["namespace"] in (NS_A, NS_B)]


def workload_of(plane: ControlPlane, obj: Obj) -> Obj | None:
    name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
    return next(
        (
            w
            for w in workloads(plane, namespace)
            if any(ref.get("name") == name for ref in w["metadata"].get("ownerReferences") or [])
        ),
        None,
    )


def _condition(obj: Obj | None, kind: str) -> Obj:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def admitted(plane: ControlPlane, obj: Obj) -> bool:
    return _condition(workload_of(plane, obj), "Admitted").get("status") == "True"


def _after_its_reservation(plane: ControlPlane, obj: Obj) -> None:
    """Return once the clock is past the second of ``obj``'s QuotaReserved condition.

    Kueue preempts the candidate whose quota was reserved most recently, by that condition's
    lastTransitionTime, which the API keeps to the second, and breaks a tie by UID (Kueue v0.17.1,
    ``CandidatesOrdering`` in ``pkg/scheduler/preemption/common/ordering.go``). Two workloads
    admitted within one second were a coin toss, and the test failed in two runs of three on a
    quiet machine. A workload launched after this wait is reserved a later second."""
    from datetime import UTC, datetime, timedelta

    stamp = _condition(workload_of(plane, obj), "QuotaReserved").get("lastTransitionTime")
    assert stamp, f"{obj['metadata']['name']} has no quota reserved"
    reserved = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    wait_until(
        lambda: datetime.now(UTC) >= reserved + timedelta(seconds=1),
        2,
        what=f"the second after {obj['metadata']['name']}'s reservation",
    )


def usage(plane: ControlPlane, cq: str) -> tuple[int, int]:
    """(chips reserved, chips of them borrowed) in the TPU slice flavor of a team's ClusterQueue."""
    status = (
        json.loads(plane.kubectl("get", "clusterqueues.kueue.x-k8s.io", cq, "-o", "json")).get("status") or {}
    )
    for flavor in status.get("flavorsReservation") or []:
        if flavor["name"] == SLICE_FLAVOR:
            tpu = next((r for r in flavor["resources"] if r["name"] == TPU), {})
            return int(tpu.get("total", "0")), int(tpu.get("borrowed", "0"))
    return 0, 0


def reserved_as(plane: ControlPlane, expected: dict[str, tuple[int, int]]) -> None:
    """Wait for the ClusterQueues' status to say ``expected`` (Kueue writes it a moment after it
    admits or evicts)."""
    try:
        wait_until(lambda: {cq: usage(plane, cq) for cq in expected} == expected, 10, what="reservations")
    except AssertionError:
        seen = {cq: usage(plane, cq) for cq in expected}
        raise AssertionError(f"(reserved, borrowed) per ClusterQueue: {seen}, expected {expected}") from None


def status_of(plane: ControlPlane, obj: Obj) -> WorkloadStatus:
    return client_for(plane, obj["metadata"]["namespace"]).status(obj["metadata"]["name"], kind="JobSet")


def queued_with(plane: ControlPlane, obj: Obj, words: str) -> WorkloadStatus:
    """rlpipe's verdict once Kueue has said why it does not admit the workload."""
    return wait_until(
        lambda: (s := status_of(plane, obj)).phase == "queued" and words in s.reason and s,
        10,
        what=f"{obj['metadata']['name']} queued, saying: {words}",
    )


# ---- 1. a team at its quota queues ------------------------------------------------------------------


def test_a_team_at_its_quota_queues_its_next_run_on_both_clusters(
    teams: ControlPlane,
    running: PodPlayer,
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """b holds its 32 chips and a its 16: the cohort has nothing idle to lend, so a's next run is
    not admitted and rlpipe reads it ``queued``, with Kueue's words. The double says the same of a
    workload its queue has no quota for."""
    dbl = render(buckets, "train", run_id="rdblteamfull", **V6E_16)
    simulate("train:no-quota")
    on_double = settled_queued(kube, dbl)

    with launched(teams) as launch:
        b_run = launch(train(NS_B, "rbfull"))
        wait_until(lambda: admitted(teams, b_run), 10, what="b's run admitted")
        a_first = launch(train(NS_A, "rafirst", **V6E_16))
        wait_until(lambda: admitted(teams, a_first), 10, what="a's first run admitted")
        a_next = launch(train(NS_A, "ranext", **V6E_16))
        on_real = queued_with(teams, a_next, QUOTA_WORDS)
        assert not admitted(teams, a_next)
        reserved_as(teams, {CQ_A: (16, 0), CQ_B: (32, 0)})
        reserved = _condition(workload_of(teams, a_next), "QuotaReserved")
        assert (reserved.get("status"), reserved.get("reason")) == ("False", "Pending"), reserved

    assert on_real.phase == on_double.phase == "queued"
    assert on_real.admitted is on_double.admitted is False
    # The double's Kueue words it as the real one does, up to the flavors the real one goes on to list.
    assert on_double.reason.split("Kueue: ")[1] in on_real.reason, (on_double.reason, on_real.reason)


def settled_queued(kube: KubeApiServer, obj: Obj) -> WorkloadStatus:
    from tests.local.test_simulator import create

    create(kube, obj)
    client = ClusterClient(kube.api_client(), NS, sleep=lambda s: None)
    return wait_until(
        lambda: (
            (s := client.status(obj["metadata"]["name"], kind="JobSet")).phase == "queued"
            and "Kueue: " in s.reason
            and s
        ),
        10,
        what="the double's verdict with Kueue's reason",
    )


# ---- 2. borrowing idle chips ------------------------------------------------------------------------


def test_a_team_borrows_the_idle_chips_of_another(teams: ControlPlane, running: PodPlayer) -> None:
    """b runs nothing: a's second run is admitted beyond a's 16 chips, on 16 borrowed from b's idle
    quota (Kueue's ClusterQueue status counts them as borrowed), and both of a's runs run. The double
    has no cohort to borrow from."""
    with launched(teams) as launch:
        runs = [launch(train(NS_A, f"raborrow{i}", **V6E_16)) for i in (1, 2)]
        wait_until(lambda: all(admitted(teams, r) for r in runs), 10, what="both of a's runs admitted")
        reserved_as(teams, {CQ_A: (32, 16), CQ_B: (0, 0)})  # beyond a's nominal 16, within its limit
        for run in runs:
            wait_until(lambda run=run: status_of(teams, run).phase == "running", 10, what="running")


# ---- 3. reclaim: the lender takes its chips back --------------------------------------------------


def test_a_team_reclaims_its_lent_chips_by_preempting_the_borrower_which_reads_preempted(
    teams: ControlPlane,
    running: PodPlayer,
    kube: KubeApiServer,
    buckets: Buckets,
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """a runs two (16 of its own, 16 borrowed from b); b submits a run of its whole 32. Kueue
    preempts the borrower's most recently admitted workload (reclaimWithinCohort: Any), b's run is
    admitted, a keeps the run within its own quota, and rlpipe reads the preempted one ``preempted``
    (core.failure_rules.workload EVICTION_CLASSES: Kueue's ``Preempted``), the class whose retry
    resumes from the newest committed step (docs/design.md, failure classes). The double's Kueue
    preempts within one queue only; its verdict's class is the same."""
    from tests.local.test_simulator import program_args, seed

    dbl = render(buckets, "train", run_id="rdblteamreclaim", training={"num_batches": 10}, **V6E_16)
    seed(buckets, program_args(dbl)["load_parameters_path"])
    on_double = verdict_on_double(kube, simulate, dbl, "train:evict@3:preempted")

    with launched(teams) as launch:
        kept = launch(train(NS_A, "rakept", **V6E_16))
        wait_until(lambda: status_of(teams, kept).phase == "running", 10, what="a's own run running")
        _after_its_reservation(teams, kept)  # so that the borrower is reserved strictly later
        borrower = launch(train(NS_A, "raborrower", **V6E_16))
        wait_until(
            lambda: status_of(teams, borrower).phase == "running", 10, what="a's borrowing run running"
        )
        reserved_as(teams, {CQ_A: (32, 16), CQ_B: (0, 0)})

        b_run = launch(train(NS_B, "rbreclaim"))
        on_real = settled(lambda: status_of(teams, borrower))
        wait_until(lambda: admitted(teams, b_run), 10, what="b's run admitted on its reclaimed chips")
        evicted = workload_of(teams, borrower)
        assert _condition(evicted, "Preempted").get("reason") == "InCohortReclamation", evicted
        assert status_of(teams, kept).phase == "running"
        reserved_as(teams, {CQ_A: (16, 0), CQ_B: (32, 0)})

    for verdict in (on_double, on_real):
        assert (verdict.phase, verdict.failure_class) == ("failed", FailureClass.PREEMPTED), verdict.reason
        assert "Preempted to accommodate a workload" in verdict.reason, verdict.reason
    assert "due to reclamation within the cohort" in on_real.reason, on_real.reason


# ---- 4. a sweep is held to quota plus borrowing limit ---------------------------------------------


def test_a_sweep_never_has_more_admitted_than_its_quota_and_borrowing_limit(
    teams: ControlPlane, running: PodPlayer
) -> None:
    """A sweep of four children on v6e-16, all launched at once, while b is idle (32 chips the
    cohort could lend): Kueue admits two (a's 16 and the 16 it may borrow) and holds the others,
    queued, at every moment, also after one child ends and the next takes its place. The double has
    no cohort and no borrowing limit."""
    req = request.validate_request(
        minimal_request(
            **V6E_16,
            sweep={
                "grid": {"training.learning_rate": [1e-5, 2e-5, 3e-5, 4e-5]},
                "max_parallel": 4,
                "select": {"metric": "post_mean_reward", "direction": "max"},
            },
        )
    )
    children = [train(NS_A, f"rasweep-c{c.index}", req=c.request) for c in sweep.children(req)]
    assert len(children) == 4
    with launched(teams) as launch:
        for child in children:
            launch(child)
        wait_until(lambda: sum(admitted(teams, c) for c in children) >= 2, 10, what="two children admitted")
        most = _most_admitted(teams, children, seconds=3.0)
        assert most == 2, f"{most} of a's children admitted at once: a may hold 16 + 16 chips"
        first = [c for c in children if admitted(teams, c)]
        waiting = [c for c in children if c not in first]
        for child in waiting:
            queued_with(teams, child, QUOTA_WORDS)  # Kueue counts the limit in what is available
        reserved_as(teams, {CQ_A: (32, 16), CQ_B: (0, 0)})

        client_for(teams, NS_A).delete("JobSet", first[0]["metadata"]["name"])
        wait_until(lambda: any(admitted(teams, c) for c in waiting), 10, what="the next child admitted")
        most = _most_admitted(teams, children, seconds=3.0)
        assert most == 2, f"{most} of a's children admitted at once, after one ended"


def _most_admitted(plane: ControlPlane, children: list[Obj], seconds: float) -> int:
    """The most children admitted at once, sampled for ``seconds``."""
    most, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        most = max(most, sum(admitted(plane, c) for c in children))
        time.sleep(0.1)
    return most


# ---- why the queues are rendered so: two other ways, in which the lender never gets its chips back -


def _cpu_lent(spec: Obj) -> None:
    """cpu-np shared as flex-start's queue shares it: none in the teams' queues; all of it in a
    queue of the cohort that admits nothing and lends it (:data:`CPU_LENDER`)."""
    for resource in spec["resourceGroups"][1]["flavors"][0]["resources"]:
        resource["nominalQuota"] = "0"


CPU_LENDER = {
    "apiVersion": team_queues.KUEUE,
    "kind": "ClusterQueue",
    "metadata": {"name": "rlpipe-teams-cpu"},
    "spec": {
        "cohortName": team_queues.COHORT,
        "resourceGroups": [
            {
                "coveredResources": list(team_queues.PARAMS_CPU_NP),
                "flavors": [
                    {
                        "name": "rlpipe-cpu-np",
                        "resources": [
                            {"name": r, "nominalQuota": PARAMS[k]}
                            for r, k in team_queues.PARAMS_CPU_NP.items()
                        ],
                    }
                ],
            }
        ],
    },
}


def _reclaim_lower_priority_only(spec: Obj) -> None:
    """Reclaim only from lower priorities: rlpipe's workloads have none, all are equal."""
    spec["preemption"]["reclaimWithinCohort"] = "LowerPriority"


@contextlib.contextmanager
def queues_changed(plane: ControlPlane, edit: Callable[[Obj], None], extra: list[Obj]) -> Iterator[None]:
    """Both teams' ClusterQueues' specs edited, and ``extra`` objects added; restored afterwards for
    the file's other tests."""
    kinds = "clusterqueues.kueue.x-k8s.io"
    saved = {cq: json.loads(plane.kubectl("get", kinds, cq, "-o", "json"))["spec"] for cq in (CQ_A, CQ_B)}

    def patch(name: str, spec: Obj) -> None:
        fields = {"resourceGroups": spec["resourceGroups"], "preemption": spec["preemption"]}
        plane.kubectl("patch", kinds, name, "--type=merge", "-p", json.dumps({"spec": fields}))

    if extra:
        plane.apply(extra)
    for name, spec in saved.items():
        edited = json.loads(json.dumps(spec))
        edit(edited)
        patch(name, edited)
    try:
        yield
    finally:
        for name, spec in saved.items():
            patch(name, spec)
        for obj in extra:
            plane.kubectl("delete", kinds, obj["metadata"]["name"], "--ignore-not-found", check=False)


@pytest.mark.parametrize(
    ("edit", "extra"),
    [(_cpu_lent, [CPU_LENDER]), (_reclaim_lower_priority_only, [])],
    ids=["cpu-lent", "lower-priority"],
)
def test_with_cpu_lent_or_reclaim_by_priority_the_lender_never_gets_its_chips_back(
    teams: ControlPlane, running: PodPlayer, edit: Callable[[Obj], None], extra: list[Obj]
) -> None:
    """The reclaim above (there in about a second), with the queues changed two ways team_queues
    does not render them. cpu-lent: b's run needs cpu beyond b's own (zero) quota, so Kueue does not
    count it as fitting b's quota and preempts no borrower (team_queues' docstring cites the code).
    lower-priority: a's runs are not of lower priority than b's. Either way b waits, saying why in
    Kueue's words, while a keeps b's chips."""
    with queues_changed(teams, edit, extra), launched(teams) as launch:
        kept = launch(train(NS_A, "rakept2", **V6E_16))
        wait_until(lambda: status_of(teams, kept).phase == "running", 10, what="a's own run running")
        borrower = launch(train(NS_A, "raborrower2", **V6E_16))
        wait_until(
            lambda: status_of(teams, borrower).phase == "running", 10, what="a's borrowing run running"
        )
        b_run = launch(train(NS_B, "rbreclaim2"))
        queued_with(teams, b_run, QUOTA_WORDS)
        end = time.monotonic() + NEVER_SECONDS
        while time.monotonic() < end:
            assert status_of(teams, borrower).phase == "running" and not admitted(teams, b_run)
            time.sleep(0.2)
        reserved_as(teams, {CQ_A: (32, 16), CQ_B: (0, 0)})
