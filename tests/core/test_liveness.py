"""The liveness check (core.liveness) on the waits-for graphs users met: a team's sweep whose
children kept their team places at selection (the deadlock, as the ledgers recorded it with the
give-back at selection reverted) is found stuck, every run of it named; the same sweep once the
children give their places back, or with a holder still training, is not."""

from __future__ import annotations

from rlpipe.core import liveness
from rlpipe.core.runs.record import RunRecord
from tests.harness.team_deadlock import team_sweep_deadlock, waiting_run


def _team_sweep(*, places_kept: bool) -> tuple[dict[str, RunRecord], dict[str, list[str]]]:
    deadlock = team_sweep_deadlock(places_kept=places_kept)
    return deadlock.records, {"vision": deadlock.holders}


def test_a_team_sweep_whose_arrived_children_keep_their_places_is_stuck_every_run_of_it() -> None:
    records, holders = _team_sweep(places_kept=True)
    found = liveness.stuck(records, liveness.waits(records, holders))
    assert set(found) == {"rplain", "rchild0", "rchild5", "rchild1", "rchild2", "rchild3", "rchild4"}
    assert found["rchild0"].startswith("run rchild0 waits for a place under its team's limits, held by runs")
    assert "rchild1 waits for its siblings, at its sweep's selection" in found["rchild0"]
    assert "rchild0 waits for a place under its team's limits" in found["rchild5"]


def test_once_children_give_their_places_back_at_selection_nothing_is_stuck() -> None:
    records, holders = _team_sweep(places_kept=False)
    assert liveness.stuck(records, liveness.waits(records, holders)) == {}


def test_a_wait_on_a_run_that_makes_progress_or_has_ended_is_live() -> None:
    records, holders = _team_sweep(places_kept=True)
    records["rchild1"].admission = None  # still training: it reaches the selection by itself
    assert liveness.stuck(records, liveness.waits(records, holders)) == {}
    records, holders = _team_sweep(places_kept=True)
    records["rchild2"].state = "failed"  # its place goes back at the next plan
    records["rchild2"].admission = None
    found = liveness.stuck(records, liveness.waits(records, holders))
    assert found == {}, found


def test_the_selection_waits_for_every_sibling_and_a_place_for_any_one() -> None:
    records, holders = _team_sweep(places_kept=True)
    # Child 0's place is held by children 1-4; one of them ending frees it for child 0.
    records["rchild4"].state, records["rchild4"].admission = "cancelled", None
    assert liveness.stuck(records, liveness.waits(records, holders)) == {}
    # The selection needs every sibling: child 6 waits for the slot child 1 still holds at selection,
    # and child 1 waits for child 6 there, a cycle although children 0 and 5 move.
    records, holders = _team_sweep(places_kept=False)
    parent = records["rparent"].sweep
    assert parent is not None
    parent.children.append("rchild6")
    parent.slots = ["rchild1"]
    records["rchild6"] = waiting_run("rchild6", "sweep-slot", parent="rparent", index=6)
    found = liveness.stuck(records, liveness.waits(records, holders))
    assert set(found) == {"rchild6", "rchild1", "rchild2", "rchild3", "rchild4"}, found
