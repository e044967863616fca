"""The quality gate and the results it reads: thresholds against what train_rl printed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rlpipe.core import chip_hours, gate, train_log
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import GateSpec, validate_request
from tests.conftest import minimal_request

W = "W1203 12:00:00.000000 140318812 train_rl.py:785] "
LOG = "\n".join(
    [
        W + "Pre RL Training: corr=2, total=20, accuracy=10.0%, partial_accuracy=15.0%, "
        "format_accuracy=100.0%, mean_reward=0.1200",
        W + "Intermediate Eval (step=10): corr=6, total=20, accuracy=30.0%, partial_accuracy=35.0%, "
        "format_accuracy=100.0%, mean_reward=0.3300",
        W + "Post RL Training: corr=11, total=20, accuracy=55.0%, partial_accuracy=60.0%, "
        "format_accuracy=100.0%, mean_reward=0.5627",
    ]
)


def results(text: str = LOG) -> dict:
    return train_log.parse(text).results()


def test_results_hold_every_evaluation_with_all_six_numbers() -> None:
    r = results()
    assert r["pre"] == {
        "corr": 2.0,
        "total": 20,
        "accuracy": 10.0,
        "partial_accuracy": 15.0,
        "format_accuracy": 100.0,
        "mean_reward": 0.12,
    }
    assert r["post"]["mean_reward"] == 0.5627 and r["post"]["corr"] == 11.0
    assert r["intermediate"] == [{"step": 10, "mean_reward": 0.33, "accuracy": 30.0}]


def test_the_gate_passes_and_names_each_measured_value() -> None:
    v = gate.evaluate(
        GateSpec(min_post_mean_reward=0.5, min_reward_gain=0.4, min_post_accuracy=50), results()
    )
    assert v.passed is True
    assert any("post mean_reward 0.5627 meets min_post_mean_reward 0.5" in r for r in v.reasons)
    assert any("mean_reward gain 0.4427 meets min_reward_gain 0.4" in r for r in v.reasons)
    assert any("post accuracy 55.0000% meets min_post_accuracy 50%" in r for r in v.reasons)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (GateSpec(min_post_mean_reward=0.6), "post mean_reward 0.5627 below min_post_mean_reward 0.6"),
        (GateSpec(min_reward_gain=0.5), "mean_reward gain 0.4427 below min_reward_gain 0.5"),
        (GateSpec(min_post_accuracy=60), "post accuracy 55.0000% below min_post_accuracy 60%"),
    ],
)
def test_the_gate_fails_naming_the_threshold_and_the_measured_value(spec: GateSpec, named: str) -> None:
    v = gate.evaluate(spec, results())
    assert v.passed is False
    assert named in v.summary


def test_a_gate_without_a_post_line_cannot_be_evaluated_and_never_passes() -> None:
    crashed = "\n".join(LOG.splitlines()[:2])  # the program died before Post RL Training
    v = gate.evaluate(GateSpec(min_post_mean_reward=0.0), results(crashed))
    assert v.passed is None
    assert "Pre RL Training" in v.summary and "crashed before evaluating" in v.summary
    v = gate.evaluate(GateSpec(min_reward_gain=-10), results(""))
    assert v.passed is None and "no evaluation line" in v.summary


def test_a_nan_reward_is_missing_not_a_pass() -> None:
    nan_post = LOG.replace("mean_reward=0.5627", "mean_reward=nan")
    assert gate.evaluate(GateSpec(min_post_mean_reward=-1e9), results(nan_post)).passed is None


def test_request_gate_and_publish_fields_with_their_defaults() -> None:
    req = validate_request(
        minimal_request(gate={"min_post_mean_reward": 0.5}, publish={"repo": "rlpipe-demo/tuned"})
    )
    assert req.gate is not None and req.gate.min_post_mean_reward == 0.5 and req.gate.min_reward_gain is None
    assert req.publish is not None
    assert (req.publish.private, req.publish.branch) == (True, "main")  # private by default
    assert req.publish.token_secret.name != req.hf_token_secret.name
    plain = validate_request(minimal_request())
    assert plain.gate is None and plain.publish is None


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"gate": {}}, "gate", "sets no threshold"),
        (
            {"gate": {"min_reward_gain": 0.1}, "maxtext_overrides": {"num_test_batches": 0}},
            "gate",
            "could not be evaluated",
        ),
        (
            {"publish": {"repo": "rlpipe-demo/tuned", "token_secret": {"name": "hf-token", "key": "token"}}},
            "publish.token_secret",
            "same Secret as the read token",
        ),
        ({"publish": {"repo": "not a repo"}}, "publish.repo", ""),
        ({"gate": {"min_post_accuracy": 140}}, "gate.min_post_accuracy", ""),
    ],
)
def test_bad_gate_or_publish_is_refused_naming_the_field(fields: dict, path: str, words: str) -> None:
    with pytest.raises(RequestInvalid) as info:
        validate_request(minimal_request(**fields))
    found = [p for p in info.value.problems if p.path == path]
    assert found, [p.path for p in info.value.problems]
    assert words in found[0].message and found[0].fix


T = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def pod(
    chips: int | None, start: float | None, end: float | None = None, *, deleting: float | None = None
) -> dict:
    resources = {"limits": {"google.com/tpu": str(chips)}} if chips else {}
    status: dict = {"phase": "Running"}
    if start is not None:
        status["startTime"] = (T + timedelta(seconds=start)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if end is not None:
        status["phase"] = "Failed"
        finished = (T + timedelta(seconds=end)).strftime("%Y-%m-%dT%H:%M:%SZ")
        status["containerStatuses"] = [{"state": {"terminated": {"finishedAt": finished}}}]
    meta = {}
    if deleting is not None:
        meta["deletionTimestamp"] = (T + timedelta(seconds=deleting)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta, "spec": {"containers": [{"resources": resources}]}, "status": status}


def test_chip_hours_count_tpu_pods_from_start_to_end_only() -> None:
    pods = [
        pod(4, 0, 3600),  # a finished TPU host: 4 chip-hours
        pod(4, 1800),  # still running at now (+2 h): 4 × 1.5 h
        pod(4, 0, deleting=900),  # being deleted: counted to its deletionTimestamp
        pod(None, 0, 3600),  # the CPU head holds no chip
        pod(4, None),  # never started (queued): nothing held
    ]
    assert chip_hours.chip_hours(pods, T + timedelta(hours=2)) == pytest.approx(4 + 6 + 1)


def test_the_baseline_is_the_first_attempts_pre_not_a_resumed_attempts() -> None:
    from rlpipe.core.runs.results import merge_results, with_baseline

    first = merge_results({}, results(), 50)
    resumed_log = LOG.replace("mean_reward=0.1200", "mean_reward=0.4411")  # the partly trained model
    after = merge_results(first, train_log.parse(resumed_log).results(), 50, resumed=True)
    assert after["pre"]["mean_reward"] == 0.12 and after["post"]["mean_reward"] == 0.5627
    progress = train_log.parse(resumed_log).progress()
    assert progress and progress["pre_mean_reward"] == 0.4411
    assert with_baseline(progress, after)["pre_mean_reward"] == 0.12  # type: ignore[index]
    # Evaluations a later tail no longer shows are kept.
    assert merge_results(first, {"intermediate": []}, 50)["intermediate"] == first["intermediate"]
