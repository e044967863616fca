"""bench/early_stop.py: its sweep simulation charges, frees slots and picks winners as the control
plane would (small, hand-made curves; each check also run on a mutated copy that must fail it)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from bench import early_stop
from rlpipe.core.request.sweep import EarlyStop
from rlpipe.local.simulator.reward_curve import Curve
from tests.harness.mutants import mutant

SETUP = early_stop.Setup(
    final_step=50, step_seconds=60.0, startup_seconds=180.0, poll_seconds=300.0, max_parallel=4
)
ASHA = EarlyStop(rule="asha", eta=3)
# Children 0-2 alike (a tie never stops), child 3 the worst at step 10, child 4 queued behind them.
# Values by hand: the alike children 0.12 + 0.2·(1 − e^(−10·3/45)) = 0.2027 at step 10, 0.3101 at 50;
# child 3: 0.12 + 0.66·(1 − e^(−10·0.5/45)) = 0.1894 at step 10, 0.4010 at 50 (a late bloomer).
ALIKE = Curve(rate=3.0, gain=0.2)
BLOOMER = Curve(rate=0.5, gain=0.66)
CURVES = [ALIKE, ALIKE, ALIKE, BLOOMER, ALIKE]


def _mutant(tmp_path: Path, old: str, new: str) -> ModuleType:
    """A copy of early_stop.py with one change (``tests.harness.mutants``), its functions still callable."""
    with mutant(early_stop, old, new, tmp_path) as module:
        return module


def test_without_a_rule_every_child_runs_to_its_end_in_waves_of_max_parallel() -> None:
    """16 children, 4 slots: each ends 180 + 50·60 = 3180 s after launch, seen at the read at 3300 s,
    which launches the next; 4 waves of 3300 s. Chip-hours: 16 × 3180 s × 32 chips."""
    sweep = early_stop.simulate([ALIKE] * 16, SETUP, EarlyStop(rule="none"), ())
    assert sweep.stopped == 0
    assert sweep.makespan == 4 * 3300.0
    assert abs(sweep.chip_hours - 16 * 3180 * 32 / 3600) < 1e-9
    assert [c.launched for c in sweep.children[::4]] == [0.0, 3300.0, 6600.0, 9900.0]


def _slot_problems(module: ModuleType) -> list[str]:
    """Child 3 is stopped at the rung at step 10, at the read that records it (900 s: its
    evaluation printed at 180 + 10·60 = 780 s); its chips are charged until then and child 4 takes
    its slot at that same read."""
    rungs = module.rungs_for(ASHA, 50)
    sweep = module.simulate(CURVES, SETUP, ASHA, rungs)
    three, four = sweep.children[3], sweep.children[4]
    found = []
    if rungs != (10, 30):
        found.append(f"rungs {rungs}")
    if three.stopped_at != 10 or three.released != 900.0:
        found.append(f"child 3 stopped at step {three.stopped_at}, released at {three.released}")
    if four.launched != 900.0:
        found.append(f"child 4 launched at {four.launched}, not when child 3's slot was freed (900)")
    if [c.stopped_at for c in sweep.children] != [None, None, None, 10, None]:
        found.append(f"stopped: {[c.stopped_at for c in sweep.children]}")
    return found


def test_a_stopped_child_frees_its_slot_at_the_read_that_stops_it() -> None:
    assert _slot_problems(early_stop) == []


def test_the_slot_check_bites(tmp_path: Path) -> None:
    mutant = _mutant(
        tmp_path,
        "child.released = child.seen_ended = now\n                launch(now)",
        "child.released = child.seen_ended = now",
    )
    assert _slot_problems(mutant)


def _winner_problems(module: ModuleType) -> list[str]:
    """The late bloomer wins when nobody is stopped; once stopped it is not a candidate."""
    none = module.simulate(CURVES, SETUP, EarlyStop(rule="none"), ())
    asha = module.simulate(CURVES, SETUP, ASHA, module.rungs_for(ASHA, 50))
    found = []
    if none.winner != 3:
        found.append(f"none's winner {none.winner}")
    if asha.winner in (3, None):
        found.append(f"asha's winner {asha.winner}: the stopped child or nobody")
    return found


def test_a_stopped_child_is_never_the_winner() -> None:
    assert _winner_problems(early_stop) == []


def test_the_winner_check_bites(tmp_path: Path) -> None:
    mutant = _mutant(
        tmp_path, "candidates = [c for c in children if c.stopped_at is None]", "candidates = children"
    )
    assert _winner_problems(mutant)


def test_the_grid_spans_a_decade_each_side_in_grid_order() -> None:
    import random

    for rng in (None, random.Random(3)):
        points = early_stop.grid(rng)
        rates = sorted({lr for lr, _ in points})
        assert len(points) == 16 and len(rates) == 4
        assert [lr for lr, _ in points] == sorted(lr for lr, _ in points)  # learning rate first, beta fastest
        assert 2e-6 * 0.999 <= rates[0] < 2e-5 < rates[-1] <= 2e-4 * 1.001
