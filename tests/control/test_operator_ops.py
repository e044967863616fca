"""An operator's operations (rlpipe.control.operator_ops): cancel, retry and promote, each from its
order and the verified caller, on a real ledger (fake-gcs-server).

The HTTP side (who may call, status codes) is tests/control/stage/test_stage_identities.py; the CLI's cancel of a
sweep, through ``cli.runs.cancel``, is tests/cli/test_cli_sweep.py and tests/cli/test_cancel_credentials.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from rlpipe.cluster.log_cursor import LogCursor
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.control import operator_ops, services
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.intake_result import IntakeResult
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.stage.service import StageService
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.operator_contract import CancelAnswer
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Failure, GateRecord, RunRecord, Source, SweepParent
from tests.conftest import Buckets, minimal_request
from tests.harness import operator_answers

OPERATOR = "rlpipe-operator@my-project.iam.gserviceaccount.com"


def wired_policies(ledger: Ledger) -> Any:
    """The run policies as control.services wires a deployment's (no teams declared)."""
    return services.run_policies(Settings(project="p"), ledger, ledger.store, Logger("test"))


KEY = "0123456789abcdef0123"


@dataclass
class Cluster:
    """Deletes nothing; ``refuse`` makes the deletion of a run's workloads fail."""

    refuse: bool = False
    deleted: list[str] = field(default_factory=list)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        return obj

    def status(self, name: str, **_: Any) -> WorkloadStatus:
        raise AssertionError("no status is read")

    def delete_run(self, run_id: str) -> list[str]:
        if self.refuse:
            raise ConnectionError("the API server is unreachable")
        self.deleted.append(run_id)
        return [f"{run_id}-train-a1"]

    def delete(self, kind: Any, name: str) -> bool:
        return True

    def read_log(self, jobset: str, cursor: LogCursor | None) -> tuple[list[str], LogCursor | None, bool]:
        return [], cursor, False


def _record(run_id: str, state: str, **fields: Any) -> RunRecord:
    request = validate_request(minimal_request()).model_dump(mode="json")
    record = RunRecord(run_id=run_id, key=f"k:{run_id}", source=Source(kind="cli"), request=request, **fields)
    record.state = state  # type: ignore[assignment]
    record.execution.name = f"projects/p/locations/l/workflows/w/executions/{run_id}-e"
    return record


@pytest.fixture
def ledger(buckets: Buckets) -> Ledger:
    return Ledger(buckets.store("state"), sleep=lambda s: None)


def _service(buckets: Buckets, ledger: Ledger, cluster: Cluster) -> StageService:
    return StageService(
        settings=Settings(project="p", artifacts_bucket=buckets.artifacts, state_bucket=buckets.state),
        ledger=ledger,
        artifacts=buckets.store("artifacts"),
        state=buckets.store("state"),
        cluster=cluster,
        log=Logger("test"),
    )


@pytest.mark.parametrize("refuse", [False, True], ids=["cleaned up", "cleanup failed"])
def test_cancel_finishes_the_run_with_the_caller_and_its_rule(
    buckets: Buckets, ledger: Ledger, refuse: bool
) -> None:
    assert ledger.claim(_record("rcancelop001", "training"))
    cluster = Cluster(refuse=refuse)
    answer = operator_ops.cancel(
        _service(buckets, ledger, cluster), operator_ops.CancelOrder("rcancelop001"), OPERATOR
    )
    assert answer["state"] == "cancelled"
    record = ledger.get("rcancelop001")
    assert record is not None and record.failure is not None
    assert (record.failure.tag, record.failure.caller, record.failure.rule) == (
        "cancelled",
        OPERATOR,
        "operator-cancelled",
    )
    if refuse:  # reported, not fatal: the run is still finished, reconcile deletes what is left
        assert answer["deleted"] == [] and "unreachable" in answer["cleanup_error"]
    else:
        assert answer["deleted"] == ["rcancelop001-train-a1"] and "cleanup_error" not in answer


