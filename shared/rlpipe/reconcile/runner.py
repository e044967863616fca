"""The reconciler: a level-triggered pass over the three sources of truth, repairing differences.

Events get lost and executions die in ways no ``except`` block sees (a cancel from the console, an
execution that failed before it owned its run, a function that crashed between two writes). So
every few minutes a pass compares the ledgers in GCS, the Workflows executions and the objects in
the cluster and repairs what disagrees (rules: ``reconcile_rules``; repairs:
``reconcile_repairs``). Each pass:

1. **workloads** (all of them, every pass; there are few): delete those whose run is terminal or
   unknown and older attempts than the run's current one; report those past their stage deadline;
2. **ledgers**, page by page from the cursor, each page read and checked concurrently with a
   bound: start claims that never started; finish runs whose execution ended without telling the
   ledger (and delete their workloads at once, the cleanup the workflow never ran).

A pass stops cleanly at its time budget: it finishes the ledgers in flight, never starts another,
and saves the position (the last run id below which everything was handled) in
``reconcile/cursor.json`` with compare-and-swap; the next tick resumes there. ``dry_run`` does all
the reading and none of the writing: no ledger, cluster, execution, message or cursor changes.

Ledgers and the cursor are read and written in the state bucket (``ledger.store``); an export's
completeness is read in the artifacts bucket (``artifacts``), where the export Job writes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rlpipe.cluster import RunObject
from rlpipe.cluster.namespaces import across_teams
from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.orchestrator import Orchestrator
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle import stored_outputs
from rlpipe.control.lifecycle.coordinator import RunCoordinator
from rlpipe.control.lifecycle.intake import Intake
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.team_usage import TeamUsageStore
from rlpipe.core import layout, liveness
from rlpipe.core.runs.record import RunRecord, now
from rlpipe.reconcile import rules as rules
from rlpipe.reconcile.cursor import CURSOR_OBJECT, Cursor, CursorStore
from rlpipe.reconcile.pass_report import PassReport
from rlpipe.reconcile.repairs import Cluster, Outcome, Repairs
from rlpipe.reconcile.rules import Action

DEFAULT_BUDGET_SECONDS = 240.0  # the tick is every 5 minutes; leave room for the tail and the cursor
DEFAULT_CONCURRENCY = 8  # ledger reads in flight; the storage client's connection pool holds 10
DEFAULT_PAGE_SIZE = 200
MIN_CLAIM_AGE_SECONDS = 120.0  # younger claims may still be starting (intake's own path)

__all__ = ["DEFAULT_BUDGET_SECONDS", "PassReport", "Reconciler", "build", "from_services", "on_tick"]


@dataclass
class Reconciler:
    settings: Settings
    ledger: Ledger  # on the state bucket, like the cursor
    artifacts: blobstore.BlobStore  # what workloads write: the export's completeness
    orchestrator: Orchestrator
    cluster: Cluster
    intake: Intake
    log: Logger
    publish: Callable[[str, dict[str, Any]], Any] | None = None
    coordinator: RunCoordinator = field(default_factory=RunCoordinator)  # a sweep's, when wired
    clock: Callable[[], float] = time.time  # wall-clock seconds: ages and the budget
    budget_seconds: float = DEFAULT_BUDGET_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY
    page_size: int = DEFAULT_PAGE_SIZE
    min_claim_age: float = MIN_CLAIM_AGE_SECONDS
    cursor_name: str = CURSOR_OBJECT
    repairs: Repairs = field(init=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.page_size < 1:
            raise ValueError("concurrency and page_size must be >= 1")
        self.repairs = Repairs(
            settings=self.settings,
            ledger=self.ledger,
            cluster=self.cluster,
            intake=self.intake,
            log=self.log,
            publish=self.publish,
            coordinator=self.coordinator,
        )

    @property
    def state(self) -> blobstore.BlobStore:
        """The state bucket: ledgers and the cursor."""
        return self.ledger.store

    # ---- the pass -------------------------------------------------------------------------------

    def run_pass(self, *, dry_run: bool = False) -> PassReport:
        started = self.clock()
        deadline = started + self.budget_seconds
        cursors = CursorStore(self.state, self.cursor_name)
        cursor, generation = cursors.load()
        report = PassReport(dry_run=dry_run, cursor_before=cursor, started_at=now())
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="reconcile") as pool:
            self._workloads(pool, report, deadline, dry_run)
            after = self._ledgers(pool, cursor.after, report, deadline, dry_run)
            self._liveness(pool, report, deadline, dry_run)
        report.seconds = self.clock() - started
        report.cursor_after = self._next_cursor(cursor, after, report)
        if not dry_run:
            report.cursor_saved = cursors.save(report.cursor_after, generation)
            if not report.cursor_saved:
                self.log.warning("the cursor moved during this pass (another reconciler?); leaving it")
        self.log.info(
            "reconcile pass",
            **report.summary(),
            cursor=report.cursor_after.after,
            round=report.cursor_after.round,
        )
        return report

    def _next_cursor(self, cursor: Cursor, after: str, report: PassReport) -> Cursor:
        stamp = now()
        began = cursor.round_started_at or stamp
        if report.round_complete:
            return Cursor(
                after="",
                round=cursor.round + 1,
                round_started_at=None,
                updated_at=stamp,
                last_pass=report.summary(),
            )
        return Cursor(
            after=after,
            round=cursor.round,
            round_started_at=began,
            updated_at=stamp,
            last_pass=report.summary(),
        )

    def _out_of_time(self, deadline: float) -> bool:
        return self.clock() >= deadline

    def _act(self, action: Action, dry_run: bool) -> Outcome:
        return Outcome(action.run_id, action, "planned") if dry_run else self.repairs.apply(action)

    # ---- workloads: orphans and stuck ones --------------------------------------------------------

    def _workloads(
        self, pool: ThreadPoolExecutor, report: PassReport, deadline: float, dry_run: bool
    ) -> None:
        if self._out_of_time(deadline):
            report.stopped = "budget"
            return
        try:
            objects = self.cluster.list_run_objects()
        except Exception as exc:  # the ledgers can still be reconciled without the cluster
            report.problems.append(f"could not list the cluster's workloads: {exc}")
            self.log.warning("could not list workloads", error=repr(exc))
            return
        for namespace, error in (getattr(self.cluster, "unlisted", None) or {}).items():
            report.problems.append(f"could not list namespace {namespace}'s workloads: {error}")
            self.log.warning("could not list a namespace's workloads", namespace=namespace, error=error)
        report.workloads = len(objects)
        run_ids = sorted({o.run_id for o in objects if o.run_id})
        records: dict[str, RunRecord | None] = {}
        for run_id, got in zip(run_ids, pool.map(self._read, run_ids), strict=True):
            if isinstance(got, Exception):
                report.outcomes.append(Outcome(run_id, None, "error", f"could not read the ledger: {got}"))
            else:
                records[run_id] = got
        readable = [o for o in objects if not o.run_id or o.run_id in records]
        results = pool.map(
            lambda o: self._one_workload(o, records.get(o.run_id), deadline, dry_run), readable
        )
        report.outcomes.extend(o for o in results if o is not None)

    def _read(self, run_id: str) -> RunRecord | Exception | None:
        try:
            return self.ledger.peek(run_id)
        except Exception as exc:
            return exc

    def _one_workload(
        self, obj: RunObject, record: RunRecord | None, deadline: float, dry_run: bool
    ) -> Outcome | None:
        if self._out_of_time(deadline):
            return None  # every pass sees every workload: the next one covers it
        try:
            action = rules.workload_action(obj, record)
            if action is None and record is not None and obj.stage:
                action = rules.stuck_action(
                    obj, record, self.clock(), rules.stage_deadline(record, obj.stage)
                )
                if action is not None and self.ledger.has_event(record.run_id, action.event):
                    action = None  # reported once already; the history says so
        except Exception as exc:
            return Outcome(obj.run_id, None, "error", f"could not check {obj.kind} {obj.name}: {exc}")
        return self._act(action, dry_run) if action else None

    # ---- liveness: waiting runs that can never move -------------------------------------------------

    def _liveness(self, pool: ThreadPoolExecutor, report: PassReport, deadline: float, dry_run: bool) -> None:
        """The waits-for graph of the runs that wait (``core.liveness``), read from what holds and
        queues them: each team's usage document (holders and waiters), then the sweeps those runs
        belong to, parents and children. A deployment without teams has no place to wait for: a
        sweep's waits alone end as its slot holders' stages do."""
        teams = self.settings.teams()
        if not teams.declared or self._out_of_time(deadline):
            return
        usage = TeamUsageStore(self.state, self.ledger, poll_seconds=self.settings.callback_timeout_seconds)
        holders: dict[str, list[str]] = {}
        wanted: set[str] = set()
        try:
            for team in teams:
                document = usage.read(team.name)
                if document is not None:
                    holders[team.name] = [h.run_id for h in document.holders]
                    wanted |= set(holders[team.name]) | {w.run_id for w in document.waiting}
        except Exception as exc:
            report.problems.append(f"liveness: could not read the teams' usage: {exc}")
            return
        records: dict[str, RunRecord] = {}

        def read(ids: set[str]) -> None:
            ordered = sorted(ids)
            for run_id, got in zip(ordered, pool.map(self._read, ordered), strict=True):
                if isinstance(got, RunRecord):
                    records[run_id] = got

        read(wanted)
        read({r.lineage.sweep.parent for r in records.values() if r.lineage.sweep} - records.keys())
        read({c for r in list(records.values()) if r.sweep for c in r.sweep.children} - records.keys())
        previous = report.cursor_before.last_pass.get("started_at")  # the pass before this one
        for run_id, reason in liveness.stuck(records, liveness.waits(records, holders)).items():
            record = records[run_id]
            action = rules.waiting_stuck_action(record, reason)
            try:
                if rules.same_wait(self.ledger.last_event(run_id, action.event), record):
                    continue  # reported once per wait: the history says so
                if not rules.confirmed(
                    self.ledger.last_event(run_id, rules.STUCK_SUSPECTED_EVENT), record, previous
                ):
                    if not dry_run:
                        found = {"found": reason, "pass": report.started_at, **rules.wait_of(record)}
                        self.ledger.note(run_id, rules.STUCK_SUSPECTED_EVENT, found)
                    said = "stuck in this pass: reported if the next pass finds it stuck in the same wait"
                    report.outcomes.append(Outcome(run_id, action, "noop", said))
                    continue
            except Exception as exc:  # this run's history could not be read or written: next pass
                report.outcomes.append(Outcome(run_id, action, "error", f"liveness: {exc}"))
                continue
            report.outcomes.append(self._act(action, dry_run))

    # ---- ledgers: claims and finished executions ----------------------------------------------------

    def _ledgers(
        self, pool: ThreadPoolExecutor, after: str, report: PassReport, deadline: float, dry_run: bool
    ) -> str:
        """Handle ledgers after ``after`` until the listing ends or time runs out; returns the new
        position: every run id up to it (in listing order) has been handled."""
        while True:
            if self._out_of_time(deadline):
                report.stopped = "budget"
                return after
            page = self.ledger.list_run_ids_page(after, self.page_size)
            results = list(pool.map(lambda run_id: self._one_ledger(run_id, deadline, dry_run), page.run_ids))
            for run_id, outcomes in zip(page.run_ids, results, strict=True):
                if outcomes is None:  # not started: the budget ran out while the page was in flight
                    report.stopped = "budget"
                    return after
                report.examined += 1
                report.outcomes.extend(outcomes)
                after = run_id
            if not page.more or not page.run_ids:
                report.round_complete = True
                return after

    def _one_ledger(self, run_id: str, deadline: float, dry_run: bool) -> list[Outcome] | None:
        if self._out_of_time(deadline):
            return None
        try:
            action = self._inspect(run_id)
        except Exception as exc:  # counted as handled: a poisoned ledger must not pin the cursor
            self.log.bind(run_id=run_id).warning("could not inspect the run", error=repr(exc))
            return [Outcome(run_id, None, "error", f"{type(exc).__name__}: {exc}")]
        return [self._act(action, dry_run)] if action else []

    def _inspect(self, run_id: str) -> Action | None:
        record = self.ledger.peek(run_id)
        if record is None or record.terminal:
            return None
        if not record.execution.name:
            return rules.claim_action(record, self.clock(), min_age=self.min_claim_age)
        info = self.orchestrator.get(record.execution.name)
        export = self._export(record) if info is not None and info.state == "SUCCEEDED" else None
        return rules.execution_action(record, info, export)

    def _export(self, record: RunRecord) -> layout.Completeness:
        """The export's completeness by the layout's rule (the manifest, every file it lists)."""
        scope = self.settings.teams().cache_scope(record.team)  # a team's run: under its prefix
        return stored_outputs.export_completeness(self.artifacts, record.run_id, scope)


# ---- wiring -------------------------------------------------------------------------------------


def from_services(log: Logger, **overrides: Any) -> Reconciler:
    """The function's reconciler: the process's cached clients (``services``), ``notify`` to publish."""
    from rlpipe.control import services
    from rlpipe.control.adapters import notify

    return Reconciler(
        settings=services.settings(),
        ledger=services.ledger(),
        artifacts=services.artifacts(),
        orchestrator=services.orchestrator(),
        cluster=across_teams(services.cluster(), [t.k8s_namespace for t in services.settings().teams()]),
        intake=services.intake(log),
        log=log,
        publish=notify.publish,
        coordinator=services.coordinator(log),
        **overrides,
    )


def build(
    settings: Settings,
    log: Logger,
    *,
    send: Callable[[str, dict[str, Any]], Any] | None = None,
    **overrides: Any,
) -> Reconciler:
    """A reconciler for exactly these settings (the CLI: a local stack or a GCP deployment).
    ``send`` publishes status messages (Pub/Sub by default): a run the pass ends because its
    start was refused gets its message, as it does from the function's reconciler."""
    from rlpipe.cluster import ClusterClient
    from rlpipe.control import services
    from rlpipe.control.adapters import notify

    wiring = services.Wiring(settings, blobstore.make_client(settings.project), publish=send)
    ledger = wiring.ledger()
    return Reconciler(
        settings=settings,
        ledger=ledger,
        artifacts=wiring.artifacts(),
        orchestrator=wiring.orchestrator(),
        cluster=across_teams(
            ClusterClient.from_settings(settings), [t.k8s_namespace for t in settings.teams()]
        ),
        intake=wiring.intake(log, ledger),
        log=log,
        publish=send or notify.publish,
        coordinator=wiring.coordinator(log, ledger),
        **overrides,
    )


def on_tick(data: Any, log: Logger) -> PassReport:
    """``reconcile``: one pass per Cloud Scheduler tick (via Pub/Sub); the tick's data is ignored."""
    return from_services(log).run_pass()
