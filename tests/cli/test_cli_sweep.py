"""The CLI on a sweep (docs/sweeps.md, "Operating a sweep"): `plan` of a sweep file lists every
child with its own end and cost, `status` of a parent is a table of its children and of a child
names its parent, and `cancel` of a parent cancels each running child's execution first.

In-process and fast: `plan` through `cli.main.main`; `status` and `cancel` on real `RunRecord`s
in a dict-backed ledger, with the stage function and the Workflows client replaced by recorders.
The ledger's real compare-and-swap and the real stage function are `tests/cli/test_cli_contract.py`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from rlpipe.cli import main as cli
from rlpipe.cli import runs
from rlpipe.cli.exit_codes import ExitCode
from rlpipe.core import identity
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import (
    Admission,
    Execution,
    Lineage,
    RunRecord,
    Source,
    SweepMember,
    SweepParent,
    SweepSelection,
)
from tests.conftest import ROOT, minimal_request
from tests.harness import operator_answers

PRICE = 1.5  # $ per v6e chip-hour at reservation, the test's own (RLPIPE_PRICES)
PRICES = json.dumps({"v6e": {"reservation": {"price": PRICE, "source": "test", "read": "2026-12-01"}}})
CHIPS = 32  # the default preset's slice, v6e-32
# num_batches × num_epoch steps each (batch 4, one iteration, the whole split): 20, 40, 40, 80.
GRID = {"training.num_batches": [20, 40], "maxtext_overrides.num_epoch": [1, 2]}

T0 = "2026-12-03T10:00:00.000000Z"


def _file(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert cli.main(["plan", *args, "--json"]) == ExitCode.OK
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    return plan


@pytest.fixture
def priced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLPIPE_PRICES", PRICES)


# ---- plan ----------------------------------------------------------------------------------------


def test_plan_of_a_sweep_is_each_childs_own_plan_and_the_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], priced: None
) -> None:
    doc = minimal_request(
        request_id="sweep-plan", sweep={"grid": GRID, "max_parallel": 2, "select": {"metric": "reward_gain"}}
    )
    plan = _plan(capsys, _file(tmp_path, "sweep.yaml", doc), "--step-seconds", "10")
    sweep = plan["sweep"]
    assert (sweep["size"], sweep["max_parallel"]) == (4, 2)
    assert sweep["select"] == {"metric": "reward_gain", "direction": "max"}
    rows = sweep["children"]
    # The grid's order: the last key fastest.
    assert [r["point"] for r in rows] == [
        {"training.num_batches": 20, "maxtext_overrides.num_epoch": 1},
        {"training.num_batches": 20, "maxtext_overrides.num_epoch": 2},
        {"training.num_batches": 40, "maxtext_overrides.num_epoch": 1},
        {"training.num_batches": 40, "maxtext_overrides.num_epoch": 2},
    ]
    assert [r["overrides"] for r in rows][1] == "num_batches=20, num_epoch=2"
    assert [r["final_step"] for r in rows] == [20, 40, 40, 80]
    # final × 10 s on 32 chips, each rounded to the cent as shown; the cost at $1.5 a chip-hour.
    assert [r["chip_hours"] for r in rows] == [1.78, 3.56, 3.56, 7.11]
    assert [r["cost"] for r in rows] == [2.67, 5.33, 5.33, 10.67]
    # The totals from the unrounded hours: 180 steps × 10 s × 32 chips = 16 chip-hours exactly,
    # where adding the rounded rows would say 16.01.
    assert sweep["total"] == {"chip_hours": 16.0, "cost": 24.0}
    # Each child's run id as intake derives it: the parent's key plus "#sweep-point-<i>".
    assert [r["run_id"] for r in rows] == [
        identity.run_id_for(f"request:sweep-plan#sweep-point-{i}") for i in range(4)
    ]
    assert plan["run_id"] == identity.run_id_for("request:sweep-plan")


def test_each_child_is_planned_as_the_single_request_it_becomes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], priced: None
) -> None:
    """A child's row says what `rlpipe plan` says of the same request written out without a sweep."""
    doc = minimal_request(request_id="sweep-plan", sweep={"grid": GRID})
    rows = _plan(capsys, _file(tmp_path, "sweep.yaml", doc), "--step-seconds", "45")["sweep"]["children"]
    for row in rows:
        single = minimal_request(
            training={"num_batches": row["point"]["training.num_batches"]},
            maxtext_overrides={"num_epoch": row["point"]["maxtext_overrides.num_epoch"]},
        )
        alone = _plan(capsys, _file(tmp_path, f"single-{row['index']}.yaml", single), "--step-seconds", "45")
        capacity = alone["capacity"]
        assert row["final_step"] == alone["training"]["final_step"]
        assert row["chip_hours"] == capacity["expected_chip_hours"]
        assert row["cost"] == capacity["per_mode"]["reservation"]["expected_cost"]
        assert capacity["chips"] == CHIPS