def test_cancel_of_a_run_without_a_ledger_deletes_nothing(buckets: Buckets, ledger: Ledger) -> None:
    cluster = Cluster()
    with pytest.raises(PermanentFailure, match="has no ledger"):
        operator_ops.cancel(
            _service(buckets, ledger, cluster), operator_ops.CancelOrder("rnoledger001"), OPERATOR
        )
    assert cluster.deleted == []


class Outside:
    """The CLI's side of a cancel: each execution cancel and the stage call, in order."""

    def __init__(self, ledger: Ledger, refuse: frozenset[str] = frozenset()) -> None:
        self.ledger, self.refuse, self.calls = ledger, refuse, []  # type: list[tuple[str, str]]

    def cancel_execution(self, run_id: str, name: str) -> dict[str, Any]:
        self.calls.append(("execution", run_id))
        if run_id in self.refuse:
            return {"execution_cancelled": False, "execution_error": "PermissionDenied"}
        return {"execution_cancelled": True}

    def cancel(self, parent: RunRecord) -> dict[str, Any]:
        """``rlpipe cancel`` of ``parent`` from outside, with the deployment's run policies."""
        return operator_ops.cancel_from_outside(
            self.ledger,
            parent.run_id,
            parent,
            policies=wired_policies(self.ledger),
            cancel_execution=self.cancel_execution,
            end_run=self.end_run,
        )

    def end_run(self, run_id: str) -> CancelAnswer:
        self.calls.append(("stage cancel", run_id))
        parent = self.ledger.get(run_id)
        for child_id in parent.sweep.children if parent and parent.sweep and not parent.terminal else ():
            if child_id not in self.refuse:  # (one left as it was: each state is read after the cancel)
                self.ledger.edit(child_id, _cancelled)
        return operator_answers.cancelled(run_id, cleanup_error="ApiException: 503")


def _cancelled(r: RunRecord) -> str | None:
    if r.terminal:
        return None
    r.state = "cancelled"
    return "cancelled"


def test_from_outside_the_childrens_executions_go_first_then_its_own_then_the_run_ends(
    ledger: Ledger,
) -> None:
    children = [
        _record("rchildop0001", "training"),
        _record("rchildop0002", "succeeded"),  # ended: its execution is left alone
        _record("rchildop0003", "accepted"),  # its execution refused: reported, the rest goes on
    ]
    parent = _record(
        "rparentop001",
        "training",
        sweep=SweepParent(children=[c.run_id for c in children], points=[{}, {}, {}], max_parallel=1),
    )
    for record in (*children, parent):
        assert ledger.claim(record)
    outside = Outside(ledger, refuse=frozenset({"rchildop0003"}))
    result = outside.cancel(parent)
    assert outside.calls == [
        ("execution", "rchildop0001"),
        ("execution", "rchildop0003"),
        ("execution", "rparentop001"),
        ("stage cancel", "rparentop001"),
    ]
    assert [(c["run_id"], c["was"], c["state"], c["execution_cancelled"]) for c in result["children"]] == [
        ("rchildop0001", "training", "cancelled", True),
        ("rchildop0003", "accepted", "accepted", False),
    ]
    assert result["execution_cancelled"] is True and result["cleanup_error"] == "ApiException: 503"


def test_from_outside_a_sweep_that_ended_cancels_no_child(ledger: Ledger) -> None:
    child = _record("rchildop0001", "training")  # (a record out of step: the parent says ended)
    parent = _record(
        "rparentop002", "failed", sweep=SweepParent(children=[child.run_id], points=[{}], max_parallel=1)
    )
    for record in (child, parent):
        assert ledger.claim(record)
    outside = Outside(ledger)
    result = outside.cancel(parent)
    assert outside.calls == [("execution", "rparentop002"), ("stage cancel", "rparentop002")]
    assert result["children"] == []


