"""The reconciler on the real chain: fake-gcs-server, the Kubernetes API double (real client) and the
local Workflows engine's Executions API (real ``ExecutionsClient``)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from rlpipe.reconcile.cursor import CURSOR_OBJECT, CursorStore
from rlpipe.reconcile.runner import Reconciler
from tests.conftest import all_objects
from tests.harness import exported
from tests.reconcile.test_reconcile_chain import GONE_PREFIX as GONE
from tests.reconcile.test_reconcile_chain import PROJECT, Chain, chain_fixture, kube_server, local_workflows  # noqa: F401  (fixtures)


def done(report: Any, kind: str) -> list[str]:
    return sorted(
        o.run_id for o in report.outcomes if o.action and o.action.kind == kind and o.status == "done"
    )


# ---- 1. claims that never started ---------------------------------------------------------------


def test_a_stranded_claim_is_started_exactly_once_by_two_concurrent_reconcilers(chain: Chain) -> None:
    claims = [f"rclaim{n:06d}" for n in range(4)]
    for run_id in claims:  # intake claimed them, then died: no execution, an expired lease
        chain.run(run_id, "accepted", age=600, lease_until=time.time() - 300)
    gate = threading.Barrier(2)
    reports: list[Any] = []

    def one_pass() -> None:
        reconciler = chain.reconciler()
        gate.wait()
        reports.append(reconciler.run_pass())

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert len(reports) == 2 and not any(r.errors for r in reports)
    started = sorted(done(reports[0], "start") + done(reports[1], "start"))
    assert started == claims  # each claim started by exactly one of the two
    for run_id in claims:
        [execution] = chain.executions_of(run_id)  # one execution, none started-then-cancelled
        record = chain.ledger.get(run_id)
        assert record.execution.name == execution.name and record.state == "accepted"
        assert chain.history(run_id).count("reconcile-started") == 1
        assert "execution-started" in chain.history(run_id)


def test_a_young_claim_and_a_live_start_lease_are_left_to_intake(chain: Chain) -> None:
    chain.run("ryoung000001", "accepted", age=30)
    chain.run("rlease000001", "accepted", age=600, lease_until=time.time() + 60)
    report = chain.reconciler().run_pass()
    assert report.outcomes == [] and report.examined == 2
    assert chain.executions_of("ryoung000001") == chain.executions_of("rlease000001") == []


# ---- 2. ledgers against executions --------------------------------------------------------------


def test_a_cancelled_execution_gives_a_cancelled_run_and_deletes_its_jobset(chain: Chain) -> None:
    name = chain.start("rcancel00001")
    chain.run("rcancel00001", "training", execution=name, attempts=(("train", 1, 600),))
    jobset = chain.workload("rcancel00001", "train", 1)["metadata"]["name"]
    chain.orchestrator.cancel(name)  # from the console: the workflow's except never runs
    assert chain.settled(name) == "CANCELLED"

    report = chain.reconciler().run_pass()

    record = chain.ledger.get("rcancel00001")
    assert record.state == "cancelled" and record.failure.tag == "cancelled"
    assert "was cancelled" in record.failure.message and name.rsplit("/", 1)[-1] in record.failure.message
    assert not chain.exists("JobSet", jobset)
    assert chain.history("rcancel00001")[-2:] == ["reconcile-cancelled", "reconcile-deleted"]
    event = chain.ledger.history("rcancel00001")[-2]
    assert "CANCELLED" in event["found"] and "mark the run cancelled" in event["done"]
    assert [m["state"] for _, m in chain.published] == ["cancelled"]
    assert done(report, "finish") == ["rcancel00001"]

    again = chain.reconciler().run_pass()  # idempotent: nothing left to do, nothing written
    assert again.outcomes == [] and chain.ledger.get("rcancel00001").seq == record.seq


def test_a_failed_execution_gives_a_failed_run_with_the_executions_reason(chain: Chain) -> None:
    name = chain.start("rfail0000002")
    chain.run("rfail0000002", "training", execution=name, attempts=(("train", 1, 900), ("train", 2, 300)))
    assert chain.settled(name) == "FAILED"

    chain.reconciler().run_pass()

    record = chain.ledger.get("rfail0000002")
    assert record.state == "failed"
    assert (
        record.failure.tag == "resources" and record.failure.stage == "train" and record.failure.attempt == 2
    )
    assert "OOMKilled twice" in record.failure.message and "failed" in record.failure.message
    assert "reconcile-failed" in chain.history("rfail0000002")
    assert chain.published[-1][1]["failure"]["message"] == record.failure.message


def test_a_vanished_execution_fails_the_run(chain: Chain) -> None:
    chain.run("rgone0000001", "converting", execution=GONE + "deleted-long-ago")
    chain.reconciler().run_pass()
    record = chain.ledger.get("rgone0000001")
    assert record.state == "failed" and "no longer exists" in record.failure.message


def test_a_succeeded_execution_finishes_the_run_from_the_export(chain: Chain) -> None:
    complete, partial = chain.start("rdone0000002"), chain.start("rdone0000003")
    for run_id, name in (("rdone0000002", complete), ("rdone0000003", partial)):
        chain.run(run_id, "exporting", execution=name, attempts=(("export", 1, 60),))
        assert chain.settled(name) == "SUCCEEDED"
    # The export Job writes to the artifacts bucket, not beside the ledger, its manifest last.
    exported.export(
        chain.artifacts.bucket_name,
        "rdone0000002",
        {
            "model.safetensors.index.json": b'{"weight_map": {"a": "model-1.safetensors"}}',
            "model-1.safetensors": b"w",
        },
    )
    # The other's manifest lists an index whose shards it does not hold (the program wrote no more).
    exported.export(
        chain.artifacts.bucket_name,
        "rdone0000003",
        {
            "model.safetensors.index.json": b'{"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}'
        },
    )

    chain.reconciler().run_pass()

    assert chain.ledger.get("rdone0000002").state == "succeeded"
    failed = chain.ledger.get("rdone0000003")
    assert (
        failed.state == "failed" and "export is incomplete: 2 of 2 shards missing" in failed.failure.message
    )


def test_an_active_execution_is_left_alone(chain: Chain) -> None:
    name = chain.start("ractive00001")
    chain.run("ractive00001", "training", execution=name, attempts=(("train", 1, 60),))
    chain.workload("ractive00001", "train", 1)
    assert chain.reconciler().run_pass().outcomes == []
    assert chain.ledger.get("ractive00001").state == "training" and chain.exists(
        "JobSet", "ractive00001-train-a1"
    )


# ---- 3. orphaned workloads ----------------------------------------------------------------------


def test_an_orphan_jobset_of_an_unknown_run_is_deleted(chain: Chain) -> None:
    name = chain.workload("rghost000001", "train", 1)["metadata"]["name"]
    report = chain.reconciler().run_pass()
    assert not chain.exists("JobSet", name)
    assert [o.detail for o in report.outcomes] == [f"deleted JobSet {name}"]
    assert chain.ledger.get("rghost000001") is None and list(chain.store.list("runs/rghost000001/")) == []


def test_the_workloads_of_a_terminal_run_are_deleted_and_recorded(chain: Chain) -> None:
    chain.run("rended000001", "succeeded", attempts=(("export", 1, 600),))
    job = chain.workload("rended000001", "export", 1)["metadata"]["name"]
    chain.reconciler().run_pass()
    assert not chain.exists("Job", job)
    [note] = [e for e in chain.ledger.history("rended000001") if e["event"] == "reconcile-deleted"]
    assert note["workload"] == job and "succeeded run" in note["found"]


def test_an_old_attempts_job_is_deleted_and_the_current_one_stays(chain: Chain) -> None:
    name = chain.start("rretry000001")
    chain.run(
        "rretry000001", "converting", execution=name, attempts=(("convert", 1, 900), ("convert", 2, 60))
    )
    old = chain.workload("rretry000001", "convert", 1)["metadata"]["name"]
    current = chain.workload("rretry000001", "convert", 2)["metadata"]["name"]

    chain.reconciler().run_pass()

    assert not chain.exists("Job", old) and chain.exists("Job", current)
    [note] = [e for e in chain.ledger.history("rretry000001") if e["event"] == "reconcile-deleted"]
    assert note["workload"] == old and "current attempt is 2" in note["found"]
    assert chain.ledger.get("rretry000001").state == "converting"


# ---- 4. stuck workloads -------------------------------------------------------------------------


def test_a_stuck_running_workload_is_reported_once_and_left_alone(chain: Chain) -> None:
    name = chain.start("rstuck000001")
    chain.run("rstuck000001", "training", execution=name, attempts=(("train", 1, 25 * 3600),))  # deadline 24h
    jobset = chain.workload("rstuck000001", "train", 1)["metadata"]["name"]

    chain.reconciler().run_pass()

    assert chain.exists("JobSet", jobset) and chain.ledger.get("rstuck000001").state == "training"
    [(topic, message)] = chain.published
    assert topic == f"projects/{PROJECT}/topics/rlpipe-status"
    assert (
        message["event"] == "stuck"
        and message["workload"] == jobset
        and message["deadline_seconds"] == 24 * 3600
    )
    assert "past its 24h00m deadline" in message["message"]
    assert f"reconcile-stuck-{jobset}" in chain.history("rstuck000001")

    chain.reconciler().run_pass()
    assert len(chain.published) == 1  # reported once: the history remembers


def test_a_stuck_workload_report_is_logged_without_error(
    chain: Chain, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stuck report once passed `message` twice to Logger.warning (TypeError after the note was written).
    name = chain.start("rstucklog001")
    chain.run("rstucklog001", "training", execution=name, attempts=(("train", 1, 25 * 3600),))
    jobset = chain.workload("rstucklog001", "train", 1)["metadata"]["name"]

    report = chain.reconciler().run_pass()

    assert not report.errors, [o.line() for o in report.errors]
    [line] = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"stuck workload"' in x]
    assert line["workload"] == jobset and "past its 24h00m deadline" in line["detail"]


# ---- dry run ------------------------------------------------------------------------------------


def test_dry_run_changes_nothing_and_prints_the_plan(chain: Chain) -> None:
    chain.run("rdryclaim001", "accepted", age=600)
    cancelled = chain.start("rdrycanc0001")
    chain.run("rdrycanc0001", "training", execution=cancelled, attempts=(("train", 1, 600),))
    chain.workload("rdrycanc0001", "train", 1)
    chain.orchestrator.cancel(cancelled)
    chain.settled(cancelled)
    chain.workload("rdryghost001", "train", 1)
    stuck = chain.start("rdrystuck001")
    chain.run(
        "rdrystuck001",
        "converting",
        execution=stuck,
        attempts=(("convert", 1, 5 * 3600), ("convert", 2, 3 * 3600)),
    )
    chain.workload("rdrystuck001", "convert", 1)
    chain.workload("rdrystuck001", "convert", 2)
    bucket_before, cluster_before = all_objects(chain.store), chain.objects()
    artifacts_before = all_objects(chain.artifacts)
    executions_before = len(chain.workflows.engine.executions())

    report = chain.reconciler().run_pass(dry_run=True)

    assert all_objects(chain.store) == bucket_before and CURSOR_OBJECT not in bucket_before
    assert all_objects(chain.artifacts) == artifacts_before
    assert chain.objects() == cluster_before
    assert len(chain.workflows.engine.executions()) == executions_before and chain.published == []
    planned = {(o.action.kind, o.run_id) for o in report.outcomes if o.status == "planned"}
    assert planned == {
        ("start", "rdryclaim001"),
        ("finish", "rdrycanc0001"),
        ("delete", "rdryghost001"),
        ("delete", "rdrystuck001"),
        ("report", "rdrystuck001"),
    }
    assert all(o.status == "planned" for o in report.outcomes)
    text = report.render()
    assert "dry run" in text and "would  start  run rdryclaim001" in text and "cursor not written" in text


# ---- time budget and cursor ---------------------------------------------------------------------


class SteppedClock:
    """Fake wall time that moves only when the chain does work: each execution lookup costs 10 s."""

    def __init__(self) -> None:
        self.now = time.time()
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def _slow_reconciler(chain: Chain, clock: SteppedClock, **kwargs: Any) -> Reconciler:
    from rlpipe.control.adapters.orchestrator import Orchestrator

    class Slow(Orchestrator):
        def get(self, name: str) -> Any:
            clock.advance(10)
            return super().get(name)

    return chain.reconciler(clock=clock, orchestrator=Slow(chain.settings), budget_seconds=60, **kwargs)


def test_a_pass_stops_at_its_budget_and_the_next_tick_resumes_from_the_cursor(chain: Chain) -> None:
    ids = [f"rbudget{n:05d}" for n in range(30)]
    chain.runs([(run_id, {"state": "training", "execution": GONE + run_id}) for run_id in ids])
    handled: list[list[str]] = []
    cursors = CursorStore(chain.store)
    for tick in range(10):
        report = _slow_reconciler(chain, SteppedClock(), concurrency=1, page_size=5).run_pass()
        handled.append(done(report, "finish"))
        cursor = cursors.load()[0]
        if report.round_complete:
            break
        assert report.stopped == "budget" and len(handled[-1]) == 6  # 60 s budget, 10 s per run
        assert cursor.after == handled[-1][-1] and cursor.round == 1
        assert [chain.ledger.get(i).state for i in ids].count("failed") == 6 * (tick + 1)
    flat = [run_id for batch in handled for run_id in batch]
    assert flat == ids  # in order, each exactly once, across five ticks
    assert len(handled) == 5 and cursor.after == "" and cursor.round == 2


def test_concurrent_workers_never_skip_a_ledger_across_cut_offs(chain: Chain) -> None:
    ids = [f"rconc{n:07d}" for n in range(40)]
    chain.runs([(run_id, {"state": "training", "execution": GONE + run_id}) for run_id in ids])
    for _ in range(40):
        report = _slow_reconciler(chain, SteppedClock(), concurrency=4, page_size=7).run_pass()
        if report.round_complete:
            break
    assert report.round_complete
    assert {chain.ledger.get(i).state for i in ids} == {"failed"}
    for run_id in ids:  # a ledger inspected twice is fine; repaired twice is not
        assert chain.history(run_id) == ["reconcile-failed"]


# ---- load -------------------------------------------------------------------------------------


def test_one_pass_handles_a_thousand_ledgers(chain: Chain) -> None:
    specs: list[tuple[str, dict[str, Any]]] = []
    for n in range(1000):
        if n % 10 == 0:
            specs.append((f"rload{n:07d}", {"state": "training", "execution": GONE + str(n)}))
        else:
            specs.append((f"rload{n:07d}", {"state": "succeeded" if n % 3 else "failed"}))
    chain.runs(specs)

    report = chain.reconciler(page_size=200).run_pass()

    assert report.examined == 1000 and report.round_complete and not report.failed
    assert len(done(report, "finish")) == 100
    assert CursorStore(chain.store).load()[0].round == 2


# ---- entry points -------------------------------------------------------------------------------


def test_the_cli_dry_run_prints_the_plan_changes_nothing_and_exits_0(chain: Chain, capsys: Any) -> None:
    import argparse

    from rlpipe.cli import reconcile as reconcile_cli

    chain.run("rcligone0001", "training", execution=GONE + "x")
    parser = argparse.ArgumentParser()
    reconcile_cli.register(parser.add_subparsers(), settings=lambda: chain.settings)
    before = all_objects(chain.store)

    args = parser.parse_args(["reconcile", "--dry-run"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "would  finish run rcligone0001" in out
    assert all_objects(chain.store) == before

    args = parser.parse_args(["reconcile", "--json"])
    assert args.func(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is False and [o["status"] for o in report["outcomes"]] == ["done"]
    assert chain.ledger.get("rcligone0001").state == "failed"


def test_the_tick_entry_point_runs_a_pass_on_the_deployments_clients(
    chain: Chain, buckets: Any, monkeypatch: Any
) -> None:
    from rlpipe.control import services
    from rlpipe.control.adapters.logs import Logger
    from rlpipe.reconcile import runner as reconcile

    s = chain.settings
    for key, value in buckets.env(
        RLPIPE_PROJECT=s.project,
        RLPIPE_LOCATION=s.location,
        RLPIPE_WORKFLOW=s.workflow,
        RLPIPE_WORKFLOWS_ENDPOINT=s.workflows_endpoint,
        RLPIPE_KUBE_URL=s.kube_url,
        RLPIPE_NAMESPACE=s.namespace,
    ).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RLPIPE_STATUS_TOPIC", raising=False)
    services.reset()
    try:
        chain.run("rtickgone001", "exporting", execution=GONE + "y")
        report = reconcile.on_tick({"tick": "reconcile"}, Logger("reconcile"))
    finally:
        services.reset()
    assert [o.run_id for o in report.outcomes if o.status == "done"] == ["rtickgone001"]
    assert chain.ledger.get("rtickgone001").state == "failed" and report.cursor_saved
    assert chain.store.exists(CURSOR_OBJECT), "the cursor is the control plane's: in the state bucket"
    assert list(chain.artifacts.list("")) == [], "a pass writes nothing where workloads write"


def test_a_start_the_clis_pass_cannot_make_ends_the_run_with_its_status_message(chain: Chain) -> None:
    """The CLI's reconciler had no notifier: a run it ended because Workflows refused the start
    sent no status message, while the function's did."""
    import dataclasses

    from rlpipe.control.adapters.logs import Logger
    from rlpipe.reconcile import runner

    chain.run("rrefused0001", "accepted", age=600, lease_until=time.time() - 300)
    settings = dataclasses.replace(chain.settings, workflow="no-such-workflow", status_topic="rlpipe-status")
    sent: list[tuple[str, dict[str, Any]]] = []
    reconciler = runner.build(
        settings, Logger("reconcile"), send=lambda topic, message: sent.append((topic, message))
    )
    reconciler.run_pass()
    record = chain.ledger.get("rrefused0001")
    assert record is not None and record.state == "failed" and record.failure.stage == "start"
    assert [(topic, m["run_id"], m["state"]) for topic, m in sent] == [
        (settings.topic_path("rlpipe-status"), "rrefused0001", "failed")
    ]
