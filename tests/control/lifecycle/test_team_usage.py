"""A team's usage document under compare-and-swap (control/lifecycle/team_usage.py), on fake-gcs-server
behind the strict proxy: two plans at the limit cannot both go on; a place a run never gave back is
found ended from its ledger; the document is built from the ledgers once, when it does not exist.

Each check is a function that says what went wrong; a mutated copy of the store shows it bites.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from rlpipe.control.adapters import interleave
from rlpipe.control.lifecycle import team_usage
from rlpipe.core import layout
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Attempt, RunRecord, Source, now
from rlpipe.core.teams import parse_teams
from tests.conftest import Buckets, minimal_request
from tests.harness.mutants import mutant

TEAMS = parse_teams({"vision": {"limits": {"active_runs": 1}}, "speech": {}})


def _claim(buckets: Buckets, run_id: str, team: str = "vision", state: str = "accepted") -> RunRecord:
    record = RunRecord(
        run_id=run_id,
        key=run_id,
        source=Source(kind="gcs", team=team),
        request=validate_request(minimal_request()).model_dump(mode="json"),
    )
    record.state = state  # type: ignore[assignment]
    buckets.ledger().claim(record)
    return record


def _store(module: ModuleType, buckets: Buckets) -> Any:
    return module.TeamUsageStore(
        buckets.store("state"), buckets.ledger(), poll_seconds=300, sleep=lambda s: None
    )


def race_problems(module: ModuleType, buckets: Buckets) -> list[str]:
    """Two plans at a limit of one active run, the first parked after it read the document while
    the second goes through: exactly one may go on."""
    team = TEAMS.named("vision")
    assert team is not None
    first, second = _claim(buckets, "rracea00001"), _claim(buckets, "rraceb00001")
    outcomes: dict[str, str] = {}
    barrier = interleave.Barrier()

    def parked() -> None:
        outcomes["first"] = _store(module, buckets).admit(team, first).outcome

    with interleave.hooked("team_usage.update:read", barrier):
        thread = threading.Thread(target=parked)
        thread.start()
        barrier.wait_reached()
        outcomes["second"] = _store(module, buckets).admit(team, second).outcome
        barrier.release()
        thread.join(60)
    problems = []
    if sorted(outcomes.values()) != ["admitted", "wait"]:
        problems.append(f"two plans at a limit of one: {outcomes}")
    stored = _store(module, buckets).read("vision")
    holders = [h.run_id for h in stored.holders] if stored else []
    if len(holders) != 1:
        problems.append(f"the document holds {holders}")
    return problems


def test_two_plans_at_the_limit_give_one_place(buckets: Buckets) -> None:
    assert race_problems(team_usage, buckets) == []


def test_without_the_compare_and_swap_both_would_go_on(buckets: Buckets, tmp_path: Path) -> None:
    with mutant(
        team_usage,
        'self.store.replace(name, blobstore.dumps(usage.model_dump(mode="json")), generation)',
        'self.store.put(name, blobstore.dumps(usage.model_dump(mode="json")))',
        tmp_path,
    ) as careless:
        problems = race_problems(careless, buckets)
    assert any("two plans at a limit of one" in p for p in problems), problems


def unseen_end_problems(module: ModuleType, buckets: Buckets) -> list[str]:
    """A holder ended without giving its place back (the reconciler ended it in its ledger): the
    next plan at the limit reads its ledger, charges what it held, and goes on."""
    team = TEAMS.named("vision")
    assert team is not None
    store = _store(module, buckets)
    gone, next_run = _claim(buckets, "rgone000001"), _claim(buckets, "rnext000001")
    problems = []
    if store.admit(team, gone).outcome != "admitted":
        problems.append("the first run did not go on")

    def ended(r: RunRecord) -> str:
        r.attempts.append(
            Attempt(
                stage="train",
                attempt=1,
                workload="w",
                launched_at=now(),  # after its admission: launched in its holding
                finished_at=now(),
                chip_hours=6.5,
            )
        )
        r.state = "failed"
        return "reconciled"

    buckets.ledger().edit("rgone000001", ended)  # no release: as repairs.py ends a run
    decision = store.admit(team, next_run)
    if decision.outcome != "admitted":
        problems.append(f"a run that ended unseen keeps its place: {decision}")
    stored = store.read("vision")
    if stored is None or stored.used.get("rgone000001") != 6.5:
        problems.append(f"what it held is not charged: {stored.used if stored else None}")
    return problems


def test_a_place_never_given_back_is_found_ended_from_the_ledger(buckets: Buckets) -> None:
    assert unseen_end_problems(team_usage, buckets) == []


def test_a_store_that_never_reads_the_holders_would_keep_the_place(buckets: Buckets, tmp_path: Path) -> None:
    with mutant(
        team_usage, "            elif record.terminal:", "            elif False:", tmp_path
    ) as blind:
        problems = unseen_end_problems(blind, buckets)
    assert any("keeps its place" in p for p in problems), problems


def test_release_gives_the_place_back_once(buckets: Buckets) -> None:
    team = TEAMS.named("vision")
    assert team is not None
    store = _store(team_usage, buckets)
    run = _claim(buckets, "rrelease001")
    assert store.admit(team, run).outcome == "admitted"
    assert store.admit(team, run).outcome == "holding"  # a repeated plan: no second place
    assert store.release(run) is True and store.release(run) is False
    stored = store.read("vision")
    assert stored is not None and stored.holders == [] and stored.seq == 2  # seq: admitted, released


def test_the_document_is_built_from_the_ledgers_once(buckets: Buckets) -> None:
    """Runs that planned before the team's document existed hold their places in it."""
    team = TEAMS.named("vision")
    assert team is not None
    _claim(buckets, "rrunning001", state="training")
    _claim(buckets, "rspeech0001", team="speech", state="training")
    store = _store(team_usage, buckets)
    newcomer = _claim(buckets, "rnewcomer01")
    decision = store.admit(team, newcomer)
    assert decision.outcome == "wait" and "1 of 1 active runs" in (decision.reason or ""), decision
    stored = store.read("vision")
    assert stored is not None and [h.run_id for h in stored.holders] == ["rrunning001"]
    assert stored.seeded_from == 3  # every ledger in the bucket was read, once
    assert buckets.store("state").exists(layout.team_usage("vision"))
    assert not buckets.store("state").exists(layout.team_usage("speech"))  # no plan of speech yet