def test_the_example_sweeps_children_have_the_run_ids_of_their_golden_jobsets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = _plan(capsys, "examples/sweep-lr.yaml")
    sweep = plan["sweep"]
    golden = ROOT / "tests" / "golden" / "sweep-lr"
    for row in sweep["children"]:
        jobset = yaml.safe_load((golden / f"child-{row['index']}-train.yaml").read_text())
        assert jobset["metadata"]["name"] == f"{row['run_id']}-train-a1"
    assert sweep["max_parallel"] == 2 and sweep["select"] == {
        "metric": "post_mean_reward",
        "direction": "max",
    }
    # No --step-seconds: nothing to estimate, and no total made of unknowns.
    assert {r["chip_hours"] for r in sweep["children"]} == {None}
    assert sweep["total"] == {"chip_hours": None, "cost": None}


def test_without_the_parents_key_no_child_run_id_is_made_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_id = _file(tmp_path, "sweep.yaml", minimal_request(sweep={"grid": GRID}))
    assert all("run_id" not in r for r in _plan(capsys, no_id)["sweep"]["children"])
    with_id = _file(tmp_path, "named.yaml", minimal_request(request_id="sweep-plan", sweep={"grid": GRID}))
    # --run-id names another delivery of the file: its key, so its children's, is not known here.
    assert all(
        "run_id" not in r for r in _plan(capsys, with_id, "--run-id", "rother000001")["sweep"]["children"]
    )
    # The run id the request_id gives is the same key: the children's ids stay.
    same = identity.run_id_for("request:sweep-plan")
    assert all("run_id" in r for r in _plan(capsys, with_id, "--run-id", same)["sweep"]["children"])
    assert "sweep" not in _plan(capsys, _file(tmp_path, "single.yaml", minimal_request()))


def test_plan_text_lists_every_child_and_the_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], priced: None
) -> None:
    doc = minimal_request(
        request_id="sweep-plan",
        sweep={"grid": GRID, "max_parallel": 3, "select": {"metric": "post_accuracy"}},
    )
    assert cli.main(["plan", _file(tmp_path, "sweep.yaml", doc), "--step-seconds", "10"]) == ExitCode.OK
    text = capsys.readouterr().out
    sweep = text[text.index("sweep: ") :]
    assert sweep.startswith("sweep: 4 children, at most 3 holding a TPU slice at once")
    assert "the highest post_accuracy is selected; only it publishes" in sweep
    assert "shared: one conversion" in sweep
    rows = [line.split() for line in sweep.splitlines() if line.split()[:1] in (["0"], ["1"], ["2"], ["3"])]
    first = identity.run_id_for("request:sweep-plan#sweep-point-0")
    assert rows[0] == ["0", first, "num_batches=20,", "num_epoch=1", "20", "1.78", "$2.67"]
    assert [r[-3:] for r in rows] == [
        ["20", "1.78", "$2.67"],
        ["40", "3.56", "$5.33"],
        ["40", "3.56", "$5.33"],
        ["80", "7.11", "$10.67"],
    ]
    total = next(line for line in sweep.splitlines() if line.strip().startswith("total"))
    assert total.split() == ["total", "16", "$24.00"]


