"""Retry's rules on a real ledger (fake-gcs-server): one round per delivery key, the refusals, the
round record, budgets and deadlines counted per round, the control document, and how the CLI
and the reconciler read a retried run."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.cli import runs
from rlpipe.cluster import RunObject
from rlpipe.control.lifecycle import retry_rounds
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.failures import FailureClass
from rlpipe.core.request import validate_request
from rlpipe.core.runs import budgets
from rlpipe.core.runs.record import LEDGER_TIME, Attempt, Failure, IllegalTransition, Round, RunRecord, Source
from rlpipe.reconcile import rules
from tests.conftest import Buckets, minimal_request

KEY = "gcs:requests-b/requests/retry-1.json#17"


def _ago(hours: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).strftime(LEDGER_TIME)


def _record(run_id: str, state: str = "failed", **fields: Any) -> RunRecord:
    request = validate_request(minimal_request(**fields)).model_dump(mode="json")
    record = RunRecord(run_id=run_id, key=f"request:{run_id}", source=Source(kind="cli"), request=request)
    record.state = state  # type: ignore[assignment]
    record.execution.name = f"projects/p/locations/l/workflows/w/executions/{run_id}-1"
    if state == "failed":
        record.failure = Failure(tag="permanent", message="exit code 1", stage="train", attempt=3)
    record.attempts = [
        Attempt(stage="train", attempt=n, workload=f"{run_id}-train-a{n}", launched_at=_ago(30 - n))
        for n in (1, 2, 3)
    ]
    for a, cls in zip(record.attempts, ("preempted", "preempted", "permanent"), strict=True):
        a.phase, a.failure_class = "failed", cls
    return record


@pytest.fixture
def ledger(buckets: Buckets) -> Ledger:
    return Ledger(buckets.store("state"), sleep=lambda s: None)


def _claim(ledger: Ledger, record: RunRecord) -> str:
    assert ledger.claim(record)
    return record.run_id


# ---- start_round ------------------------------------------------------------------------------


def test_a_failed_run_gets_a_new_round_with_its_record(ledger: Ledger) -> None:
    run_id = _claim(ledger, _record("rretry000001"))
    decision = retry_rounds.start_round(
        ledger, run_id, by="alice", reason=" flaky host fixed ", from_stage="train", key=KEY, caller="op@sa"
    )
    assert (decision.outcome, decision.round) == ("started", 2)
    record = ledger.get(run_id)
    assert record is not None
    assert (record.state, record.round, record.failure) == ("accepted", 2, None)
    assert record.execution.model_dump() == {
        "name": None,
        "started_at": None,
        "lease_holder": None,
        "lease_until": None,
        "start_attempts": 0,
    }, "a fresh execution, so intake's exactly-once start can take a lease"
    [round_] = record.rounds
    assert round_.model_dump(exclude={"at"}) == {
        "round": 2,
        "by": "alice",
        "caller": "op@sa",
        "from_stage": "train",
        "reason": "flaky host fixed",
        "key": KEY,
        "previous_state": "failed",
        "previous_failure": {
            "tag": "permanent",
            "message": "exit code 1",
            "stage": "train",
            "attempt": 3,
            "caller": None,  # the workflow ended it: no operator to name
            "rule": None,  # a failure recorded without the rule that decided it (as older ledgers hold)
        },
    }
    datetime.strptime(round_.at, LEDGER_TIME)  # the ledger's own timestamp format
    assert record.current_round() == round_
    assert [a.attempt for a in record.attempts] == [1, 2, 3], "attempts of earlier rounds are kept"
    [event] = [e for e in ledger.history(run_id) if e["event"] == "retried"]
    assert event["round"] == 2 and event["key"] == KEY and event["by"] == "alice"


def test_the_same_key_twice_is_one_round(ledger: Ledger) -> None:
    run_id = _claim(ledger, _record("rretry000002", state="cancelled"))
    first = retry_rounds.start_round(ledger, run_id, by="a", reason="r", from_stage=None, key=KEY)
    seq = ledger.get(run_id).seq  # type: ignore[union-attr]
    second = retry_rounds.start_round(ledger, run_id, by="a", reason="r", from_stage=None, key=KEY)
    assert (first.outcome, second.outcome) == ("started", "duplicate")
    assert second.round == 2
    record = ledger.get(run_id)
    assert record is not None and record.round == 2 and len(record.rounds) == 1
    assert record.seq == seq, "a duplicate writes nothing"
    assert record.rounds[0].previous_state == "cancelled" and record.rounds[0].previous_failure is None


def test_a_duplicate_of_an_old_round_is_still_a_duplicate(ledger: Ledger) -> None:
    run_id = _claim(ledger, _record("rretry000003"))
    retry_rounds.start_round(ledger, run_id, by="a", reason="r", from_stage=None, key="k1")
    ledger.edit(run_id, lambda r: r.set_state("failed") or "failed")
    assert retry_rounds.start_round(ledger, run_id, by="a", reason="r", from_stage=None, key="k2").round == 3
    again = retry_rounds.start_round(ledger, run_id, by="a", reason="r", from_stage=None, key="k1")
    assert (again.outcome, again.round) == ("duplicate", 2)
    assert ledger.get(run_id).round == 3  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("succeeded", "succeeded; there is nothing to retry"),
        ("gated", "rlpipe promote"),
        ("training", "still running (state training); cancel it first"),
        ("accepted", "still running (state accepted)"),
    ],
)
def test_a_run_that_is_not_failed_or_cancelled_is_refused(ledger: Ledger, state: str, words: str) -> None:
    run_id = _claim(ledger, _record(f"rrefuse{state[:5]}", state=state))
    decision = retry_rounds.start_round(ledger, run_id, by="a", reason="r", from_stage=None, key=KEY)
    assert decision.outcome == "refused" and words in decision.reason
    record = ledger.get(run_id)
    assert record is not None and record.state == state and record.round == 1 and not record.rounds


def test_other_refusals(ledger: Ledger) -> None:
    run_id = _claim(ledger, _record("rretry000004"))
    refused = {
        "no run": retry_rounds.start_round(
            ledger, "rnosuchrun01", by="a", reason="r", from_stage=None, key=KEY
        ),
        "no reason": retry_rounds.start_round(ledger, run_id, by="a", reason="  ", from_stage=None, key=KEY),
        "bad stage": retry_rounds.start_round(ledger, run_id, by="a", reason="r", from_stage="gate", key=KEY),
        "no publish": retry_rounds.start_round(
            ledger, run_id, by="a", reason="r", from_stage="publish", key=KEY
        ),
    }
    assert {k: d.outcome for k, d in refused.items()} == dict.fromkeys(refused, "refused")
    assert "no run rnosuchrun01" in refused["no run"].reason
    assert "reason is required" in refused["no reason"].reason
    assert "unknown stage 'gate'" in refused["bad stage"].reason
    assert "has no publish stage" in refused["no publish"].reason
    assert ledger.get(run_id).round == 1  # type: ignore[union-attr]


def test_only_a_retry_reopens_a_finished_run() -> None:
    record = _record("rretry000005")
    with pytest.raises(IllegalTransition):
        record.set_state("accepted")
    record.reopen()
    assert record.state == "accepted"
    record.set_state("exporting")  # a retried round whose train is done starts at export
    done = _record("rretry000014")
    done.reopen()
    done.set_state("succeeded")  # a retried round that finds every stage done
    with pytest.raises(IllegalTransition):
        _record("rretry000006", state="succeeded").reopen()


def test_a_ledger_written_before_rounds_existed_still_loads() -> None:
    data = _record("rretry000007").model_dump(mode="json")
    del data["round"], data["rounds"]
    for a in data["attempts"]:
        del a["round"]
    record = RunRecord.model_validate(data)
    assert record.round == 1 and record.rounds == [] and {a.round for a in record.attempts} == {1}
    assert record.current_round() is None


# ---- what a round counts ---------------------------------------------------------------------


def test_budgets_count_only_the_current_rounds_attempts() -> None:
    record = _record("rretry000008", retry={"budgets": {"preempted": 2}})
    req = validate_request(record.request)
    # Round 1 spent the preemption budget (attempts 1 and 2 preempted).
    spent = budgets.classify(record, req, "train", 3, FailureClass.PREEMPTED, "preempted")
    assert spent["tag"] == "permanent" and "preempted budget of 2 exhausted" in spent["message"]
    record.reopen()
    record.round = 2
    record.attempts.append(
        Attempt(stage="train", attempt=4, workload="w4", launched_at=_ago(1), round=2, phase="failed")
    )
    fresh = budgets.classify(record, req, "train", 4, FailureClass.PREEMPTED, "preempted")
    assert fresh == {"tag": "preempted", "message": "preempted"}, "a new round starts with whole budgets"
    record.attempts[-1].failure_class = "preempted"
    record.attempts.append(Attempt(stage="train", attempt=5, workload="w5", launched_at=_ago(0), round=2))
    assert budgets.classify(record, req, "train", 5, FailureClass.PREEMPTED, "p")["tag"] == "preempted"
    record.attempts[-1].failure_class = "preempted"
    record.attempts.append(Attempt(stage="train", attempt=6, workload="w6", launched_at=_ago(0), round=2))
    assert (
        "budget of 2 exhausted"
        in budgets.classify(record, req, "train", 6, FailureClass.PREEMPTED, "p")["message"]
    ), "and spends them like any round"


def test_forced_stages_and_first_attempts() -> None:
    record = _record("rretry000009", publish={"repo": "rlpipe-demo/model"})
    assert retry_rounds.forced_stages(record) == set()
    assert retry_rounds.first_attempts(record) == {"convert": 1, "train": 4, "export": 1, "publish": 1}
    record.reopen()
    retry_round = {
        "round": 2,
        "by": "a",
        "at": _ago(0),
        "reason": "r",
        "key": KEY,
        "previous_state": "failed",
    }
    record.round = 2
    record.rounds = [Round.model_validate({**retry_round, "from_stage": "export"})]
    assert retry_rounds.forced_stages(record) == {"export", "publish"}
    record.rounds = [Round.model_validate(retry_round)]
    assert retry_rounds.forced_stages(record) == set(), "without `from`, only what is not done runs"


def test_a_retried_runs_old_attempts_do_not_make_its_new_one_stuck() -> None:
    """The reconciler measures a stage's deadline like `stage` does: from its first launch in the
    current round. Round 1's train started 27 h ago; the retried attempt 4 runs for 1 h of 24."""
    record = _record("rretry000010")
    record.reopen()
    record.set_state("training")
    record.round = 2
    record.attempts.append(
        Attempt(stage="train", attempt=4, workload="rretry000010-train-a4", launched_at=_ago(1), round=2)
    )
    obj = RunObject(
        kind="JobSet",
        name="rretry000010-train-a4",
        run_id="rretry000010",
        stage="train",
        attempt=4,
        uid="u4",
        created_at=datetime.now(UTC) - timedelta(hours=1),
        phase="running",
    )
    assert rules.stuck_action(obj, record, datetime.now(UTC).timestamp(), 24 * 3600.0) is None
    assert rules.workload_action(obj, record) is None, "the current attempt is not an orphan"
    old = dataclasses.replace(obj, name="rretry000010-train-a3", attempt=3)
    action = rules.workload_action(old, record)
    assert action is not None and action.kind == "delete", "a leftover of round 1 is deleted"


