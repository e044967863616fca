"""The liveness check (core.liveness) on the waits-for graphs users met: a team's sweep whose
children kept their team places at selection (the deadlock, as the ledgers recorded it with the
give-back at selection reverted) is found stuck, every run of it named; the same sweep once the
children give their places back, or with a holder still training, is not."""

from __future__ import annotations

from rlpipe.core import liveness
from rlpipe.core.runs.record import Admission, Lineage, RunRecord, Source, SweepMember, SweepParent

T0 = "2026-12-06T10:00:00.000000Z"


def _run(
    run_id: str, waits_for: str | None = None, *, parent: str | None = None, index: int = 0
) -> RunRecord:
    record = RunRecord(
        run_id=run_id, key=run_id, source=Source(kind="gcs", team="vision"), request={}, state="accepted"
    )
    if waits_for is not None:
        record.admission = Admission(waits_for=waits_for, reason=f"queued: {waits_for}", since=T0)  # type: ignore[arg-type]
    if parent is not None:
        record.lineage = Lineage(sweep=SweepMember(parent=parent, index=index, size=6, point={}))
    return record


def _team_sweep(*, places_kept: bool) -> tuple[dict[str, RunRecord], dict[str, list[str]]]:
    """vision (active_runs 4): children 1-4 trained and wait at selection; child 0 waits for a place;
    child 5 for child 0's conversion; a plain vision run for a place."""
    children = [f"rchild{i}" for i in range(6)]
    parent = RunRecord(
        run_id="rparent",
        key="rparent",
        source=Source(kind="gcs", team="vision"),
        request={},
        state="training",
    )
    parent.sweep = SweepParent(
        children=children,
        points=[{}] * 6,
        max_parallel=6,
        slots=["rchild0", "rchild5"],
        converter="rchild0",
        arrived=children[1:5],
    )
    records = {"rparent": parent, "rplain": _run("rplain", "team-place")}
    records["rchild0"] = _run("rchild0", "team-place", parent="rparent", index=0)
    records["rchild5"] = _run("rchild5", "conversion", parent="rparent", index=5)
    for i in range(1, 5):
        records[children[i]] = _run(children[i], "selection", parent="rparent", index=i)
    holders = {"vision": children[1:5] if places_kept else []}
    return records, holders


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
    records["rchild6"] = _run("rchild6", "sweep-slot", parent="rparent", index=6)
    found = liveness.stuck(records, liveness.waits(records, holders))
    assert set(found) == {"rchild6", "rchild1", "rchild2", "rchild3", "rchild4"}, found