@pytest.mark.parametrize(
    ("sweep", "named"),
    [
        ({"grid": {"tpu.type": ["v6e-32", "v6e-64"]}}, "sweep.grid.tpu.type"),
        ({"grid": {"training.learning_rate": [1e-5, 2.0]}}, "sweep child 1 (learning_rate=2.0)"),
        ({"points": [{"training.num_batches": 20}, {"training.num_batches": 20}]}, "would be the same run"),
    ],
)
def test_a_sweep_that_may_not_be_is_refused_with_its_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sweep: dict[str, Any], named: str
) -> None:
    path = _file(tmp_path, "bad.yaml", minimal_request(sweep=sweep))
    for args in (["plan", path], ["plan", path, "--json"]):
        assert cli.main(args) == ExitCode.INVALID_INPUT
        out, err = capsys.readouterr()
        assert out == "" and named in err


# ---- records: a parent and its children, as intake claims them --------------------------------


class Ledger:
    """``Ledger.get`` over a dict of records (what the CLI reads); ``calls`` records the order of
    what the fakes below were asked."""

    def __init__(self, records: list[RunRecord]) -> None:
        self.records = {r.run_id: r for r in records}
        self.calls: list[tuple[str, ...]] = []
        self.store = None  # the state bucket: only a team's admission reads it, never the CLI

    def get(self, run_id: str) -> RunRecord | None:
        record = self.records.get(run_id)
        return record.model_copy(deep=True) if record is not None else None

    def last_event(self, run_id: str, what: str) -> dict[str, str] | None:
        return None  # no reconciler has reported anything of these runs


def _sweep(states: list[str | None], *, selected: int | None = None, none_reason: str = "") -> Ledger:
    """A parent over len(states) children of GRID's first values; None: a child not claimed yet."""
    rule = {"metric": "post_mean_reward", "direction": "max"}
    request = validate_request(
        minimal_request(request_id="sweep-status", sweep={"grid": GRID, "select": rule})
    )
    points = [
        {"training.num_batches": 20, "maxtext_overrides.num_epoch": 1},
        {"training.num_batches": 20, "maxtext_overrides.num_epoch": 2},
        {"training.num_batches": 40, "maxtext_overrides.num_epoch": 1},
        {"training.num_batches": 40, "maxtext_overrides.num_epoch": 2},
    ][: len(states)]
    ids = [f"rchild00000{i}" for i in range(len(states))]
    selection = None
    if selected is not None or none_reason:
        selection = SweepSelection(
            run_id=ids[selected] if selected is not None else None,
            index=selected,
            metric="post_mean_reward",
            direction="max",
            value=0.61 if selected is not None else None,
            reason=none_reason or f"child {selected} has the highest post_mean_reward, 0.6100",
            at="2026-12-03T10:00:00.000000Z",
        )
    parent = RunRecord(
        run_id="rparent00001",
        key="request:sweep-status",
        source=Source(kind="cli"),
        request=request.model_dump(mode="json"),
        state="training",
        sweep=SweepParent(children=ids, points=points, max_parallel=1, selection=selection),
    )
    records = [parent]
    for index, (run_id, state) in enumerate(zip(ids, states, strict=True)):
        if state is None:
            continue
        member = SweepMember(
            parent=parent.run_id,
            index=index,
            size=len(states),
            point=points[index],
            selected=None if selection is None else index == selected,
        )
        child = RunRecord(
            run_id=run_id,
            key=f"request:sweep-status#sweep-point-{index}",
            source=Source(kind="cli"),
            request=request.model_dump(mode="json"),
            state=state,  # type: ignore[arg-type]
            lineage=Lineage(sweep=member),
            execution=Execution(name=f"executions/{run_id}"),
        )
        if state == "accepted":
            child.admission = Admission(
                waits_for="sweep-slot",
                reason="queued: all 1 of the sweep's slots are in use (children 1)",
                since=T0,
            )
        if state in ("succeeded", "training"):
            child.results = {"pre": {"mean_reward": 0.2}, "post": {"mean_reward": 0.5 + 0.11 * (index == 0)}}
        records.append(child)
    return Ledger(records)


def _status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ledger: Ledger, *args: str
) -> str:
    monkeypatch.setattr(cli, "_settings", lambda: SimpleNamespace(local=True, kubeconfig=""))
    monkeypatch.setattr(cli, "_ledger", lambda settings: ledger)
    assert cli.main(["status", *args]) == ExitCode.OK
    return capsys.readouterr().out


# ---- status --------------------------------------------------------------------------------------


