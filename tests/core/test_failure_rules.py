"""The failure rules (rlpipe.core.failure_rules), one table: evidence in, the rule that decides, the
phase, the class and the shape of the message out.

Every rule of every list has a row (``test_every_rule_has_a_row``), so a rule cannot land without
one; the rows that name a rule of a later position show the precedence (the first rule that holds
decides). The behaviour against real Kubernetes documents stays with the tests of
``cluster.status.summarize`` (tests/cluster/client/test_cluster_status.py, test_kueue_eviction.py, test_preemption_race.py)
and of ``stage status`` (test_stage.py, test_retry.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.core.failure_rules import reported
from rlpipe.core.failure_rules.attempt import ATTEMPT_RULES, decide_attempt
from rlpipe.core.failure_rules.evidence import (
    AttemptEvidence,
    BudgetUse,
    Finding,
    Sign,
    WorkloadEvidence,
)
from rlpipe.core.failure_rules.verdict import Verdict
from rlpipe.core.failure_rules.workload import WORKLOAD_RULES, decide_workload
from rlpipe.core.failures import FailureClass
from rlpipe.core.layout import Completeness
from rlpipe.core.runs.record import Attempt
from rlpipe.core.train_verdict import TrainOutcome, TrainVerdict

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PIPELINE = Path(__file__).resolve().parents[2] / "workflows" / "pipeline.yaml"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def workload(**facts: Any) -> WorkloadEvidence:
    """A JobSet ``js`` admitted and running on its nodes unless ``facts`` say otherwise."""
    base: dict[str, Any] = {
        "kind": "JobSet",
        "name": "js",
        "now": NOW,
        "on_node": True,
        "pod_phases": {"Running": 2},
        "queued_deadline_seconds": 600.0,
    }
    return WorkloadEvidence(**{**base, **facts})


DISRUPTED = Finding(Sign.POD_DISRUPTED, "worker pod w0 on node n1 was disrupted (PreemptionByScheduler)")
OOM = Finding(Sign.OOM_KILLED, "head pod h0 container main was OOMKilled (exit code 137)")
PULL = Finding(
    Sign.CONTAINER_CONFIG_ERROR,
    "head pod h0 container main is waiting: ErrImagePull: not found",
    never_resolves=True,
)
REGISTRY = Finding(Sign.IMAGE_PULL_REGISTRY_ERROR, "head pod h0 container main is waiting: ErrImagePull: 503")
EXIT_75 = Finding(Sign.PROGRAM_EXIT, "head pod h0 container main exited with code 75", exit_code=75)
EXIT_1 = Finding(Sign.PROGRAM_EXIT, "head pod h0 container main exited with code 1", exit_code=1)
SIDECAR_143 = Finding(Sign.OTHER_EXIT, "worker pod w0 container proxy exited with code 143", exit_code=143)
UNSCHEDULED_OLD = Finding(
    Sign.POD_UNSCHEDULABLE, "worker pod w0 is Unschedulable: 0/4 nodes", pending_since=ago(700)
)
UNSCHEDULED_NEW = Finding(
    Sign.POD_UNSCHEDULABLE, "worker pod w1 is Unschedulable: 0/4 nodes", pending_since=ago(30)
)


def evicted(reason: str) -> Finding:
    return Finding(Sign.KUEUE_EVICTED, f"evicted by Kueue ({reason}: because)", eviction_reason=reason)


@dataclass(frozen=True)
class Row:
    """Evidence and what the rules must make of it: ``message`` is a regular expression."""

    id: str
    evidence: WorkloadEvidence | AttemptEvidence
    rule: str
    phase: str
    failure_class: FailureClass | None
    message: str
    exhausted: FailureClass | None = None


P, C, T, R, X = (
    FailureClass.PREEMPTED,
    FailureClass.CAPACITY,
    FailureClass.TRANSIENT,
    FailureClass.RESOURCES,
    FailureClass.PERMANENT,
)

WORKLOAD_ROWS = [
    Row(
        "gone",
        workload(exists=False),
        "workload-missing",
        "failed",
        X,
        r"^workload js not found \(deleted\?\)$",
    ),
    Row(
        "success beats any pod evidence",
        workload(succeeded=True, success_condition="Completed: all jobs done", findings=(SIDECAR_143, OOM)),
        "workload-succeeded",
        "succeeded",
        None,
        r"^JobSet js succeeded \(Completed: all jobs done\)$",
    ),
    Row(
        "failed: preemption beats an OOM and an exit",
        workload(failed=True, failed_condition="FailedJobs: x", findings=(EXIT_1, OOM, DISRUPTED)),
        "workload-failed",
        "failed",
        P,
        r"^JobSet js failed: worker pod w0 .*was disrupted",
    ),
    Row(
        "failed: an OOM beats the program's exit",
        workload(failed=True, findings=(EXIT_1, OOM)),
        "workload-failed",
        "failed",
        R,
        r"^JobSet js failed: head pod h0 container main was OOMKilled",
    ),
    Row(
        "failed: a retryable exit code is transient",
        workload(failed=True, findings=(SIDECAR_143, EXIT_75), retryable_exit_codes=frozenset({75})),
        "workload-failed",
        "failed",
        T,
        r"exited with code 75 \[retryable exit code\]$",
    ),
    Row(
        "failed: another exit code is the program's fault",
        workload(failed=True, findings=(SIDECAR_143, EXIT_1), retryable_exit_codes=frozenset({75})),
        "workload-failed",
        "failed",
        X,
        r"container main exited with code 1$",
    ),
    Row(
        "failed: a registry error on a pull is transient",
        workload(failed=True, findings=(REGISTRY,)),
        "workload-failed",
        "failed",
        T,
        r"ErrImagePull: 503 \[registry error\]$",
    ),
    Row(
        "failed: Kueue's preemption beats a capacity finding",
        workload(failed=True, findings=(UNSCHEDULED_NEW,), eviction=evicted("Preempted")),
        "workload-failed",
        "failed",
        P,
        r"^JobSet js failed: evicted by Kueue \(Preempted",
    ),
    Row(
        "failed without evidence",
        workload(failed=True, failed_condition="BackoffLimitExceeded: too many"),
        "workload-failed",
        "failed",
        X,
        r"^JobSet js failed \(BackoffLimitExceeded: too many\); no pod evidence left",
    ),
    Row(
        "terminalState Failed without evidence",
        workload(failed=True),
        "workload-failed",
        "failed",
        X,
        r"^JobSet js failed \(terminalState Failed\);",
    ),
    Row(
        "evicted: pods not ready in time is capacity",
        workload(suspended=True, eviction=evicted("PodsReadyTimeout"), findings=(EXIT_1,)),
        "kueue-evicted",
        "failed",
        C,
        r"^JobSet js failed: evicted by Kueue \(PodsReadyTimeout: because\)$",
    ),
    Row(
        "evicted: a stopped queue is permanent",
        workload(suspended=True, eviction=evicted("ClusterQueueStopped")),
        "kueue-evicted",
        "failed",
        X,
        r"evicted by Kueue \(ClusterQueueStopped",
    ),
    Row(
        "evicted: a rejected flex-start admission check is capacity",
        workload(suspended=True, eviction=evicted("DeactivatedDueToAdmissionCheck")),
        "kueue-evicted",
        "failed",
        C,
        r"DeactivatedDueToAdmissionCheck",
    ),
    Row(
        "certain to fail before the controllers say so",
        workload(
            failure_certain=Finding(
                Sign.FAILURE_CERTAIN, "worker pod w0 was disrupted (x); the JobSet fails next: y"
            ),
            findings=(EXIT_1,),
        ),
        "failure-certain",
        "failed",
        P,
        r"^JobSet js failed: worker pod w0 was disrupted .*the JobSet fails next",
    ),
    Row(
        "an image that cannot be pulled never starts",
        workload(findings=(UNSCHEDULED_NEW, PULL)),
        "cannot-start",
        "failed",
        X,
        r"^JobSet js failed: head pod h0 container main is waiting: ErrImagePull",
    ),
    Row(
        "not admitted by the deadline",
        workload(suspended=True, suspended_since=ago(700), queue="team", kueue_says="quota full"),
        "not-admitted-by-deadline",
        "failed",
        C,
        r"^JobSet js not admitted after 11m \(deadline 10m\) in Kueue queue 'team'; Kueue: quota full$",
    ),
    Row(
        "queued, requeued by Kueue after an admission check",
        workload(suspended=True, suspended_since=ago(90), eviction=evicted("AdmissionCheck")),
        "queued-in-kueue",
        "queued",
        None,
        r"^JobSet js queued for 1m in suspended, no Kueue queue label.*\(not admitted\); "
        r"evicted by Kueue \(AdmissionCheck: because\), requeued by Kueue$",
    ),
    Row(
        "unschedulable by the deadline: the oldest pod is named",
        workload(on_node=False, findings=(UNSCHEDULED_NEW, UNSCHEDULED_OLD)),
        "unschedulable-by-deadline",
        "failed",
        C,
        r"^JobSet js failed: worker pod w0 is Unschedulable: 0/4 nodes \(\+1 more pods\), "
        r"for 11m \(deadline 10m\)$",
    ),
    Row(
        "waiting for capacity",
        workload(on_node=False, findings=(UNSCHEDULED_NEW,)),
        "waiting-for-capacity",
        "queued",
        None,
        r"^JobSet js waiting for capacity for 30s: worker pod w1 is Unschedulable",
    ),
    Row(
        "pods refused by admission, not for quota",
        workload(
            on_node=False, awaiting_pods_since=ago(900), failed_create="FailedCreate: denied by webhook"
        ),
        "pods-not-created",
        "failed",
        X,
        r"^JobSet js admitted but no pod scheduled after 15m \(deadline 10m\); FailedCreate: denied by webhook$",
    ),
    Row(
        "pods refused for quota: capacity",
        workload(on_node=False, awaiting_pods_since=ago(900), failed_create="FailedCreate: exceeded Quota"),
        "no-pod-scheduled-by-deadline",
        "failed",
        C,
        r"^JobSet js admitted but no pod scheduled after 15m .*exceeded Quota$",
    ),
    Row(
        "no pod on a node by the deadline",
        workload(on_node=False, awaiting_pods_since=ago(601)),
        "no-pod-scheduled-by-deadline",
        "failed",
        C,
        r"^JobSet js admitted but no pod scheduled after 10m \(deadline 10m\)$",
    ),
    Row(
        "admitted, waiting for pods",
        workload(on_node=False, awaiting_pods_since=ago(5), failed_create="FailedCreate: denied by webhook"),
        "waiting-for-pods",
        "queued",
        None,
        r"^JobSet js admitted, waiting for pods for 5s; FailedCreate: denied",
    ),
    Row(
        "running: an OOM of a live workload is watched, not fatal",
        workload(findings=(EXIT_1, OOM), pod_phases={"Running": 3, "Failed": 1}),
        "running",
        "running",
        None,
        r"^JobSet js running \(pods: 1 failed, 3 running\); watching: head pod h0 container main was OOMKilled",
    ),
]


def attempt(**facts: Any) -> AttemptEvidence:
    """Train attempt 2 (workload ``w``), whose workload is running, unless ``facts`` say otherwise."""
    base: dict[str, Any] = {"stage": "train", "workload": "w", "phase": "running", "rule": "running"}
    return AttemptEvidence(**{**base, **facts})


def failed_with(cls: FailureClass, budget: BudgetUse | None = None) -> AttemptEvidence:
    return attempt(
        phase="failed", failure_class=cls, message="node reclaimed", rule="workload-failed", budget=budget
    )


UNFINISHED = TrainOutcome(
    TrainVerdict.NO_END_LINE, "no end line in the head's log", committed=40, expected=50
)
CLEAN_END = TrainOutcome(TrainVerdict.DONE, "done", committed=40, expected=50)
INCOMPLETE = Completeness(False, "step 50 has no commit_success.txt")

ATTEMPT_ROWS = [
    Row(
        "exit 0 without a training's end",
        attempt(phase="succeeded", rule="workload-succeeded", train_end=UNFINISHED, output=INCOMPLETE),
        "train-ended-unfinished",
        "failed",
        X,
        r"^w: no end line in the head's log$",
    ),
    Row(
        "succeeded without its output",
        attempt(stage="export", phase="succeeded", rule="workload-succeeded", output=INCOMPLETE),
        "output-incomplete",
        "failed",
        X,
        r"^w succeeded but its output is incomplete: step 50 has no commit_success\.txt$",
    ),
    Row(
        "a clean end short of the config's last step is done (train's own verdict)",
        attempt(
            phase="succeeded", rule="workload-succeeded", message="ok", train_end=CLEAN_END, output=INCOMPLETE
        ),
        "workload-succeeded",
        "succeeded",
        None,
        r"^ok$",
    ),
    Row(
        "the class's budget is spent",
        failed_with(P, BudgetUse(budget=2, used=2, failed=2, max_retries=10)),
        "budget-exhausted",
        "failed",
        X,
        r"^preempted budget of 2 exhausted for train: node reclaimed$",
        exhausted=P,
    ),
    Row(
        "the stage's retry cap is reached",
        failed_with(C, BudgetUse(budget=10, used=1, failed=3, max_retries=3)),
        "retry-cap-reached",
        "failed",
        X,
        r"^retry cap of 3 reached for train: capacity: node reclaimed$",
        exhausted=C,
    ),
    Row(
        "within its budget the workload's verdict stands",
        failed_with(P, BudgetUse(budget=2, used=1, failed=1, max_retries=3)),
        "workload-failed",
        "failed",
        P,
        r"^node reclaimed$",
    ),
    Row(
        "a permanent failure draws on no budget",
        failed_with(X),
        "workload-failed",
        "failed",
        X,
        r"^node reclaimed$",
    ),
    Row(
        "past the stage's deadline",
        attempt(phase="queued", rule="queued-in-kueue", age_seconds=7201, timeout_seconds=7200),
        "stage-deadline",
        "failed",
        X,
        r"^train deadline exceeded \(7200 s since its first launch\)$",
    ),
    Row(
        "within the stage's deadline",
        attempt(message="JobSet w running", age_seconds=7200, timeout_seconds=7200),
        "running",
        "running",
        None,
        r"^JobSet w running$",
    ),
]

ROWS = WORKLOAD_ROWS + ATTEMPT_ROWS


def decide(evidence: WorkloadEvidence | AttemptEvidence) -> Verdict:
    if isinstance(evidence, WorkloadEvidence):
        return decide_workload(evidence)
    return decide_attempt(evidence)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_rule_table(row: Row) -> None:
    verdict = decide(row.evidence)
    assert (verdict.rule, verdict.phase, verdict.failure_class, verdict.exhausted) == (
        row.rule,
        row.phase,
        row.failure_class,
        row.exhausted,
    )
    assert re.search(row.message, verdict.message), verdict.message


def test_every_rule_has_a_row() -> None:
    """A new rule lands with its row: each rule of each list decides at least one row."""
    tabled = {row.rule for row in ROWS}
    untested = [rule.name for rule in (*WORKLOAD_RULES, *ATTEMPT_RULES) if rule.name not in tabled]
    assert untested == []
    names = [rule.name for rule in (*WORKLOAD_RULES, *ATTEMPT_RULES)]
    assert len(names) == len(set(names)), "two rules share a name: the ledger could not tell them apart"


def test_a_failure_carries_its_rule_to_the_status_answer() -> None:
    verdict = decide(failed_with(P, BudgetUse(budget=1, used=1, failed=1, max_retries=5)))
    assert verdict.failure() == {
        "tag": "permanent",
        "message": "preempted budget of 1 exhausted for train: node reclaimed",
        "exhausted": "preempted",
        "rule": "budget-exhausted",
    }
    assert decide(attempt()).failure() is None


# ---- the rule behind a failure the workflow reports ------------------------------------------------


def recorded(failure_class: str | None, rule: str | None) -> Attempt:
    return Attempt(
        stage="train",
        attempt=2,
        workload="w",
        launched_at="2026-03-01T00:00:00.000000Z",
        phase="failed",
        failure_class=failure_class,
        failure_rule=rule,
    )


REPORTED = [
    (
        "the workflow's own deadline",
        "permanent",
        "deadline exceeded",
        recorded("preempted", "workload-failed"),
        "workflow-deadline",
    ),
    ("the gate held the model", "gated", "mean_reward 0.2 < 0.5", None, "quality-gate"),
    (
        "the attempt's failure, raised",
        "permanent",
        "preempted budget …",
        recorded("permanent", "budget-exhausted"),
        "budget-exhausted",
    ),
    (
        "a retryable class raised once retries ran out",
        "preempted",
        "node reclaimed",
        recorded("preempted", "workload-failed"),
        "workload-failed",
    ),
    (
        "not the attempt's failure",
        "permanent",
        "HttpError: 500",
        recorded("preempted", "workload-failed"),
        "otherwise",
    ),
    (
        "an attempt from a ledger older than the rules",
        "permanent",
        "x",
        recorded("permanent", None),
        "otherwise",
    ),
    ("no attempt named", "permanent", "HttpError: 500", None, "otherwise"),
]


@pytest.mark.parametrize(
    ("tag", "message", "named", "rule"), [r[1:] for r in REPORTED], ids=[r[0] for r in REPORTED]
)
def test_reported_rule(tag: str, message: str, named: Attempt | None, rule: str) -> None:
    assert reported.reported_rule(tag, message, named, otherwise="otherwise") == rule


def test_the_workflow_raises_the_deadline_message_the_rule_reads() -> None:
    """``reported_rule`` knows the workflow's deadline by its message: the step must raise exactly it."""
    pipeline = yaml.safe_load(PIPELINE.read_text())
    raised: list[Any] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            step = node.get("deadline_exceeded")
            if isinstance(step, dict) and "raise" in step:
                raised.append(step["raise"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(pipeline)
    assert raised, "workflows/pipeline.yaml has no deadline_exceeded step"
    assert all(
        r["message"] == reported.WORKFLOW_DEADLINE_MESSAGE and r["tags"] == ["permanent"] for r in raised
    )


def test_a_new_round_helps_only_what_a_round_bounds() -> None:
    """Budgets, the retry cap and deadlines start afresh in a new round; nothing else does."""
    assert {
        "budget-exhausted",
        "retry-cap-reached",
        "stage-deadline",
        "workflow-deadline",
        "wait-bound",
    } == reported.ROUND_BOUND
    known = {rule.name for rule in (*WORKLOAD_RULES, *ATTEMPT_RULES)} | reported.RUN_ENDINGS
    assert known >= reported.ROUND_BOUND
