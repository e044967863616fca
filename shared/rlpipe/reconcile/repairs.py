"""Carrying out the reconciler's actions, each one idempotent and recorded in the run's history.

Every repair re-checks its evidence at the moment it writes: ledger changes go through the
ledger's compare-and-swap with the condition inside the change (a run that became terminal, or
now points at another execution, is left alone); deleting a workload that is already gone
records nothing; starting a claim goes through intake's own start path, whose lease makes two
reconcilers (or a reconciler and a redelivered request) start one execution between them.
A history event says what was found and what was done, so ``rlpipe status`` can explain why a
run changed without anyone reading function logs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle import run_metrics
from rlpipe.control.lifecycle.coordinator import RunCoordinator
from rlpipe.control.lifecycle.intake import Intake
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.runs.record import Failure, RunRecord
from rlpipe.reconcile.rules import Action

Status = Literal["planned", "done", "noop", "error"]


class Cluster(Protocol):
    def list_run_objects(self, run_id: str | None = None) -> list[Any]: ...
    def delete(self, kind: Any, name: str) -> bool: ...
    def delete_run(self, run_id: str) -> list[str]: ...


@dataclass(frozen=True)
class Outcome:
    run_id: str
    action: Action | None  # None: the run could not even be inspected (see detail)
    status: Status
    detail: str = ""

    def line(self) -> str:
        verb = {"planned": "would", "done": "did", "noop": "no-op", "error": "ERROR"}[self.status]
        body = self.action.line() if self.action else f"inspect run {self.run_id}"
        return f"{verb:<6} {body}" + (f" [{self.detail}]" if self.detail and self.status != "planned" else "")


@dataclass
class Repairs:
    settings: Settings
    ledger: Ledger
    cluster: Cluster
    intake: Intake
    log: Logger
    publish: Callable[[str, dict[str, Any]], Any] | None = None
    # A run's part in a group of runs (a sweep's): the group hears of a run this pass finished.
    coordinator: RunCoordinator = field(default_factory=RunCoordinator)

    def apply(self, action: Action) -> Outcome:
        log = self.log.bind(run_id=action.run_id)
        try:
            outcome: Outcome = getattr(self, f"_{action.kind}")(action, log)
        except Exception as exc:  # one bad run must not stop the pass; the next pass retries
            log.warning("reconcile action failed", action=action.kind, found=action.found, error=repr(exc))
            return Outcome(action.run_id, action, "error", f"{type(exc).__name__}: {exc}")
        if outcome.status == "done":
            log.info("reconciled", action=action.kind, found=action.found, done=outcome.detail or action.do)
        return outcome

    # ---- 1. start a claim ---------------------------------------------------------------------

    def _start(self, action: Action, log: Logger) -> Outcome:
        # Intake's start path with a fresh holder: the lease CAS, the create, the recording, and
        # the cancel of a second execution if the lease was lost meanwhile (intake.py).
        result = self.intake.start_claimed(action.run_id)
        if result.outcome != "started":
            return Outcome(action.run_id, action, "noop", f"{result.outcome}: execution {result.execution}")
        done = f"started execution {result.execution}"
        self.ledger.note(
            action.run_id, action.event, {"found": action.found, "done": done, "execution": result.execution}
        )
        return Outcome(action.run_id, action, "done", done)

    # ---- 2. finish a run whose execution ended --------------------------------------------------

    def _finish(self, action: Action, log: Logger) -> Outcome:

        def change(r: RunRecord) -> tuple[str | None, bool]:
            """→ (the event, whether this repair finished the run)."""
            if r.terminal or r.execution.name != action.execution:
                return None, False  # finished meanwhile, or now driven by another execution: not ours
            r.set_state(action.outcome)  # type: ignore[arg-type]
            r.failure = Failure(**action.failure) if action.failure else None
            return action.event, True

        updated, applied = self.ledger.update(
            action.run_id,
            change,
            detail=lambda r: {
                "state": r.state,
                "failure": r.failure.model_dump() if r.failure else None,
                "found": action.found,
                "done": action.do,
                "execution": action.execution,
            },
        )
        if not applied:
            return Outcome(action.run_id, action, "noop", f"run is {updated.state} (changed meanwhile)")
        self._notify(updated, log)
        group = self.coordinator.member_ended(
            updated
        )  # a sweep's child: its slot back, maybe the sweep's end
        if group is not None:
            self._notify(group, log)
        deleted = self.cluster.delete_run(action.run_id)
        if deleted:
            self.ledger.note(
                action.run_id,
                "reconcile-deleted",
                {
                    "found": f"the run is {updated.state} and still has workloads",
                    "done": f"deleted {', '.join(deleted)}",
                    "deleted": deleted,
                },
            )
        return Outcome(
            action.run_id,
            action,
            "done",
            f"marked {updated.state}" + (f"; deleted {', '.join(deleted)}" if deleted else ""),
        )

    def _notify(self, record: RunRecord, log: Logger) -> None:
        """Best-effort: the ledger is the record; a lost status message is only a message."""
        from rlpipe.control.adapters.notify import Notifier

        Notifier(self.settings, self.publish, log).send(record)

    def _topic(self, record: RunRecord) -> str | None:
        topic = record.request.get("notify") or self.settings.status_topic
        return self.settings.topic_path(str(topic)) if topic else None

    # ---- 3. delete an orphaned workload ---------------------------------------------------------

    def _delete(self, action: Action, log: Logger) -> Outcome:
        w = action.workload
        assert w is not None
        if not self.cluster.delete(w.kind, w.name):
            return Outcome(action.run_id, action, "noop", "already gone")
        done = f"deleted {w.kind} {w.name}"
        if action.run_known:
            self.ledger.note(
                action.run_id,
                action.event,
                {
                    "found": action.found,
                    "done": done,
                    "kind": w.kind,
                    "workload": w.name,
                    "stage": w.stage,
                    "attempt": w.attempt,
                },
            )
        return Outcome(action.run_id, action, "done", done)

    # ---- 4. report a stuck workload -------------------------------------------------------------

    def _report(self, action: Action, log: Logger) -> Outcome:
        assert action.message is not None
        record = self.ledger.get(action.run_id)
        topic = self._topic(record) if record else None
        if topic and self.publish is not None:
            self.publish(topic, action.message)  # before the note: a crash repeats a report, never loses it
            done = f"reported to {topic}; left it alone"
        else:
            done = "no status topic configured: recorded here only; left it alone"
        wait: dict[str, Any] = {
            k: action.message[k] for k in ("waits_for", "waits_since") if k in action.message
        }
        self.ledger.note(
            action.run_id,
            action.event,
            {"found": action.found, "done": done, "message": action.message["message"], **wait},
        )
        log.warning(
            "stuck workload",
            workload=action.workload.name if action.workload else None,
            detail=action.message["message"],
        )
        run_metrics.run_stuck(
            log,
            run_id=action.run_id,
            stage=record.stage if record else None,
            reason=action.message["message"],
        )
        return Outcome(action.run_id, action, "done", done)