# ---- the call ------------------------------------------------------------------------------------

CALL_KEY = "0123456789abcdef0123456789abcdef"


def test_retry_documents_are_told_from_requests_and_calls_are_parsed() -> None:
    assert retry_rounds.is_retry_document({"retry": {"run_id": "rabc"}})
    assert not retry_rounds.is_retry_document(minimal_request(retry={"max_retries": 3}))
    body = retry_rounds.call_body("rabc123def45", reason=" why ", key=CALL_KEY, from_stage="train", by="bob")
    order = retry_rounds.parse_order(body)
    assert order == retry_rounds.RetryOrder("rabc123def45", "why", f"call:{CALL_KEY}", "train", "bob")
    assert (
        retry_rounds.parse_order({"run_id": "rabc123def45", "reason": "r", "key": CALL_KEY}).from_stage
        is None
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"reason": "r"}, "run_id must be a run id"),
        ({"run_id": "../etc", "reason": "r"}, "run_id must be a run id"),
        ({"run_id": "rabc123def45", "reason": "r", "key": "k"}, "key must be 16 to 64"),
        ({"run_id": "rabc123def45", "reason": "r", "key": "../" * 8}, "key must be 16 to 64"),
        ({"run_id": "rabc123def45"}, "reason is required"),
        ({"run_id": "rabc123def45", "reason": "r", "from": "gate"}, "from must be one of"),
        ({"run_id": "rabc123def45", "reason": "r", "by": 3}, "by must be"),
        ({"run_id": "rabc123def45", "reason": "r", "stage": "x"}, "unknown field(s) in retry: stage"),
        ({"run_id": "rabc123def45", "reason": "x" * 1001}, "keep it under 1000"),
    ],
)
def test_malformed_retry_calls_say_what_to_fix(body: Any, words: str) -> None:
    with pytest.raises(retry_rounds.BadRetry) as caught:
        retry_rounds.parse_order({"key": CALL_KEY, **body})
    assert words in str(caught.value)


