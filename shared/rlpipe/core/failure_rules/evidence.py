"""The evidence the failure rules judge, as plain data.

``cluster.evidence`` reads these facts from Kubernetes objects (it decides nothing: what a pod, a
Job or Kueue says becomes a :class:`Finding` with its :class:`Sign`); ``control.stage.service`` adds what
it learns beside the cluster (the train verdict, the output's completeness, the stage's age) and
``core.runs.budgets`` what the retry budgets have paid for. Every value is a plain value (strings,
numbers, times and the core's own types), so the rules are pure functions that a table of rows
can test without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

from rlpipe.core.failures import FailureClass
from rlpipe.core.layout import Completeness
from rlpipe.core.train_verdict import TrainOutcome

Phase = Literal["queued", "running", "succeeded", "failed"]


class Sign(StrEnum):
    """What one piece of evidence is: a fact, not yet a failure class (the rules give it one)."""

    JOB_FAILED_ON_DISRUPTION = "job-failed-on-disruption"  # its podFailurePolicy, on DisruptionTarget
    POD_DISRUPTED = "pod-disrupted"  # the pod's DisruptionTarget condition
    POD_EVICTED = "pod-evicted"  # the kubelet evicted it (node pressure, not its own use)
    POD_EVICTED_FOR_OVERUSE = "pod-evicted-for-overuse"  # over its ephemeral storage or memory
    NODE_LOST = "node-lost"  # the node went away under it (shutdown, lost, TPU maintenance)
    POD_UNSCHEDULABLE = "pod-unschedulable"  # never scheduled (``pending_since``: since when)
    IMAGE_PULL_REGISTRY_ERROR = "image-pull-registry-error"  # a pull failed on the registry's side
    CONTAINER_CONFIG_ERROR = "container-config-error"  # a wrong image, a missing Secret, …
    CONTAINER_CANNOT_START = "container-cannot-start"  # ContainerCannotRun, StartError
    OOM_KILLED = "oom-killed"
    PROGRAM_EXIT = "program-exit"  # the program's container exited non-zero (``exit_code``)
    OTHER_EXIT = "other-exit"  # any other container exited non-zero (a worker, a sidecar, an init)
    KUEUE_EVICTED = "kueue-evicted"  # Kueue took the admission back (``eviction_reason``)
    # A disruption the Job and JobSet controllers are certain to turn into the workload's failure,
    # read before they act (the preemption race: they delete the evidence when they do).
    FAILURE_CERTAIN = "failure-certain"


@dataclass(frozen=True)
class Finding:
    """One fact about why a workload is stuck or failed, with the line a person reads."""

    sign: Sign
    text: str
    exit_code: int | None = None  # PROGRAM_EXIT, OTHER_EXIT
    eviction_reason: str | None = None  # KUEUE_EVICTED: the Workload's Evicted condition reason
    never_resolves: bool = False  # a config error nothing fixes by itself: the pod can never start
    pending_since: datetime | None = None  # POD_UNSCHEDULABLE: when the wait started


@dataclass(frozen=True)
class WorkloadEvidence:
    """What a Job or JobSet, its pods, its child Jobs and its events say right now."""

    kind: str  # Job | JobSet
    name: str
    now: datetime
    exists: bool = True
    succeeded: bool = False  # its own terminal success (a condition or terminalState Completed)
    success_condition: str | None = None  # that condition's reason and message
    failed: bool = False  # Failed or FailureTarget, or terminalState Failed
    failed_condition: str | None = None  # that condition's reason and message (None: terminalState)
    findings: tuple[Finding, ...] = ()  # its pods' (in pod order), then its own and its child Jobs'
    eviction: Finding | None = None  # Kueue's latest eviction, while it is suspended again
    failure_certain: Finding | None = None
    suspended: bool = False  # not admitted (Kueue holds it)
    suspended_since: datetime | None = None  # its latest suspension (else its creation)
    queue: str | None = None  # the Kueue LocalQueue its label names
    kueue_says: str = ""  # why Kueue has not admitted it (its Pending or Suspended event)
    on_node: bool = False  # a pod of it is (or was) on a node
    awaiting_pods_since: datetime | None = None  # admitted at, started at, else created at
    failed_create: str = ""  # the controller's FailedCreate event: reason and message
    pod_phases: Mapping[str, int] = field(default_factory=dict)  # pod phase → count
    # The request's: exit codes of the program that mean "try again", and how long a workload may
    # wait for admission or for its pods before that is a capacity failure.
    retryable_exit_codes: frozenset[int] = frozenset()
    queued_deadline_seconds: float | None = None

    @property
    def what(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class BudgetUse:
    """What the stage's earlier attempts of this round have used of the retry budgets."""

    budget: int  # the request's budget for the failure's class
    used: int  # earlier attempts that failed with that class
    failed: int  # earlier attempts that failed with any class
    max_retries: int  # the request's cap on retries of one stage


@dataclass(frozen=True)
class AttemptEvidence:
    """What ``stage status`` knows of one attempt: the workload's verdict, and beside it the train
    verdict, the output's completeness, the stage's age and the budgets."""

    stage: str
    workload: str  # the attempt's workload name
    phase: Phase  # the workload's verdict
    failure_class: FailureClass | None = None
    message: str = ""
    rule: str | None = None  # the workload rule that decided it (None: a status no rule made)
    train_end: TrainOutcome | None = None  # train only, once its workload succeeded
    output: Completeness | None = None  # the stage's done rule, read in the artifacts bucket
    age_seconds: float | None = None  # since the stage's first launch in this round
    timeout_seconds: float | None = None  # the request's deadline for the stage
    budget: BudgetUse | None = None  # a failure of a class the workflow retries
