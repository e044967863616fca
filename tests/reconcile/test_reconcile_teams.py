"""A reconcile pass sees every team's namespace (core.teams): a team's orphan is found and deleted
where it is, a terminal team run's workloads too, and nothing of the same name elsewhere is
touched. Over the Kubernetes API double and fake-gcs-server, as the reconcile chain tests are."""

from __future__ import annotations

from typing import Any

from rlpipe.cluster.namespaces import AcrossNamespaces, across_teams
from rlpipe.core.manifests import RenderContext, render
from tests.reconcile.test_reconcile_chain import (  # noqa: F401  (fixtures)
    NS,
    REQUEST,
    Chain,
    chain_fixture,
    kube_server,
    local_workflows,
)

TEAM_NS = "rlpipe-vision"


def _apply(chain: Chain, run_id: str, stage: str, attempt: int, namespace: str) -> str:
    ctx = RenderContext(run_id=run_id, bucket=chain.store.bucket_name, namespace=namespace)
    obj = render(REQUEST, stage, attempt, ctx)  # type: ignore[arg-type]
    chain.cluster.in_namespace(namespace).apply(obj)
    return str(obj["metadata"]["name"])


def _names(chain: Chain, resource: str, namespace: str) -> list[str]:
    return [o["metadata"]["name"] for o in chain.kube.list(resource, namespace=namespace)]


def test_without_teams_the_pass_looks_in_the_deployments_namespace_alone(chain: Chain) -> None:
    assert across_teams(chain.cluster, []) is chain.cluster
    assert across_teams(chain.cluster, [NS]) is chain.cluster


def test_a_teams_orphan_and_a_terminal_team_runs_workload_are_deleted_where_they_are(chain: Chain) -> None:
    orphan = _apply(chain, "rghostteam01", "train", 1, TEAM_NS)
    chain.run("rendedteam01", "succeeded", attempts=(("export", 1, 600),))
    ended = _apply(chain, "rendedteam01", "export", 1, TEAM_NS)
    cluster: Any = across_teams(chain.cluster, [TEAM_NS])
    assert isinstance(cluster, AcrossNamespaces) and cluster.namespaces == (NS, TEAM_NS)
    report = chain.reconciler(cluster=cluster).run_pass()
    assert report.workloads == 2
    assert _names(chain, "jobsets", TEAM_NS) == [] and _names(chain, "jobs", TEAM_NS) == []
    assert f"deleted JobSet {orphan}" in [o.detail for o in report.outcomes]
    [note] = [e for e in chain.ledger.history("rendedteam01") if e["event"] == "reconcile-deleted"]
    assert note["workload"] == ended


def test_the_deployments_own_pass_without_the_team_namespace_never_sees_it(chain: Chain) -> None:
    """What the pass would miss without the teams: the reason it looks across them."""
    orphan = _apply(chain, "rghostteam02", "train", 1, TEAM_NS)
    assert chain.reconciler().run_pass().workloads == 0
    assert _names(chain, "jobsets", TEAM_NS) == [orphan]


def test_a_namespace_that_cannot_be_listed_is_reported_and_the_others_are_still_reconciled(
    chain: Chain,
) -> None:
    """During a rollout the declaration can name a namespace the cluster does not have yet."""
    orphan = _apply(chain, "rghostteam03", "train", 1, TEAM_NS)
    cluster = AcrossNamespaces(chain.cluster, (NS, TEAM_NS))
    real_in = cluster._in

    def missing(namespace: str) -> Any:
        if namespace == NS:

            class Refusing:
                def list_run_objects(self, run_id: str | None = None) -> list[Any]:
                    raise PermissionError('namespaces "rlpipe" is forbidden')

            return Refusing()
        return real_in(namespace)

    cluster._in = missing  # type: ignore[method-assign]
    report = chain.reconciler(cluster=cluster).run_pass()
    assert any("could not list namespace rlpipe's workloads" in p for p in report.problems), report.problems
    assert _names(chain, "jobsets", TEAM_NS) == [], f"{orphan} was left: one namespace blinded the pass"


