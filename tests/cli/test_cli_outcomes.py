"""What `rlpipe status` and `rlpipe list` show of a run's outcome, against a record in memory."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rlpipe.cli import main as cli
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.runs.record import Attempt, GateRecord, RunRecord, Source


def record() -> RunRecord:
    r = RunRecord(
        run_id="rabc",
        key="k",
        source=Source(kind="cli"),
        request={"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"},
        state="gated",
    )
    r.execution.name = "projects/p/locations/us-central1/workflows/rlpipe-pipeline/executions/e-1"
    r.attempts = [
        Attempt(
            stage="train",
            attempt=1,
            workload="w1",
            launched_at="2026-12-03T10:00:00.000000Z",
            phase="failed",
            chip_hours=12.5,
            finished_at="2026-12-03T11:00:00.000000Z",
            failure_class="preempted",
            reason="x",
        ),
        Attempt(
            stage="train",
            attempt=2,
            workload="w2",
            launched_at="2026-12-03T11:00:00.000000Z",
            phase="succeeded",
            chip_hours=20.0,
            finished_at="2026-12-03T12:00:00.000000Z",
        ),
    ]
    r.results = {
        "pre": {"mean_reward": 0.12, "accuracy": 10.0},
        "post": {"mean_reward": 0.41, "accuracy": 30.0},
        "intermediate": [{"step": 10, "mean_reward": 0.3, "accuracy": 20.0}],
        "final_step": 50,
    }
    r.gate = GateRecord(passed=False, reasons=["post mean_reward 0.4100 below min_post_mean_reward 0.5"])
    return r


@pytest.fixture
def gcp(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RLPIPE_LOCAL", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings(project="my-proj", artifacts_bucket="my-artifacts")
    monkeypatch.setattr(cli, "_settings", lambda: settings)
    ledger = SimpleNamespace(
        get=lambda run_id: record() if run_id == "rabc" else None, list_runs=lambda: [record()]
    )
    monkeypatch.setattr(cli, "_ledger", lambda s: ledger)


def test_status_shows_rewards_chip_hours_gate_and_console_links(
    gcp: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "rabc"]) == 0
    out = capsys.readouterr().out
    assert "chip-hours  32.50 TPU chip-hours held (train 32.50)" in out
    assert "gate        FAILED: post mean_reward 0.4100 below min_post_mean_reward 0.5" in out
    assert (
        "evaluations every attempt, mean_reward: step 10 0.3000" in out
    )  # a ledger before per-attempt evaluations
    assert "console.cloud.google.com/workflows/workflow/us-central1/rlpipe-pipeline/execution/e-1" in out
    assert "console.cloud.google.com/storage/browser/my-artifacts/runs/rabc" in out


def test_list_has_the_post_reward_and_its_change(
    gcp: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlpipe.cli import runs

    monkeypatch.setattr(runs, "list_runs", lambda ledger: [record()])
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "REWARD" in out.splitlines()[0]
    assert "0.4100 (+0.2900)" in out


def test_the_summary_lists_each_attempts_evaluations_once_per_step() -> None:
    """The text merged attempts and repeated steps (`80: 0.6685, 80: 0.6685`) under "(last 5)":
    each attempt has its line, each step appears once, and what is left out is counted."""
    from rlpipe.cli.watch import summary
    from rlpipe.core.runs.record import RunRecord

    data = record().model_dump()
    first = [
        {"step": s, "mean_reward": 0.5 + s / 1000, "attempt": 1} for s in (10, 20, 30, 40, 50, 60, 70, 80)
    ]
    again = [{"step": 80, "mean_reward": 0.6685, "attempt": 1}]  # a status read that saw step 80 twice
    second = [{"step": s, "mean_reward": 0.7 + s / 1000, "attempt": 2} for s in (90, 100)]
    data["results"] = {**(data.get("results") or {}), "intermediate": [*first, *again, *second]}
    text = summary(RunRecord.model_validate(data))
    lines = [line for line in text.splitlines() if line.startswith("  evaluations")]
    assert lines == [
        "  evaluations attempt 1, mean_reward: step 40 0.5400, step 50 0.5500, step 60 0.5600, step 70 0.5700, "
        "step 80 0.6685 (3 earlier: `rlpipe report` draws them all)",
        "  evaluations attempt 2, mean_reward: step 90 0.7900, step 100 0.8000",
    ], text
