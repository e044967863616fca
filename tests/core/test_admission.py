"""A run's admission (core.runs.admission): one record of what a run waits for, since when, and the
bound that ends every wait; and the ledgers written before it, read into it."""

from __future__ import annotations

from rlpipe.core.runs import admission
from rlpipe.core.runs.record import RunRecord, Source, parse_time

T0 = "2026-12-06T10:00:00.000000Z"
T1 = "2026-12-06T11:00:00.000000Z"


def _run() -> RunRecord:
    return RunRecord(run_id="radmission01", key="k", source=Source(kind="cli"), request={})


def test_plans_waits_are_one_wait_and_selection_starts_another() -> None:
    record = _run()
    assert admission.wait(record, "conversion", "queued: child 0 converts", T0) == "admission-waiting"
    assert admission.wait(record, "conversion", "queued: child 0 converts", T1) is None  # asked again
    admission.wait(record, "team-place", "queued: team vision has 4 of 4 active runs", T1)
    assert record.admission is not None and (record.admission.waits_for, record.admission.since) == (
        "team-place",
        T0,
    )
    admission.wait(record, "selection", "at selection: waiting for children 2", T1)
    assert record.admission is not None and record.admission.since == T1
    assert admission.admitted(record) == "admission-admitted" and record.admission is None
    assert admission.admitted(record) is None


def test_a_wait_past_timeouts_waiting_ends_naming_what_it_waited_for() -> None:
    record = _run()
    admission.wait(record, "team-place", "queued: team vision has 4 of 4 active runs", T0)
    start = parse_time(T0).timestamp()
    assert admission.overdue(record.admission, 3600, start + 3600) is None
    why = admission.overdue(record.admission, 3600, start + 3601)
    assert why is not None
    assert why.startswith(
        "waited 1.0 h for a place under its team's limits, longer than timeouts.waiting (1.0 h)"
    )
    assert "team vision has 4 of 4 active runs" in why and "rlpipe retry" in why


def test_a_ledger_written_before_admission_is_read_into_it() -> None:
    """The two free-text fields of earlier ledgers: a team's queue on the run, a sweep's on its
    membership (a slot, the shared conversion, or the selection)."""
    base = {"run_id": "rold00000001", "key": "k", "source": {"kind": "cli"}, "request": {}, "updated_at": T0}
    member = {"parent": "rp", "index": 1, "size": 3, "point": {}}
    cases = {
        "team-place": {**base, "waiting": "queued: team vision has 4 of 4 active runs"},
        "sweep-slot": {
            **base,
            "lineage": {"sweep": {**member, "waiting": "queued: all 2 of the sweep's slots"}},
        },
        "conversion": {
            **base,
            "lineage": {"sweep": {**member, "waiting": "queued: waiting for child 0 (r) to convert"}},
        },
        "selection": {
            **base,
            "lineage": {"sweep": {**member, "waiting": "at selection: waiting for children 0"}},
        },
    }
    for waits_for, stored in cases.items():
        record = RunRecord.model_validate(stored)
        assert record.admission is not None and (record.admission.waits_for, record.admission.since) == (
            waits_for,
            T0,
        )
    moved_on = RunRecord.model_validate(
        {**base, "waiting": None, "lineage": {"sweep": {**member, "waiting": None}}}
    )
    assert moved_on.admission is None and moved_on.lineage.sweep is not None
