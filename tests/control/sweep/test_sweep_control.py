"""Sweeps in the control plane, on the real ledger (fake-gcs-server behind the strict layer) and the
real Executions client: intake of a sweep file, and the children coordinating through their parent
(pins, slots, the one conversion, the one selection, cancel, retry) under concurrent callers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.events import ObjectEvent
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import RetryAsked
from rlpipe.control.sweep import coordination as sweeps
from rlpipe.control.sweep import operations
from rlpipe.control.sweep.coordinator import SweepCoordinator
from rlpipe.core.runs.record import RunRecord, Source
from tests.conftest import Buckets, minimal_request, real_intake
from tests.harness.sweeps import claim_sweep, sweep_request

GRID = {"training.num_generations": [2, 4, 8, 16]}


def _drop(buckets: Buckets, name: str, doc: dict[str, Any]) -> ObjectEvent:
    blob = buckets.client.bucket(buckets.requests).blob(name)
    blob.upload_from_string(yaml.safe_dump(doc, sort_keys=False))
    return ObjectEvent(buckets.requests, name, str(blob.generation), blob.size, "e1")


def _sweep(buckets: Buckets, executions: Any, **sweep: Any) -> tuple[Ledger, RunRecord, list[RunRecord]]:
    intake = real_intake(buckets, executions)
    doc = minimal_request(request_id="lr-sweep", sweep={"grid": GRID, "max_parallel": 2, **sweep})
    result = intake.from_object(_drop(buckets, "requests/sweep.yaml", doc))
    assert result.outcome == "started", result
    ledger = buckets.ledger()
    parent = ledger.get(result.run_id)
    assert parent is not None and parent.sweep is not None
    return ledger, parent, [ledger.get(c) for c in parent.sweep.children]


def _claimed(buckets: Buckets, **sweep: Any) -> tuple[Ledger, RunRecord, list[RunRecord]]:
    """A sweep's records as intake claims them, without starting executions (faster; the intake
    test above covers the starting)."""
    ledger = buckets.ledger()
    request = sweep_request(grid=GRID, max_parallel=2, **sweep)
    parent, children = claim_sweep(ledger, request, "lr-sweep", Source(kind="cli"))
    return ledger, parent, children


def test_one_sweep_file_is_a_parent_and_n_children_and_a_redelivery_creates_nothing(
    buckets: Buckets, executions: Any
) -> None:
    ledger, parent, children = _sweep(buckets, executions)
    assert parent.sweep is not None and len(children) == 4
    assert set(ledger.list_run_ids()) == {parent.run_id, *parent.sweep.children}
    assert parent.execution.name is None  # the parent runs nothing itself
    assert sorted(c["run_id"] for c in executions.creates()) == sorted(parent.sweep.children)
    for index, child in enumerate(children):
        assert child.lineage.sweep is not None
        assert (child.lineage.sweep.parent, child.lineage.sweep.index) == (parent.run_id, index)
        assert child.request["training"]["num_generations"] == GRID["training.num_generations"][index]
        assert child.request["sweep"] is None
    again = real_intake(buckets, executions).from_object(
        ObjectEvent(buckets.requests, "requests/sweep.yaml", parent.source.generation or "", None, "e2")
    )
    assert (again.outcome, again.run_id) == ("duplicate", parent.run_id)
    assert "4 duplicate" in again.detail
    assert len(executions.creates()) == 4 and len(ledger.list_run_ids()) == 5
    # The same request_id with another grid is a conflict, not a second sweep.
    other = minimal_request(request_id="lr-sweep", sweep={"grid": {"training.num_generations": [2, 32]}})
    conflict = real_intake(buckets, executions).from_object(_drop(buckets, "requests/other.yaml", other))
    assert conflict.outcome == "conflict" and len(ledger.list_run_ids()) == 5


def test_one_child_converts_and_no_more_than_max_parallel_hold_a_slot(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets)
    with ThreadPoolExecutor(4) as pool:
        waits = list(pool.map(lambda c: sweeps.take_slot(ledger, c, conversion_ready=False), children))
    [converter] = [c.run_id for c, w in zip(children, waits, strict=True) if w is None]
    assert all(
        w.waits_for == "conversion"
        and "to convert the checkpoint every child shares" in w.reason
        and converter in w.reason
        for w in waits
        if w
    )
    # The conversion is in the cache now: the others race for the one slot left.
    others = [c for c in children if c.run_id != converter]
    with ThreadPoolExecutor(3) as pool:
        waits = list(pool.map(lambda c: sweeps.take_slot(ledger, c, conversion_ready=True), others))
    assert sum(w is None for w in waits) == 1
    assert all(
        w.waits_for == "sweep-slot" and "all 2 of the sweep's slots are in use" in w.reason
        for w in waits
        if w
    )
    after = ledger.get(parent.run_id)
    assert after is not None and after.sweep is not None and len(after.sweep.slots) == 2
    assert after.state == "accepted"  # children hold slots; none has started a stage yet
    # The converter ends (here: fails): its slot goes to a waiting child.
    ended = ledger.edit(converter, lambda r: (r.set_state("failed"), "failed")[1])
    sweeps.child_ended(ledger, ended)
    waiting = [c for c, w in zip(others, waits, strict=True) if w]
    assert sweeps.take_slot(ledger, waiting[0], conversion_ready=True) is None
    assert sweeps.take_slot(ledger, waiting[1], conversion_ready=True) is not None


def test_the_children_train_on_the_commits_the_first_one_pinned(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets)
    calls: list[int] = []

    def resolver(i: int) -> Any:
        def resolve() -> tuple[str, dict[str, Any]]:
            calls.append(i)
            return f"{i:040d}", {"train": {"sha": f"data-{i}"}}

        return resolve

    with ThreadPoolExecutor(4) as pool:
        pins = list(
            pool.map(lambda ic: sweeps.shared_pins(ledger, ic[1], resolver(ic[0])), enumerate(children))
        )
    assert len(set(p[0] for p in pins)) == 1 and len({p[1]["train"]["sha"] for p in pins}) == 1
    stored = ledger.get(parent.run_id)
    assert (
        stored is not None
        and stored.sweep is not None
        and stored.sweep.pins
        == {
            "hf_sha": pins[0][0],
            "data": pins[0][1],
        }
    )
    # Later children no longer ask the Hub at all.
    calls.clear()
    assert sweeps.shared_pins(ledger, children[0], resolver(9)) == pins[0] and calls == []


def _trained(ledger: Ledger, run_id: str, post: float) -> RunRecord:
    def change(r: RunRecord) -> str:
        r.set_state("training")
        r.results = {"pre": {"mean_reward": 0.1}, "post": {"mean_reward": post}}
        return "trained"

    return ledger.edit(run_id, change)


def test_selection_waits_for_every_child_then_one_winner_publishes(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets, select={"metric": "post_mean_reward"})
    ids = [c.run_id for c in children]
    first = sweeps.arrive(ledger, _trained(ledger, ids[0], 0.55))
    assert first["wait"] is True and first["reason"] == "waiting for children 1, 2, 3 to finish"
    ledger.edit(ids[1], lambda r: (r.set_state("failed"), "failed")[1])
    trained = [_trained(ledger, ids[2], 0.71), _trained(ledger, ids[3], 0.62)]

    def settle(child: RunRecord) -> dict[str, Any]:
        while (answer := sweeps.arrive(ledger, child))["wait"]:  # a sibling had not arrived yet
            pass
        return answer

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(settle, trained))
    assert [a["selected"] for a in answers] == [True, False]
    assert answers[1]["reason"].startswith("not selected: child 2 (num_generations=8)")
    late = sweeps.arrive(ledger, ledger.get(ids[0]))
    assert late["wait"] is False and late["selected"] is False
    history = [e["event"] for e in ledger.history(parent.run_id)]
    assert history.count("sweep-selected") == 1
    stored = ledger.get(parent.run_id)
    assert stored is not None and stored.sweep is not None and stored.sweep.selection is not None
    assert stored.sweep.selection.run_id == ids[2]
    assert "child 1 is not a candidate: it ended failed" in stored.sweep.selection.reason
    assert [ledger.get(i).lineage.sweep.selected for i in ids] == [False, None, True, False]  # type: ignore[union-attr]


def test_children_that_exported_an_earlier_step_are_ranked_by_that_steps_evaluation(buckets: Buckets) -> None:
    """With export.step (docs/outcomes.md, "The exported step"), what a child would publish is the
    step its export loaded: the selection reads that step's evaluation, not the last step's."""
    ledger, _, children = _claimed(buckets, select={"metric": "post_mean_reward"})
    ids = [c.run_id for c in children]
    # (final, exported, its evaluation there): child 0 ends best, but exported a worse step
    plans = [(0.90, 10, 0.40), (0.50, 10, 0.60), (0.45, 20, 0.55), (0.30, 40, 0.30)]

    def exported(run_id: str, post: float, step: int, value: float) -> RunRecord:
        def change(r: RunRecord) -> str:
            r.set_state("training")
            r.results = {
                "pre": {"mean_reward": 0.1},
                "post": {"mean_reward": post},
                "intermediate": [
                    {"step": s, "mean_reward": value if s == step else 0.0} for s in (10, 20, 30)
                ],
            }
            r.lineage.final_step, r.lineage.exported_step = 40, step
            return "exported"

        return ledger.edit(run_id, change)

    arrived = [exported(i, *plan) for i, plan in zip(ids, plans, strict=True)]
    for child in arrived:
        sweeps.arrive(ledger, child)
    answers = [sweeps.arrive(ledger, ledger.get(i)) for i in ids]  # type: ignore[arg-type]
    assert [a["selected"] for a in answers] == [False, True, False, False], answers


def test_cancelling_the_parent_cancels_each_child_still_running_once(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets)
    ledger.edit(children[0].run_id, lambda r: (r.set_state("cancelled"), "cancelled")[1])
    cancelled: list[str] = []

    def cancel_child(run_id: str) -> None:
        cancelled.append(run_id)
        ledger.edit(run_id, lambda r: (r.set_state("cancelled"), "cancelled")[1])

    after = sweeps.cancel(ledger, parent.run_id, cancel_child)
    assert cancelled == [c.run_id for c in children[1:]]
    assert after.state == "cancelled" and after.failure is not None
    assert sweeps.cancel(ledger, parent.run_id, cancel_child).state == "cancelled"
    assert len(cancelled) == 3  # a second cancel finds nothing running


def test_retrying_the_parent_retries_only_the_children_that_can_change_the_outcome(buckets: Buckets) -> None:
    ledger, parent, children = _claimed(buckets)
    ids = [c.run_id for c in children]
    for run_id, state in zip(ids, ["succeeded", "failed", "cancelled", "succeeded"], strict=True):
        ledger.edit(run_id, lambda r, s=state: (r.set_state(s), s)[1])  # type: ignore[misc]
    stopped = sweeps.refresh(ledger, parent.run_id)
    assert stopped.state == "failed" and "child 1" in (stopped.failure.message if stopped.failure else "")
    started: list[str] = []
    answer = operations.retry_parent(
        ledger,
        stopped,
        RetryAsked(
            "ann",
            "capacity is back",
            None,
            "k1",
            None,
            started.append,
        ),
    )
    assert answer["outcome"] == "started" and started == [ids[1], ids[2]]
    assert [ledger.get(i).state for i in ids] == ["succeeded", "accepted", "accepted", "succeeded"]  # type: ignore[union-attr]
    assert answer["state"] == "training"  # under way again: two children done, two to go
    repeated = operations.retry_parent(
        ledger, ledger.get(parent.run_id), RetryAsked("ann", "again", None, "k1", None, started.append)
    )
    assert repeated["outcome"] == "duplicate" and started == [ids[1], ids[2]]


@pytest.mark.parametrize("state", ["succeeded", "training"])
def test_a_parent_that_succeeded_or_is_running_is_not_retried(
    buckets: Buckets, executions: Any, state: str
) -> None:
    from rlpipe.core.failures import PermanentFailure

    ledger, parent, children = _claimed(buckets)
    for child in children:
        ledger.edit(child.run_id, lambda r: (r.set_state("training"), "t")[1])
        if state == "succeeded":
            ledger.edit(child.run_id, lambda r: (r.set_state("exporting"), r.set_state("succeeded"), "s")[2])
    current = sweeps.refresh(ledger, parent.run_id)
    assert current.state == state
    with pytest.raises(PermanentFailure):
        operations.retry_parent(
            ledger,
            current,
            RetryAsked(
                "ann",
                "why",
                None,
                "k",
                None,
                lambda r: None,
            ),
        )


def test_the_parent_ends_once_with_a_status_message_naming_the_winner(buckets: Buckets) -> None:
    from rlpipe.control.adapters.notify import status_message

    ledger, _parent, children = _claimed(buckets, select={"metric": "post_mean_reward"})
    ids = [c.run_id for c in children]
    for run_id, post in zip(ids, [0.5, 0.6, 0.7, 0.4], strict=True):
        _trained(ledger, run_id, post)

    def settle(run_id: str) -> None:
        while sweeps.arrive(ledger, ledger.get(run_id))["wait"]:  # type: ignore[arg-type]
            pass

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(settle, ids))

    def end(run_id: str) -> RunRecord | None:
        done = ledger.edit(run_id, lambda r: (r.set_state("exporting"), r.set_state("succeeded"), "s")[2])
        return sweeps.child_ended(ledger, done)

    with ThreadPoolExecutor(4) as pool:
        ended = [p for p in pool.map(end, ids) if p is not None]
    assert len(ended) == 1 and ended[0].state == "succeeded"
    message = status_message(ended[0])
    assert f"a sweep of 4 children, selected {ids[2]}" in message["message"]
    assert message["sweep"]["selection"]["run_id"] == ids[2]


def test_a_child_the_reconciler_finishes_gives_its_slot_back_and_can_end_the_sweep(buckets: Buckets) -> None:
    """A child whose execution died is finished by the reconciler, not by its workflow: the sweep
    must not wait forever for it (its slot, and the parent's end with its status message)."""
    from rlpipe.control.adapters.logs import Logger
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.core.runs.record import Execution
    from rlpipe.reconcile.repairs import Repairs
    from rlpipe.reconcile.rules import Action

    ledger, parent, children = _claimed(buckets)
    ids = [c.run_id for c in children]
    for run_id in ids[:3]:
        ledger.edit(run_id, lambda r: (r.set_state("training"), r.set_state("gated"), "g")[2])
    ledger.edit(ids[3], lambda r: (setattr(r, "execution", Execution(name="executions/x")), "e")[1])
    assert sweeps.take_slot(ledger, ledger.get(ids[3]), conversion_ready=True) is None  # type: ignore[arg-type]

    class Cluster:
        def list_run_objects(self, run_id: str | None = None) -> list[Any]:
            return []

        def delete(self, kind: Any, name: str) -> bool:
            return False

        def delete_run(self, run_id: str) -> list[str]:
            return []

    sent: list[dict[str, Any]] = []
    repairs = Repairs(
        Settings(project="p", status_topic="status"),
        ledger,
        Cluster(),
        intake=None,  # type: ignore[arg-type]
        log=Logger("test"),
        publish=lambda topic, message: sent.append(message),
        coordinator=SweepCoordinator(ledger, Logger("test")),
    )
    failure = {"tag": "permanent", "stage": "train", "attempt": 1, "message": "execution x failed"}
    action = Action(
        "finish",
        ids[3],
        found="FAILED",
        do="fail",
        execution="executions/x",
        outcome="failed",
        failure=failure,
    )
    assert repairs.apply(action).status == "done"
    after = ledger.get(parent.run_id)
    assert after is not None and after.sweep is not None and after.sweep.slots == []
    assert after.state == "failed" and f"child 3 ({ids[3]}) failed" in (
        after.failure.message if after.failure else ""
    )
    assert [m["run_id"] for m in sent] == [ids[3], parent.run_id]


def test_a_child_that_ended_after_arriving_is_not_selected(buckets: Buckets) -> None:
    ledger, _parent, children = _claimed(buckets, select={"metric": "post_mean_reward"})
    ids = [c.run_id for c in children]
    for run_id, post in zip(ids, [0.5, 0.6, 0.9, 0.4], strict=True):
        _trained(ledger, run_id, post)
    assert sweeps.arrive(ledger, ledger.get(ids[2]))["wait"]  # type: ignore[arg-type]
    ledger.edit(ids[2], lambda r: (r.set_state("cancelled"), "c")[1])  # an operator excludes it
    for run_id in (ids[0], ids[3]):
        assert sweeps.arrive(ledger, ledger.get(run_id))["wait"]  # type: ignore[arg-type]
    answer = sweeps.arrive(ledger, ledger.get(ids[1]))  # type: ignore[arg-type]
    assert answer["selected"] is True, answer["reason"]
    assert "child 2 is not a candidate: it ended cancelled" in answer["reason"]


def test_a_stale_refresh_never_undoes_the_parents_end(
    buckets: Buckets, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two children end at once: the refresh that read a sibling still running must not write
    `training` over the `succeeded` the sibling's refresh wrote meanwhile."""
    ledger, parent, children = _claimed(buckets)
    ids = [c.run_id for c in children]
    for run_id in ids[:3]:
        ledger.edit(
            run_id,
            lambda r: (r.set_state("training"), r.set_state("exporting"), r.set_state("succeeded"), "s")[3],
        )
    ledger.edit(ids[3], lambda r: (r.set_state("training"), "t")[1])
    real_get = ledger.get
    raced: list[bool] = []

    def get(run_id: str) -> RunRecord | None:
        record = real_get(run_id)
        if run_id == ids[3] and not raced:  # this refresh has read child 3 still training ...
            raced.append(True)
            ledger.edit(ids[3], lambda r: (r.set_state("exporting"), r.set_state("succeeded"), "s")[2])
            assert sweeps.refresh(ledger, parent.run_id).state == "succeeded"  # ... its own refresh wins
        return record

    monkeypatch.setattr(ledger, "get", get)
    assert sweeps.refresh(ledger, parent.run_id).state == "succeeded"
    assert real_get(parent.run_id).state == "succeeded"  # type: ignore[union-attr]


def test_a_winner_is_not_retrained_behind_its_selection(buckets: Buckets) -> None:
    from rlpipe.core.failures import PermanentFailure

    ledger, parent, children = _claimed(buckets, select={"metric": "post_mean_reward"})
    ids = [c.run_id for c in children]
    for run_id, post in zip(ids, [0.5, 0.6, 0.9, 0.4], strict=True):
        _trained(ledger, run_id, post)

    def settle(run_id: str) -> None:
        while sweeps.arrive(ledger, ledger.get(run_id))["wait"]:  # type: ignore[arg-type]
            pass

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(settle, ids))
    ledger.edit(
        ids[2], lambda r: (r.set_state("exporting"), r.set_state("publishing"), r.set_state("failed"), "f")[3]
    )
    for other in (ids[0], ids[1], ids[3]):
        ledger.edit(other, lambda r: (r.set_state("exporting"), r.set_state("succeeded"), "s")[2])
    failed = sweeps.refresh(ledger, parent.run_id)
    assert failed.state == "failed"
    with pytest.raises(PermanentFailure, match="retry from publish"):
        operations.retry_parent(ledger, failed, RetryAsked("a", "r", "train", "k", None, lambda r: None))
    started: list[str] = []
    operations.retry_parent(ledger, failed, RetryAsked("a", "r", None, "k2", None, started.append))
    assert started == [ids[2]]


def test_a_gated_sweep_is_not_promoted_as_if_it_were_a_run(buckets: Buckets) -> None:
    from rlpipe.control import operator_ops
    from rlpipe.core.failures import PermanentFailure

    ledger, parent, children = _claimed(buckets)
    for child in children:
        ledger.edit(child.run_id, lambda r: (r.set_state("training"), r.set_state("gated"), "g")[2])
    assert sweeps.refresh(ledger, parent.run_id).state == "gated"
    started: list[str] = []
    order = operator_ops.PromoteOrder(parent.run_id, "ann", "looked fine")
    with pytest.raises(PermanentFailure, match="is a sweep; promote one of its gated children"):
        operator_ops.promote(ledger, _policies(ledger), started.append, order, None, Logger("test"))  # type: ignore[arg-type]
    assert started == [] and ledger.get(parent.run_id).state == "gated"  # type: ignore[union-attr]


def test_a_gated_sweep_points_to_its_children_not_to_promoting_itself(buckets: Buckets) -> None:
    from rlpipe.cli.watch import next_command
    from rlpipe.control.lifecycle import retry_rounds

    ledger, parent, children = _claimed(buckets)
    for child in children:
        ledger.edit(child.run_id, lambda r: (r.set_state("training"), r.set_state("gated"), "g")[2])
    gated = sweeps.refresh(ledger, parent.run_id)
    assert "promote one of its children" in (retry_rounds.refusal(gated, None, _policies(ledger)) or "")
    assert (next_command(gated) or "").startswith(f"rlpipe status {parent.run_id}")


def _policies(ledger: Ledger) -> Any:
    """The run policies as control.services wires a deployment's."""
    from rlpipe.control import services
    from rlpipe.control.adapters.settings import Settings

    return services.run_policies(Settings(project="p"), ledger, ledger.store, Logger("test"))
