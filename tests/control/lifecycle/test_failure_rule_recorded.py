"""The rule that decided a failure, recorded in the ledger and read back by the CLI.

``stage status`` records the deciding rule on the attempt (``Attempt.failure_rule``); ``finish``
carries it to the run's failure (``Failure.rule``) from the workflow's report, which names no rule;
``rlpipe status`` and ``rlpipe watch`` offer ``rlpipe retry`` by that name (a spent budget or a
deadline: a new round can end differently). Real ledger (fake-gcs-server); the cluster is a
stand-in answering the workload's status, since the rules themselves have their own table
(tests/core/test_failure_rules.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from rlpipe.cli.watch import next_command, retry_would_help
from rlpipe.cluster.log_cursor import LogCursor
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.stage.service import StageService
from rlpipe.core.failures import FailureClass
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import RunRecord, Source
from tests.conftest import Buckets, minimal_request

PREEMPTED_REASON = "Job r-convert-a1 failed: pod p was disrupted (PreemptionByScheduler)"


@dataclass
class StandInCluster:
    """Answers each workload's status as set in ``statuses``; applies and deletes nothing real."""

    statuses: dict[str, WorkloadStatus] = field(default_factory=dict)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {**obj, "metadata": {**obj["metadata"], "uid": "uid-" + obj["metadata"]["name"]}}

    def status(self, name: str, *, kind: Any, **_: Any) -> WorkloadStatus:
        return self.statuses[name]

    def delete_run(self, run_id: str) -> list[str]:
        return []

    def delete(self, kind: Any, name: str) -> bool:
        return True

    def read_log(self, jobset: str, cursor: LogCursor | None) -> tuple[list[str], LogCursor | None, bool]:
        return [], cursor, False


@dataclass
class Env:
    service: StageService
    cluster: StandInCluster
    clock: list[float]

    def claim(self, run_id: str, **fields: Any) -> None:
        req = validate_request(minimal_request(**fields))
        record = RunRecord(
            run_id=run_id, key=f"k:{run_id}", source=Source(kind="cli"), request=req.model_dump(mode="json")
        )
        assert self.service.ledger.claim(record)

    def record(self, run_id: str) -> RunRecord:
        record = self.service.ledger.get(run_id)
        assert record is not None
        return record


@pytest.fixture
def env(buckets: Buckets) -> Env:
    settings = Settings(project="p", artifacts_bucket=buckets.artifacts, state_bucket=buckets.state)
    cluster = StandInCluster()
    clock = [time.time()]  # launches are stamped with the real time; the test moves this one on
    service = StageService(
        settings=settings,
        ledger=buckets.ledger(),
        artifacts=buckets.store("artifacts"),
        state=buckets.store("state"),
        cluster=cluster,
        log=Logger("test"),
        clock=lambda: clock[0],
    )
    return Env(service, cluster, clock)


def _failed(name: str, cls: FailureClass, reason: str) -> WorkloadStatus:
    return WorkloadStatus(
        kind="Job", name=name, phase="failed", failure_class=cls, reason=reason, rule="workload-failed"
    )


def test_a_spent_budget_is_recorded_by_name_and_offers_a_retry(env: Env) -> None:
    run = "rrulebudget1"
    env.claim(run, retry={"budgets": {"preempted": 1}})
    answers = []
    for attempt in (1, 2):
        env.service.launch(run, "convert", attempt)
        name = f"{run}-convert-a{attempt}"
        env.cluster.statuses[name] = _failed(name, FailureClass.PREEMPTED, PREEMPTED_REASON)
        answers.append(env.service.status(run, "convert", attempt)["failure"])
    assert [a.get("rule") for a in answers] == ["workload-failed", "budget-exhausted"]
    assert [(a.failure_class, a.failure_rule) for a in env.record(run).attempts] == [
        ("preempted", "workload-failed"),
        ("permanent", "budget-exhausted"),
    ]
    # The workflow raises the answer and reports it to finish, without a rule (failure_of).
    last = answers[-1]
    report = {"tag": last["tag"], "message": last["message"], "stage": "convert", "attempt": 2}
    message = env.service.finish(run, "failed", report)
    assert message["failure"]["rule"] == "budget-exhausted"
    record = env.record(run)
    assert record.failure is not None and record.failure.rule == "budget-exhausted"
    assert retry_would_help(record) and next_command(record) == f'rlpipe retry {run} --reason "…"'