# ---- orders -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("read", "body", "words"),
    [
        (operator_ops.cancel_order, {"run_id": "Not A Run; rm -rf"}, "run_id"),
        (operator_ops.promote_order, {"run_id": "rgated000001", "by": "  ", "reason": "ok"}, "by must name"),
        (
            operator_ops.promote_order,
            {"run_id": "rgated000001", "by": "ana", "reason": "x" * 5000},
            "reason must",
        ),
        (operator_ops.retry_order, {"run_id": "rfailed00001", "reason": "go", "key": "short"}, "key must"),
        (
            operator_ops.retry_order,
            {"run_id": "rfailed00001", "reason": "go", "key": KEY, "sudo": 1},
            "unknown",
        ),
    ],
)
def test_a_malformed_order_says_what_to_fix_without_echoing_it(
    read: Any, body: dict[str, Any], words: str
) -> None:
    with pytest.raises(operator_ops.BadOrder) as info:
        read(body)
    assert words in str(info.value) and "rm -rf" not in str(info.value) and "xxxxx" not in str(info.value)


# ---- retry and promote -------------------------------------------------------------------------------


class Starts:
    def __init__(self, outcome: str = "started") -> None:
        self.outcome, self.started = outcome, []  # type: str, list[str]

    def __call__(self, run_id: str) -> IntakeResult:
        self.started.append(run_id)
        return IntakeResult(self.outcome, run_id)


def test_retry_opens_one_round_per_key_and_starts_it(ledger: Ledger) -> None:
    record = _record("rfailedop001", "failed")
    record.failure = Failure(tag="permanent", message="deadline exceeded", stage="train", attempt=1)
    assert ledger.claim(record)
    order = operator_ops.retry_order({"run_id": "rfailedop001", "reason": "capacity is back", "key": KEY})
    starts = Starts()
    first = operator_ops.retry_run(ledger, wired_policies(ledger), starts, order, OPERATOR, Logger("test"))
    again = operator_ops.retry_run(
        ledger, wired_policies(ledger), starts, order, OPERATOR, Logger("test")
    )  # a lost answer
    assert (first["outcome"], first["round"]) == ("started", 2)
    assert (again["outcome"], again["round"]) == ("duplicate", 2)
    assert starts.started == ["rfailedop001", "rfailedop001"]  # intake's start is exactly-once itself
    stored = ledger.get("rfailedop001")
    assert stored is not None and stored.round == 2 and stored.rounds[0].caller == OPERATOR
    assert stored.rounds[0].by == OPERATOR  # no name given: the verified caller's


def test_retry_refusals_are_permanent_failures_with_the_reason(ledger: Ledger) -> None:
    assert ledger.claim(_record("rrunningop01", "training"))
    order = operator_ops.retry_order({"run_id": "rrunningop01", "reason": "again", "key": KEY})
    with pytest.raises(PermanentFailure, match="still running"):
        operator_ops.retry_run(ledger, wired_policies(ledger), Starts(), order, OPERATOR, Logger("test"))
    assert ledger.claim(_record("rnostartop01", "failed"))
    order = operator_ops.retry_order({"run_id": "rnostartop01", "reason": "again", "key": KEY})
    with pytest.raises(PermanentFailure, match="could not start"):
        operator_ops.retry_run(
            ledger, wired_policies(ledger), Starts("start-failed"), order, OPERATOR, Logger("test")
        )


def test_promote_records_who_and_starts_the_run_and_refuses_a_run_not_gated(ledger: Ledger) -> None:
    gated = _record("rgatedop0001", "gated", gate=GateRecord(passed=False, reasons=["below 0.6"]))
    gated.execution.name = None
    assert ledger.claim(gated)
    starts = Starts()
    order = operator_ops.promote_order(
        {"run_id": "rgatedop0001", "by": " ana ", "reason": "samples read fine"}
    )
    answer = operator_ops.promote(ledger, wired_policies(ledger), starts, order, OPERATOR, Logger("test"))
    assert (answer["by"], answer["state"]) == ("ana", "training") and starts.started == ["rgatedop0001"]
    record = ledger.get("rgatedop0001")
    assert record is not None and record.lineage.promoted is not None
    assert record.lineage.promoted.caller == OPERATOR
    assert ledger.claim(_record("rsucceeded01", "succeeded"))
    with pytest.raises(PermanentFailure, match="only a gated run can be promoted"):
        operator_ops.promote(
            ledger,
            wired_policies(ledger),
            starts,
            operator_ops.promote_order({"run_id": "rsucceeded01", "by": "ana", "reason": "r"}),
            OPERATOR,
            Logger("test"),
        )