# ---- what `rlpipe status` shows --------------------------------------------------------------


def test_describe_shows_the_rounds(ledger: Ledger) -> None:
    run_id = _claim(ledger, _record("rretry000012"))
    retry_rounds.start_round(ledger, run_id, by="alice", reason="node fixed", from_stage="train", key=KEY)
    info = runs.describe(ledger.get(run_id))  # type: ignore[arg-type]
    assert info["round"] == 2
    first, second = info["rounds"]
    assert first["round"] == 1 and first["by"] == "cli"
    assert {k: second[k] for k in ("round", "by", "from_stage", "reason", "previous_state")} == {
        "round": 2,
        "by": "alice",
        "from_stage": "train",
        "reason": "node fixed",
        "previous_state": "failed",
    }
    assert second["previous_ended"] == "failed: [permanent] exit code 1 (train attempt 3)"
    json.dumps(info)  # `rlpipe status --json` prints it


# ---- the command -----------------------------------------------------------------------------


def test_rlpipe_retry_refuses_at_once_with_the_reason(
    ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlpipe.cli import main as cli_main
    from rlpipe.cli import retry_command as retry_cli

    run_id = _claim(ledger, _record("rretry000013", state="training"))
    args = cli_main.build_parser().parse_args(
        ["retry", run_id, "--from", "train", "--reason", "node fixed", "--by", "bob"]
    )
    assert (args.run, args.from_stage, args.reason, args.by) == (run_id, "train", "node fixed", "bob")
    assert retry_cli.cmd_retry(args, lambda: None, lambda settings: ledger) == 1
    assert "still running (state training); cancel it first" in capsys.readouterr().err
    assert ledger.get(run_id).rounds == []  # type: ignore[union-attr]
    with pytest.raises(SystemExit):
        cli_main.build_parser().parse_args(["retry", run_id])  # --reason is required


def test_rlpipe_retry_asks_again_with_the_same_key_when_an_answer_is_lost(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlpipe.cli import retry_command as retry_cli
    from rlpipe.cli import runs as runs_cli

    run_id = _claim(ledger, _record("rretry000014"))
    bodies: list[dict[str, Any]] = []

    def flaky(settings: Any, body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        if len(bodies) < 3:
            raise runs_cli.StageUnreachable("no answer (ConnectionError)")
        return {"run_id": run_id, "outcome": "duplicate", "round": 2, "state": "accepted", "execution": "e"}

    monkeypatch.setattr(runs_cli, "call_stage", flaky)
    done = retry_cli.request_retry(None, ledger, run_id, reason="node fixed", by="bob", sleep=lambda s: None)
    assert (done.outcome, done.round) == ("duplicate", 2)
    assert len(bodies) == 3 and len({b["key"] for b in bodies}) == 1, "one key for every try"

    def unreachable(settings: Any, body: dict[str, Any]) -> dict[str, Any]:
        raise runs_cli.StageUnreachable("no answer (Timeout)")

    monkeypatch.setattr(runs_cli, "call_stage", unreachable)
    with pytest.raises(retry_cli.NotRetried, match="did not answer 3 times; the round may exist"):
        retry_cli.request_retry(None, ledger, run_id, reason="node fixed", sleep=lambda s: None)
