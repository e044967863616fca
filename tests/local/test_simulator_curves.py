"""The played train_rl's reward curves (``local/simulator/reward_curve.py``): the tuned point prints
what it always did, every curve is a pure function of hyper-parameters, seed and step, and the
curves cross, so an early-stopping rule can be wrong.

Each property is shown to bite: a mutated copy of the module (in tmp_path) makes the same check
report it (``_mutant``)."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest

from rlpipe.local.simulator import reward_curve, train_rl
from rlpipe.local.simulator.program import Arguments
from tests.harness.mutants import mutant

STEPS = (0, 1, 10, 20, 45, 50, 100, 200, 500)

# Today's formula worked by hand, the tuned point (learning rate 2e-5, KL weight 0.08):
# 0.12 + 0.66·(1 − e^(−step/45)), rounded to 4 places.
#   step 10: e^(−0.2222) = 0.80074 → 0.12 + 0.66·0.19926 = 0.25151 → 0.2515
#   step 45: e^(−1)      = 0.36788 → 0.12 + 0.66·0.63212 = 0.53720 → 0.5372
#   step 90: e^(−2)      = 0.13534 → 0.12 + 0.66·0.86466 = 0.69068 → 0.6907
HAND = {0: 0.12, 10: 0.2515, 45: 0.5372, 90: 0.6907}
# rl.grpo_beta 0.04 at the tuned learning rate: pace (0.08/0.04)^(1/4) = 1.18921;
#   step 45: e^(−1.18921) = 0.30446 → 0.12 + 0.66·0.69554 = 0.57905 → 0.5791
HAND_HALF_BETA = {45: 0.5791}

# The benchmark's grid (bench/early_stop.py): learning rates 2e-5·10^x, x in {−1, −1/3, 1/3, 1}.
GRID = [2e-5 * 10**x for x in (-1.0, -1 / 3, 1 / 3, 1.0)]


def _mutant(tmp_path: Path, old: str, new: str) -> ModuleType:
    """A copy of reward_curve.py with one change (``tests.harness.mutants``), its functions still callable."""
    with mutant(reward_curve, old, new, tmp_path) as module:
        return module


# ---- the tuned point ---------------------------------------------------------------------------


def _tuned_problems(module: ModuleType) -> list[str]:
    found = []
    for lr, beta in ((None, None), (2e-5, None), (None, 0.08), (2e-5, 0.08)):
        for seed in (None, 42, 7):
            c = module.curve(lr, beta, seed)
            found += [f"{lr} {beta} {seed} step {s}" for s, v in HAND.items() if c.value(s) != v]
    c = module.curve(2e-5, 0.04, 42)
    found += [f"beta 0.04 step {s}" for s, v in HAND_HALF_BETA.items() if c.value(s) != v]
    return found


def test_the_tuned_point_prints_todays_values_whatever_the_seed() -> None:
    assert _tuned_problems(reward_curve) == []


def test_the_tuned_point_check_bites(tmp_path: Path) -> None:
    mutant = _mutant(tmp_path, "rate, gain, noise = 1.0, GAIN, 0.0", "rate, gain, noise = 1.0, GAIN, 0.01")
    assert _tuned_problems(mutant)


def test_the_program_reads_the_curve_of_its_arguments() -> None:
    """train_rl passes its learning rate, KL weight and data_shuffle_seed; none of them: the tuned curve."""
    tuned = train_rl.reward_curve_of(Arguments({}, {}))
    assert [tuned.value(s) for s in HAND] == list(HAND.values())
    args = Arguments({"learning_rate": "2e-4", "rl.grpo_beta": "0.04", "data_shuffle_seed": "5"}, {})
    assert train_rl.reward_curve_of(args) == reward_curve.curve(2e-4, 0.04, 5)
    assert train_rl.reward_curve_of(args) != reward_curve.curve(2e-4, 0.04, 6)


# ---- determinism and seeds ---------------------------------------------------------------------


def _determinism_problems(module: ModuleType) -> list[str]:
    """The same hyper-parameters and seed give the same value at a step, however often and in
    whatever order the steps are read (a status read parses a line twice; a resumed attempt
    evaluates a step again)."""
    found = []
    for lr in GRID:
        forward = [module.curve(lr, 0.04, 3).value(s) for s in STEPS]
        again = [module.curve(lr, 0.04, 3).value(s) for s in reversed(STEPS)][::-1]
        if forward != again:
            found.append(f"lr {lr}: {forward} then {again}")
    return found


def test_the_same_parameters_and_seed_give_the_same_curve() -> None:
    assert _determinism_problems(reward_curve) == []


def test_the_determinism_check_bites(tmp_path: Path) -> None:
    mutant = _mutant(tmp_path, 'random.Random(f"{self.key}|{step}")', "random.Random()")
    assert _determinism_problems(mutant)


def _seed_problems(module: ModuleType) -> list[str]:
    noisy = 2e-4  # a decade above the tuned rate
    one = [module.curve(noisy, None, 1).value(s) for s in STEPS[1:]]
    other = [module.curve(noisy, None, 2).value(s) for s in STEPS[1:]]
    derived = [module.curve(noisy, None, None).value(s) for s in STEPS[1:]]
    return (
        [] if one != other and derived not in (one, other) else [f"seeds 1, 2, none: {one} {other} {derived}"]
    )


def test_two_seeds_give_different_noise() -> None:
    assert _seed_problems(reward_curve) == []


def test_the_seed_check_bites(tmp_path: Path) -> None:
    mutant = _mutant(
        tmp_path, 'origin = "hyper-parameters" if seed is None else f"seed {seed}"', 'origin = ""'
    )
    assert _seed_problems(mutant)


# ---- curves that cross -------------------------------------------------------------------------


def _ranks(module: ModuleType, step: int) -> list[int]:
    values = [module.curve(lr, beta, 11).value(step) for lr in GRID for beta in (0.008, 0.08, 0.8)]
    return sorted(range(len(values)), key=lambda i: -values[i])


def _crossing_problems(module: ModuleType) -> list[str]:
    """A late bloomer: the child ranked first at the first evaluation is not first at step 200, and
    a child below the median at step 10 ends above it."""
    early, late = _ranks(module, 10), _ranks(module, 200)
    found = []
    if early[0] == late[0]:
        found.append(f"the same child leads at step 10 and 200: {early[0]}")
    half = len(early) // 2
    if not set(early[half:]) & set(late[:half]):
        found.append("no child in the bottom half at step 10 ends in the top half")
    return found


def test_some_child_is_a_late_bloomer() -> None:
    assert _crossing_problems(reward_curve) == []


def test_the_late_bloomer_check_bites(tmp_path: Path) -> None:
    """Curves whose rate does not grow with the learning rate never cross."""
    mutant = _mutant(tmp_path, "rate = 10.0**decades", "rate = 1.0")
    assert _crossing_problems(mutant)


def test_a_learning_rate_far_above_rises_fast_ends_lower_and_is_noisier() -> None:
    high, tuned, low = reward_curve.curve(2e-4), reward_curve.curve(2e-5), reward_curve.curve(2e-6)
    assert high.value(10) > tuned.value(10) > low.value(10)
    assert high.gain < tuned.gain == low.gain and high.noise > tuned.noise == low.noise == 0
    spread = [high.value(s) - (reward_curve.START + high.gain) for s in range(150, 400, 10)]
    assert max(spread) - min(spread) > 2 * reward_curve.NOISE_PER_DECADE


@pytest.mark.parametrize("lr", GRID)
def test_values_stay_within_zero_and_one_at_four_places(lr: float) -> None:
    for seed in range(20):
        for s in STEPS:
            v = reward_curve.curve(lr, 0.008, seed).value(s)
            assert 0.0 <= v <= 1.0 and v == round(v, 4) and not math.isnan(v)


def test_the_seed_the_curve_reads_is_the_one_maxtext_shuffles_with() -> None:
    """The facts fixture (read from MaxText 0.2.4, with its lines) names train_rl's one seed; the
    simulator seeds its noise by the flag of that name."""
    import yaml

    facts = yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "fixtures" / "maxtext_facts.yaml").read_text()
    )
    data_rule = facts["step_arithmetic"]["end_rule"]["data"]
    assert f"shuffled with {reward_curve.SEED_FLAG} (MT train_rl.py:341-344; rl.yml:30" in data_rule