def test_status_json_of_a_parent_has_every_childs_point_state_reward_and_the_selection(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _sweep(["succeeded", "accepted", "training", None])
    sweep = json.loads(_status(monkeypatch, capsys, ledger, "rparent00001", "--json"))["sweep"]
    assert sweep["role"] == "parent" and sweep["size"] == 4 and sweep["max_parallel"] == 1
    assert sweep["select"] == {"metric": "post_mean_reward", "direction": "max"}
    assert sweep["selection"] is None and sweep["children_read"]
    rows = sweep["children"]
    assert [r["run_id"] for r in rows] == [f"rchild00000{i}" for i in range(4)]
    assert [r["state"] for r in rows] == ["succeeded", "accepted", "training", None]
    assert [r["waiting"] for r in rows] == [
        None,
        "queued: all 1 of the sweep's slots are in use (children 1)",
        None,
        None,
    ]
    assert [r["post_mean_reward"] for r in rows] == [0.61, None, 0.5, None]
    assert [r["selected"] for r in rows] == [None] * 4  # no selection yet
    assert rows[1]["point"] == {"training.num_batches": 20, "maxtext_overrides.num_epoch": 2}


def test_status_of_a_parent_after_selection_marks_the_winner_and_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _sweep(["succeeded", "succeeded", "accepted"], selected=0)
    info = json.loads(_status(monkeypatch, capsys, ledger, "rparent00001", "--json"))["sweep"]
    assert [r["selected"] for r in info["children"]] == [True, False, False]
    assert info["selection"]["run_id"] == "rchild000000"
    assert info["selection"]["reason"] == "child 0 has the highest post_mean_reward, 0.6100"
    text = _status(monkeypatch, capsys, ledger, "rparent00001")
    lines = text.splitlines()
    assert lines[0] == "sweep rparent00001: training; 3 children, at most 1 holding a TPU slice at once"
    rows = [next(line for line in lines if f" rchild00000{i} " in line) for i in range(3)]
    assert rows[0].split()[:3] == ["*", "0", "rchild000000"] and "num_batches=20, num_epoch=1" in rows[0]
    assert rows[0].split()[-3:] == ["succeeded", "0.6100", "yes"]
    assert rows[1].split()[:2] == ["1", "rchild000001"]
    assert rows[1].split()[-3:] == ["succeeded", "0.5000", "no"]
    # A queued child's state is why it waits, not "accepted".
    assert "queued: all 1 of the sweep's slots are in use (children 1)" in rows[2]
    assert "accepted" not in rows[2] and rows[2].split()[-2:] == ["-", "no"]
    assert "  selected    rchild000000 (child 0): child 0 has the highest post_mean_reward, 0.6100" in lines


def test_status_of_a_sweep_none_could_win_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    why = "no child can be selected by post_mean_reward: child 0 is not a candidate: it ended gated"
    text = _status(monkeypatch, capsys, _sweep(["gated", "failed"], none_reason=why), "rparent00001")
    assert f"  selected    none: {why}" in text.splitlines()
    assert "*" not in text


def test_status_of_a_child_names_its_parent_and_point(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _sweep(["succeeded", "accepted"])
    info = json.loads(_status(monkeypatch, capsys, ledger, "rchild000001", "--json"))["sweep"]
    assert info == {
        "role": "child",
        "parent": "rparent00001",
        "index": 1,
        "size": 2,
        "point": {"training.num_batches": 20, "maxtext_overrides.num_epoch": 2},
        "overrides": "num_batches=20, num_epoch=2",
        "waiting": "queued: all 1 of the sweep's slots are in use (children 1)",
        "selected": None,
        "stopped": None,
    }
    text = _status(monkeypatch, capsys, ledger, "rchild000001")
    assert (
        "  sweep       child 1 of 2 of rparent00001 (num_batches=20, num_epoch=2); selection not made yet"
        in text
    )
    assert "  queued      all 1 of the sweep's slots are in use (children 1)" in text.splitlines()
    # Selected, and a stale waiting reason is not shown once the child has moved on.
    winner = _sweep(["succeeded", "succeeded"], selected=0)
    winner.records["rchild000000"].admission = Admission(
        waits_for="sweep-slot", reason="queued: long ago", since=T0
    )
    text = _status(monkeypatch, capsys, winner, "rchild000000")
    assert "of rparent00001 (num_batches=20, num_epoch=1); selected: it publishes" in text
    assert "queued" not in text


def test_status_json_of_a_run_outside_any_sweep_has_no_sweep(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    request = validate_request(minimal_request()).model_dump(mode="json")
    alone = RunRecord(run_id="rsingle00001", key="k", source=Source(kind="cli"), request=request)
    info = json.loads(_status(monkeypatch, capsys, Ledger([alone]), "rsingle00001", "--json"))
    assert info["sweep"] is None and info["run_id"] == "rsingle00001"


# ---- cancel --------------------------------------------------------------------------------------


class Stage:
    """The stage function's cancel, recorded; cancel of the parent does what the real one does to
    the ledger (``StageService.cancel`` → ``SweepCoordinator.end_group``): every child that has not
    ended, and the parent, end cancelled."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def __call__(self, settings: Any, body: dict[str, Any]) -> dict[str, Any]:
        assert body["op"] == "cancel", body
        if body.get("check_only"):  # may this operator cancel the run: yes
            self.ledger.calls.append(("stage", "check", body["run_id"]))
            return {"run_id": body["run_id"], "allowed": True}
        self.ledger.calls.append(("stage", body["op"], body["run_id"]))
        parent = self.ledger.records[body["run_id"]]
        if parent.terminal:
            return (
                operator_answers.cancelled(parent.run_id)
                .model_copy(update={"state": parent.state})
                .model_dump()
            )
        for record in self.ledger.records.values():
            if not record.terminal:
                record.state = "cancelled"
        return operator_answers.cancelled(parent.run_id).model_dump()


class Executions:
    """The Workflows client: each cancel recorded; ``refuse`` names executions it may not cancel."""

    def __init__(self, ledger: Ledger, refuse: set[str]) -> None:
        self.ledger, self.refuse = ledger, refuse

    def cancel(self, name: str) -> bool:
        self.ledger.calls.append(("cancel", name))
        if name in self.refuse:
            raise PermissionError(f"403 PermissionDenied: workflows.executions.cancel on {name}")
        return True


def test_cancel_of_a_parent_cancels_each_running_childs_execution_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = _sweep(["succeeded", "training", "accepted", None])
    monkeypatch.setattr(runs, "call_stage", Stage(ledger))
    executions = Executions(ledger, refuse={"executions/rchild000002"})
    result = runs.cancel(SimpleNamespace(), ledger, "rparent00001", orchestrator=executions)  # type: ignore[arg-type]
    # The running and the queued child's executions, before the stage function cancels the
    # parent; never the child that had ended, nor one not claimed.
    assert ledger.calls == [
        ("stage", "check", "rparent00001"),
        ("cancel", "executions/rchild000001"),
        ("cancel", "executions/rchild000002"),
        ("stage", "cancel", "rparent00001"),
    ]
    assert result["state"] == "cancelled"
    children = result["children"]
    assert [(c["run_id"], c["was"], c["state"]) for c in children] == [
        ("rchild000001", "training", "cancelled"),
        ("rchild000002", "accepted", "cancelled"),
    ]
    assert [c["execution_cancelled"] for c in children] == [True, False]
    assert "execution_error" not in children[0]
    assert "PermissionDenied" in children[1]["execution_error"]
    assert "roles/workflows.invoker" in children[1]["execution_error"]  # the hint: which role


def test_cancel_of_a_parent_prints_each_child_and_warns_of_an_execution_it_could_not_cancel(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlpipe.control.adapters import orchestrator

    ledger = _sweep(["training", "failed", "training"])
    monkeypatch.setattr(cli, "_settings", lambda: SimpleNamespace())
    monkeypatch.setattr(cli, "_ledger", lambda settings: ledger)
    monkeypatch.setattr(runs, "call_stage", Stage(ledger))
    monkeypatch.setattr(
        orchestrator, "Orchestrator", lambda settings: Executions(ledger, refuse={"executions/rchild000002"})
    )
    assert cli.main(["cancel", "rparent00001"]) == ExitCode.OK
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("run rparent00001: cancelled;")
    assert lines[1:] == [
        "  child 0 rchild000000: training → cancelled; execution cancelled: True",
        "  child 2 rchild000002: training → cancelled; execution cancelled: False",
    ]
    assert "warning: child rchild000002's execution was not cancelled: PermissionError" in err
    assert "rchild000000" not in err


def test_cancel_of_an_ended_sweep_cancels_no_child_and_is_refused_by_state(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _sweep(["succeeded", "gated"], selected=0)
    ledger.records["rparent00001"].state = "succeeded"
    monkeypatch.setattr(cli, "_settings", lambda: SimpleNamespace())
    monkeypatch.setattr(cli, "_ledger", lambda settings: ledger)
    monkeypatch.setattr(runs, "call_stage", Stage(ledger))
    assert cli.main(["cancel", "rparent00001"]) == ExitCode.REFUSED_BY_STATE
    assert not [c for c in ledger.calls if c[0] == "cancel"]
    said = capsys.readouterr()
    assert "had already ended succeeded" in said.err
    assert said.out == "" and len(said.err.strip().splitlines()) == 1, said  # one answer, one line


def test_watch_of_a_sweep_ends_with_its_children_and_selection_not_an_empty_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _sweep(["succeeded", "succeeded"], selected=0)
    parent = ledger.records["rparent00001"]
    ledger.records["rparent00001"] = parent.model_copy(update={"state": "succeeded"})
    monkeypatch.setattr(cli, "_settings", lambda: SimpleNamespace(local=True, kubeconfig=""))
    monkeypatch.setattr(cli, "_ledger", lambda settings: ledger)
    assert cli.main(["watch", "rparent00001", "--timeout", "5", "--interval", "0.1"]) == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    assert "sweep rparent00001: succeeded; 2 children, at most 1 holding a TPU slice at once" in lines
    assert any(line.split()[:3] == ["*", "0", "rchild000000"] for line in lines)
    child = cli.main(["watch", "rchild000001", "--timeout", "5", "--interval", "0.1"])
    assert child == ExitCode.OK
    assert "rparent00001" in capsys.readouterr().out  # a child's summary names its sweep


def test_status_of_a_parent_says_which_children_its_rule_stopped_where_and_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import jsonschema

    from rlpipe.core.runs.record import EarlyStopRecord
    from tests.cli.test_cli_contract import SWEEP_PARENT_SCHEMA

    ledger = _sweep(["training", "stopped", "training", "accepted"])
    parent = ledger.records["rparent00001"]
    assert parent.sweep is not None
    parent.request["sweep"]["early_stop"] = {"rule": "asha", "eta": 3, "min_step": 10}
    why = "stopped early by asha: at the rung at step 10 its post_mean_reward, 0.2000, is outside the top 1"
    parent.sweep.stopped = [
        EarlyStopRecord(
            run_id="rchild000001", index=1, rule="asha", metric="post_mean_reward", step=10,
            value=0.2, threshold=0.4, compared={"0": 0.4, "2": 0.3}, reason=why, at="2026-12-06T06:00:00Z",
        )
    ]  # fmt: skip
    sweep = json.loads(_status(monkeypatch, capsys, ledger, "rparent00001", "--json"))["sweep"]
    jsonschema.validate(sweep, SWEEP_PARENT_SCHEMA)
    assert sweep["early_stop"] == {"rule": "asha", "eta": 3, "min_step": 10}
    assert [r["stopped"] for r in sweep["children"]] == [
        None,
        {"step": 10, "rule": "asha", "reason": why},
        None,
        None,
    ]
    text = _status(monkeypatch, capsys, ledger, "rparent00001")
    assert "  early stop  asha (eta 3), reading post_mean_reward; 1 stopped so far" in text
    row = next(line for line in text.splitlines() if "rchild000001" in line)
    assert "stopped at step 10 (asha)" in row


@pytest.mark.parametrize(
    ("cluster", "says"),
    [("double", "the cluster and the TPU slice were SIMULATED"), ("real", "JobSet and Kueue were REAL")],
)
def test_the_sweep_demos_summary_names_its_cluster_and_what_was_played(
    cluster: str, says: str, tmp_path: Path
) -> None:
    """The sweep and sweep-asha demos ended without naming the cluster or saying "simulated",
    where the README says every demo does (as a single run's summary always did)."""
    from rlpipe.cli import demo_sweep

    ledger = _sweep(["succeeded", "gated"], selected=0)
    text = demo_sweep.summary(ledger, ledger.records["rparent00001"], tmp_path, cluster=cluster)
    closing = text.splitlines()[-2:]
    assert closing[0].startswith("  cluster     ") and closing[1].startswith("  note        "), text
    assert says in closing[1], text


def test_with_a_bucket_watcher_the_summary_says_the_events_were_played(tmp_path: Path) -> None:
    """`EVENTS=watcher`'s note said events "ran for real" while its first line said they were
    simulated by listing buckets."""
    from rlpipe.cli import demo_sweep
    from rlpipe.cli.watch import summary

    ledger = _sweep(["succeeded", "gated"], selected=0)
    parent = ledger.records["rparent00001"]
    child = ledger.records[parent.sweep.children[0]]
    for text in (
        demo_sweep.summary(ledger, parent, tmp_path, events="watcher"),
        summary(child, simulated=True, events="watcher"),
    ):
        note = text.splitlines()[-1]
        assert "events were PLAYED by a bucket watcher" in note and "events, functions" not in note, note
    real = summary(child, simulated=True, events="pubsub").splitlines()[-1]
    assert "GCS, events, functions and the workflow engine ran for real" in real


def test_a_stopped_child_is_stopped_everywhere_and_no_candidate_after_the_selection() -> None:
    """A child the rule stopped read "selection not made yet" after the selection: its own record
    never learns of it. Its status now says where it stopped, why, and that it is no candidate."""
    from rlpipe.cli import sweep_view
    from rlpipe.core.runs.record import Failure, SweepMember

    ledger = _sweep(["stopped", "succeeded"], selected=1)
    child = ledger.records["rchild000000"]
    assert child.lineage.sweep is not None
    child.lineage.sweep = SweepMember(**{**child.lineage.sweep.model_dump(), "selected": None})  # as recorded
    child.failure = Failure(tag="stopped", message="at the rung at step 10 it was outside the top 1")
    child.results = {"intermediate": [{"step": 10, "mean_reward": 0.2, "attempt": 1}]}
    info = sweep_view.sweep_info(child)
    assert info is not None
    assert info["selected"] is False and info["stopped"] == {
        "trained_to": 10,
        "reason": "at the rung at step 10 it was outside the top 1",
    }
    text = "\n".join(sweep_view.member_lines(info))
    assert "stopped by design: not a candidate for selection" in text and "not made yet" not in text
    assert "stopped     at step 10 by the sweep's rule: at the rung at step 10" in text


def test_an_ended_sweeps_parent_gives_its_total_and_each_stopped_childs_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the sweep ended the parent said `7 stopped so far`, no reason per child, and
    `chip_hours: 0` in --json (it runs nothing itself)."""
    from rlpipe.core.runs.record import Attempt, EarlyStopRecord

    ledger = _sweep(["stopped", "succeeded"], selected=1)
    parent = ledger.records["rparent00001"]
    parent.state = "succeeded"
    parent.request = {
        **parent.request,
        "sweep": {**parent.request["sweep"], "early_stop": {"rule": "asha", "eta": 2}},
    }
    why = "at the rung at step 10 its evaluation there (mean_reward 0.2000) is outside the top 1"
    assert parent.sweep is not None
    parent.sweep.stopped = [
        EarlyStopRecord(
            run_id="rchild000000", index=0, rule="asha", metric="post_mean_reward", step=10, value=0.2,
            threshold=0.4, compared={"1": 0.4}, reason=why, at="2026-12-03T09:00:00.000000Z",
        )
    ]  # fmt: skip
    stopped, winner = ledger.records["rchild000000"], ledger.records["rchild000001"]
    for child, held in ((stopped, 1.25), (winner, 4.5)):
        child.attempts = [
            Attempt(
                stage="train",
                attempt=1,
                workload=f"{child.run_id}-train-a1",
                launched_at="2026-12-03T08:00:00.000000Z",
                chip_hours=held,
            )
        ]
    text = _status(monkeypatch, capsys, ledger, "rparent00001")
    assert "1 stopped" in text and "so far" not in text, text
    assert f"  stopped     child 0 (rchild000000): {why}" in text.splitlines(), text
    info = json.loads(_status(monkeypatch, capsys, ledger, "rparent00001", "--json"))
    assert info["chip_hours"] == 5.75  # 1.25 + 4.5: its children's, by hand
