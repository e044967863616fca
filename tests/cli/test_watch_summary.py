"""The summary `rlpipe watch` and `make demo` print when a run ends: what it cost, and what to do next."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from rlpipe.cli.watch import summary
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Attempt, RunRecord, Source
from tests.conftest import minimal_request

CHIP_HOURS = (12.5, 20.0)


def _record(state: str = "succeeded", **tpu: object) -> RunRecord:
    r = RunRecord(
        run_id="rsummary0001",
        key="k",
        source=Source(kind="cli"),
        request=validate_request(minimal_request(tpu=tpu) if tpu else minimal_request()).model_dump(
            mode="json"
        ),
        state=state,
    )
    r.attempts = [
        Attempt(
            stage="train",
            attempt=n,
            workload=f"w{n}",
            launched_at="2026-12-03T10:00:00.000000Z",
            phase="succeeded",
            chip_hours=held,
            finished_at="2026-12-03T11:00:00.000000Z",
        )
        for n, held in enumerate(CHIP_HOURS, start=1)
    ]
    return r


def _cost_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().startswith("cost")]


@pytest.mark.parametrize("simulated", [False, True])  # `rlpipe watch` on GCP, and the demo's summary
def test_no_published_price_is_said_once_with_how_to_set_one(
    simulated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLPIPE_PRICES", raising=False)
    (line,) = _cost_lines(summary(_record(), simulated=simulated))
    shipped = json.loads(resources.files("rlpipe.core").joinpath("prices.json").read_text())
    reservation = shipped["prices"]["v6e"]["reservation"]
    assert reservation["price"] is None, "the premise: nobody published a v6e reservation price"
    # Once: not "unset at ... price: unset (not found: ...)"; the shipped file's note and source
    # are where a reader of prices.json finds them, not in every summary.
    assert "unset" not in line and len(re.findall(r"\bprice\b", line)) == 1
    assert reservation["note"] not in line and reservation["source"] not in line
    assert "reservation" in line and "v6e" in line
    assert "RLPIPE_PRICES" in line, "how to set one"


def test_a_published_price_gives_the_amount_and_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    price = 1.2
    monkeypatch.setenv(
        "RLPIPE_PRICES",
        json.dumps({"v6e": {"spot": {"price": price, "source": "our contract", "read": "2026-11-30"}}}),
    )
    (line,) = _cost_lines(summary(_record(provisioning="spot")))
    assert f"${sum(CHIP_HOURS) * price:,.2f}" in line
    assert "spot" in line and "our contract" in line and "RLPIPE_PRICES" not in line


def test_the_summary_names_the_pinned_data_and_the_reward_files_hash() -> None:
    """Issue 27: `status` says what the run trained on (each split at its commit) and with (the
    request's own reward functions by name and sha256, or MaxText's built-in ones)."""
    sha, digest = "9" * 40, "ab" * 32
    split = {"repo": "openai/gsm8k", "revision": "main", "sha": sha, "subset": "main", "num_examples": 7473}
    record = _record()
    record.lineage.data = {
        "train": {**split, "split": "train", "files": [{"path": "main/train.parquet", "size": 10}]},
        "eval": {
            **split,
            "split": "test",
            "num_examples": 1319,
            "files": [{"path": "main/test.parquet", "size": 5}],
        },
    }
    text = summary(record)
    assert (
        f"train: openai/gsm8k@{sha[:12]} (main) subset main split train: 1 files, 10 bytes, 7473 examples"
        in text
    )
    assert "split test" in text and "1319 examples" in text
    assert "built-in: match_format_exactly, match_format_approximately, check_numbers" in text
    record.lineage.inputs = {
        "rewards": {"uri": "gs://a/runs/r/inputs/rewards.py", "sha256": digest, "source": "rewards.py",
                    "functions": ["exact_match", "length_penalty"]}
    }  # fmt: skip
    text = summary(record)
    assert f"rewards.py exact_match, length_penalty: sha256 {digest}" in text
    assert "built-in" not in text