def test_a_team_sweep_deadlocked_on_its_places_is_reported_stuck_once_and_left_alone(chain: Chain) -> None:
    """The ledgers and usage document a build without the give-back at selection leaves: vision
    (active_runs 4) with children 1-4 of a sweep at selection still holding the places, child 0
    queued for one, child 5 waiting for child 0's conversion. The first pass suspects them; the
    second, finding each in the same wait, reports every one stuck (a status message each, with
    what it waits for), changes nothing, and no pass reports one twice (a healthy queue is not
    stuck: tests/core/test_liveness.py)."""
    import dataclasses
    import json

    from rlpipe.control.adapters import blobstore
    from rlpipe.core import layout
    from rlpipe.core.team_limits import Holder, TeamUsage, Waiter
    from tests.harness.team_deadlock import SINCE, team_sweep_deadlock

    settings = dataclasses.replace(
        chain.settings, teams_json=json.dumps({"vision": {"limits": {"active_runs": 4}}})
    )
    deadlock = team_sweep_deadlock("rdead")
    for record in (deadlock.parent, *deadlock.children):
        assert chain.ledger.claim(record)
    children = [c.run_id for c in deadlock.children]
    usage = TeamUsage(
        team="vision",
        month="2026-12",
        holders=[Holder(run_id=c, sweep_child=True, since=SINCE, reserved=768.0) for c in deadlock.holders],
        waiting=[Waiter(run_id=children[0], sweep_child=True, since=SINCE, seen=SINCE)],
    )
    chain.store.create(layout.team_usage("vision"), blobstore.dumps(usage.model_dump(mode="json")))

    first = dataclasses.replace(chain.reconciler(), settings=settings).run_pass()
    # One pass only suspects: it reads the records and the usage at slightly different moments.
    assert chain.published == [], [o.detail for o in first.outcomes]
    assert all("reconcile-stuck-suspected" in [e["event"] for e in chain.ledger.history(c)] for c in children)

    def waits_anew(r: Any) -> str:  # child 0 moved on and waits again: a wait the suspicion was not about
        r.admission.since = "2026-12-06T11:30:00.000000Z"
        return "admission-waiting"

    chain.ledger.edit(children[0], waits_anew)
    second = dataclasses.replace(chain.reconciler(), settings=settings).run_pass()
    stuck = {m["run_id"]: m for _, m in chain.published if m["event"] == "stuck"}
    assert set(stuck) == set(children[1:]), [o.detail for o in second.outcomes]
    report = dataclasses.replace(chain.reconciler(), settings=settings).run_pass()
    stuck = {m["run_id"]: m for _, m in chain.published if m["event"] == "stuck"}
    assert set(stuck) == set(children), [o.detail for o in report.outcomes]
    assert stuck[children[0]]["waits_since"] == "2026-12-06T11:30:00.000000Z"
    assert stuck[children[0]]["waits_for"] == "team-place"
    assert "held by runs that can never give it" in stuck[children[0]]["message"]
    assert all(chain.ledger.get(c).state == "accepted" for c in children)  # left alone
    assert "reconcile-stuck-waiting" in [e["event"] for e in chain.ledger.history(children[5])]
    dataclasses.replace(chain.reconciler(), settings=settings).run_pass()
    assert len(chain.published) == 6  # reported once: the history remembers


def test_only_the_pass_just_before_confirms_a_stuck_suspicion_about_the_same_wait() -> None:
    """By hand, the rule the pass applies: reported only when the suspicion was written by the
    pass just before this one (named by when it began) about the wait the run is in now; a report
    written before reports named their wait still counts as about it (no second report)."""
    from rlpipe.core.runs.record import Admission, RunRecord, Source
    from rlpipe.reconcile.rules import confirmed, same_wait

    record = RunRecord(
        run_id="rwaiting0001",
        key="rwaiting0001",
        source=Source(kind="gcs", team="vision"),
        request={},
        created_at="2026-12-06T09:00:00.000000Z",
        admission=Admission(waits_for="team-place", reason="queued", since="2026-12-06T10:00:00.000000Z"),
    )
    wait = {"waits_for": "team-place", "waits_since": "2026-12-06T10:00:00.000000Z"}
    by_last_pass = {"pass": "2026-12-06T11:05:00.000000Z", **wait}
    assert confirmed(by_last_pass, record, "2026-12-06T11:05:00.000000Z")
    # Two passes ago: the pass in between found it moving (it wrote no suspicion), so it is stale.
    assert not confirmed(by_last_pass, record, "2026-12-06T11:10:00.000000Z")
    assert not confirmed(by_last_pass, record, None)  # no pass before this one on record
    moved = {**by_last_pass, "waits_since": "2026-12-06T09:30:00.000000Z"}
    assert not confirmed(moved, record, "2026-12-06T11:05:00.000000Z")  # about another wait
    assert same_wait({"message": "held by runs that can never give it"}, record)  # an older report
    assert not same_wait({**wait, "waits_for": "sweep-slot"}, record)
