"""The record's free-form parts read as types (core.runs.recorded): what an older or damaged ledger
holds reads as unset, entry by entry, never as an error and never coerced into something else."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rlpipe import report
from rlpipe.cli import charts as cli_charts
from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import Lineage, RunRecord, Source


def test_unreadable_evaluations_are_left_out_and_the_readable_ones_kept() -> None:
    results = recorded.results(
        {
            "pre": "not an evaluation",
            "post": {"mean_reward": 1, "accuracy": "71%"},
            "intermediate": [
                {"step": 10, "mean_reward": 0.5},
                "garbage",
                7,
                {"step": "20", "mean_reward": 0.6},
            ],
            "final_step": True,
        }
    )
    assert results.pre is None
    assert results.post is not None and (results.post.mean_reward, results.post.accuracy) == (1.0, None)
    assert [(e.step, e.mean_reward) for e in results.intermediate or []] == [(10, 0.5), (None, 0.6)]
    assert results.final_step is None  # a boolean is not a step


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ({"intermediate": "junk"}, None),
        ({"intermediate": []}, []),
        (None, None),
        ([], None),
    ],
)
def test_a_results_part_that_is_not_a_list_or_mapping_reads_as_unset(raw: Any, shown: Any) -> None:
    assert recorded.results(raw).intermediate == shown


def test_the_request_as_recorded_keeps_what_reads_and_drops_what_does_not() -> None:
    request = recorded.request(
        {
            "model": "gemma4-26b",
            "hf_repo": ["not", "a", "repo"],
            "labels": ["team"],
            "tpu": {"type": "v6e-32", "provisioning": 3},
            "publish": {"repo": "acme/m"},
            "dataset": {"repo": "openai/gsm8k", "processor": "p.py"},
            "rewards": {"functions": ["exact_match", 1]},
            "a_field_of_a_later_version": {"x": 1},
        }
    )
    assert (request.model, request.hf_repo, request.labels) == ("gemma4-26b", None, None)
    assert request.tpu is not None and (request.tpu.type, request.tpu.provisioning) == ("v6e-32", None)
    assert request.publish is not None and (request.publish.repo, request.publish.branch) == ("acme/m", None)
    assert request.dataset is not None and request.dataset.repo == "openai/gsm8k"
    assert request.dataset.processor is None
    assert request.rewards is not None and request.rewards.functions is None


def test_pinned_data_without_a_file_list_says_so_and_an_empty_pin_is_none() -> None:
    pins = recorded.data({"train": {"repo": "r", "files": "not a list"}, "eval": {}})
    assert pins.train is not None and pins.train.files is None and pins.eval is None
    listed = recorded.data({"train": {"files": [{"size": 3}, "x", {"size": "4"}]}}).train
    assert listed is not None and [f.size for f in listed.files or []] == [3, None]


def test_a_damaged_ledgers_page_renders_with_what_it_can_read() -> None:
    record = RunRecord(
        run_id="rdamaged0001",
        key="k",
        source=Source(kind="cli"),
        request={"model": 5, "labels": "team=rl", "tpu": "v6e"},
        results={"post": {"mean_reward": "high"}, "intermediate": [{"step": 5, "mean_reward": 0.25}, None]},
        lineage=Lineage(data={"train": "gsm8k"}, inputs={"rewards": "rewards.py"}),
    )
    html = report.render_report(record, now=datetime(2026, 5, 1, tzinfo=UTC), painter=cli_charts)
    curve = report.reward_curve(record)
    assert curve is not None and [(p.step, p.mean_reward) for p in curve.intermediate] == [(5, 0.25)]
    assert curve.post is None  # "high" is not a number
    assert "rdamaged0001" in html