def test_a_program_that_fails_names_no_retry(env: Env) -> None:
    """Even when its last words mention a deadline (a gRPC call of its own timed out): the rule
    says the program failed, and the same request fails the same way."""
    run = "rruleexit001"
    env.claim(run)
    env.service.launch(run, "convert", 1)
    name = f"{run}-convert-a1"
    reason = f"Job {name} failed: exited with code 1: grpc DEADLINE_EXCEEDED: deadline exceeded"
    env.cluster.statuses[name] = _failed(name, FailureClass.PERMANENT, reason)
    failure = env.service.status(run, "convert", 1)["failure"]
    env.service.finish(run, "failed", {**failure, "stage": "convert", "attempt": 1})
    record = env.record(run)
    assert record.failure is not None and record.failure.rule == "workload-failed"
    assert not retry_would_help(record) and next_command(record) is None


def test_a_stage_past_its_deadline_is_recorded_by_name_and_offers_a_retry(env: Env) -> None:
    run = "rruledeadln1"
    env.claim(run, timeouts={"convert": 3600})
    env.service.launch(run, "convert", 1)
    name = f"{run}-convert-a1"
    env.cluster.statuses[name] = WorkloadStatus(
        kind="Job", name=name, phase="running", reason=f"Job {name} running", rule="running"
    )
    assert env.service.status(run, "convert", 1)["failure"] is None
    env.clock[0] += 2 * 86400.0  # well past the hour since its launch
    failure = env.service.status(run, "convert", 1)["failure"]
    assert failure["rule"] == "stage-deadline" and failure["tag"] == "permanent"
    env.service.finish(
        run, "failed", {"tag": "permanent", "message": failure["message"], "stage": "convert", "attempt": 1}
    )
    record = env.record(run)
    assert record.failure is not None and record.failure.rule == "stage-deadline"
    assert retry_would_help(record)


@pytest.mark.parametrize(
    ("message", "rule", "helps"),
    [
        ("deadline exceeded", "workflow-deadline", True),  # workflows/pipeline.yaml's own deadline
        ("HttpError: 500 from stage launch", "workflow-reported", False),
    ],
)
def test_failures_the_workflow_decided_are_named(env: Env, message: str, rule: str, helps: bool) -> None:
    run = "rrulewflow01"
    env.claim(run)
    env.service.finish(
        run, "failed", {"tag": "permanent", "message": message, "stage": "train", "attempt": 1}
    )
    record = env.record(run)
    assert record.failure is not None and record.failure.rule == rule
    assert retry_would_help(record) is helps


def test_a_ledger_older_than_the_rules_loads_and_still_reads_a_spent_budget() -> None:
    old = {
        "run_id": "rold00000001",
        "key": "k",
        "source": {"kind": "cli"},
        "request": {},
        "state": "failed",
        "attempts": [
            {
                "stage": "train",
                "attempt": 3,
                "workload": "w",
                "launched_at": "2026-01-01T00:00:00.000000Z",
                "phase": "failed",
                "failure_class": "permanent",
                "budget_exhausted": "preempted",
            }
        ],
        "failure": {
            "tag": "permanent",
            "message": "preempted budget of 2 exhausted",
            "stage": "train",
            "attempt": 3,
        },
    }
    record = RunRecord.model_validate_json(json.dumps(old))
    assert record.failure is not None and record.failure.rule is None
    assert record.attempts[0].failure_rule is None
    assert retry_would_help(record)
    record.attempts[0].budget_exhausted = None
    assert not retry_would_help(record)


def _executed(state: str, error: dict[str, Any] | None = None) -> Any:
    from rlpipe.control.adapters.orchestrator import ExecutionInfo

    return ExecutionInfo(
        "projects/p/locations/l/workflows/w/executions/e1", state, error=json.dumps(error) if error else None
    )


def test_reconcile_names_the_rule_of_a_run_whose_execution_ended_without_finishing_it() -> None:
    from rlpipe.core.runs.record import Attempt
    from rlpipe.reconcile import rules

    record = RunRecord(
        run_id="rrulerecon01", key="k", source=Source(kind="cli"), request={}, state="training"
    )
    record.execution.name = "projects/p/locations/l/workflows/w/executions/e1"
    record.attempts = [
        Attempt(
            stage="train",
            attempt=2,
            workload="w",
            launched_at="2026-01-01T00:00:00.000000Z",
            phase="failed",
            failure_class="permanent",
            failure_rule="retry-cap-reached",
        )
    ]

    def rule(info: Any) -> str:
        action = rules.execution_action(record, info, None)
        assert action is not None and action.failure is not None
        return str(action.failure["rule"])

    raised = {"tags": ["permanent"], "stage": "train", "attempt": 2}
    assert (
        rule(_executed("FAILED", {**raised, "message": "retry cap of 3 reached for train: …"}))
        == "retry-cap-reached"
    )
    assert rule(_executed("FAILED", {**raised, "message": "deadline exceeded"})) == "workflow-deadline"
    assert rule(_executed("FAILED", {"tags": ["HttpError"], "message": "500"})) == "execution-failed"
    assert rule(None) == "execution-missing"
    assert rule(_executed("CANCELLED")) == "execution-cancelled"
