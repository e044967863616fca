"""The ledgers of the deadlock users met, as a build without the give-back at selection leaves
them: team vision (``active_runs: 4``) with a sweep of six children, children 1-4 trained and
waiting at selection while still holding the team's four places, child 0 queued for a place
(and holding the sweep's converter role), child 5 waiting for child 0's conversion, and a plain
vision run queued for a place. Shared by the liveness rule's tests and the reconciler's."""

from __future__ import annotations

from dataclasses import dataclass

from rlpipe.core.runs.record import Admission, Lineage, RunRecord, Source, SweepMember, SweepParent

SINCE = "2026-12-06T10:00:00.000000Z"
WAITS = {0: "team-place", 5: "conversion", **{i: "selection" for i in range(1, 5)}}


@dataclass
class Deadlock:
    parent: RunRecord
    children: list[RunRecord]
    plain: RunRecord
    holders: list[str]  # the runs vision's usage document counts as holding its places

    @property
    def records(self) -> dict[str, RunRecord]:
        return {r.run_id: r for r in (self.parent, *self.children, self.plain)}


def waiting_run(
    run_id: str, waits_for: str | None, *, parent: str | None = None, index: int = 0
) -> RunRecord:
    record = RunRecord(run_id=run_id, key=run_id, source=Source(kind="gcs", team="vision"), request={})
    if waits_for is not None:
        record.admission = Admission(waits_for=waits_for, reason=f"queued: {waits_for}", since=SINCE)  # type: ignore[arg-type]
    if parent is not None:
        record.lineage = Lineage(sweep=SweepMember(parent=parent, index=index, size=6, point={}))
    return record


def team_sweep_deadlock(prefix: str = "r", *, places_kept: bool = True) -> Deadlock:
    """The ledgers above (``places_kept`` False: as the fixed build leaves them, places given back)."""
    ids = [f"{prefix}child{i}" for i in range(6)]
    parent = RunRecord(
        run_id=f"{prefix}parent",
        key=f"{prefix}parent",
        source=Source(kind="gcs", team="vision"),
        request={},
        state="training",
    )
    parent.sweep = SweepParent(
        children=ids,
        points=[{}] * 6,
        max_parallel=6,
        slots=[ids[0], ids[5]],
        converter=ids[0],
        arrived=ids[1:5],
    )
    children = [waiting_run(run_id, WAITS[i], parent=parent.run_id, index=i) for i, run_id in enumerate(ids)]
    plain = waiting_run(f"{prefix}plain", "team-place")
    return Deadlock(parent, children, plain, ids[1:5] if places_kept else [])
