"""`make demo EVENTS=watcher` keeps what the run held: its chip-hours and its cost are in the summary.

A review found the watcher's demo without them ("It loses chip-hours and cost"): with events played
by listing the buckets, the run's end can be read before the stage function's own. The summary is
read as the user reads it, from the demo's output, with a price set so that a cost is due.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness.demos import run_demo_here

pytestmark = [pytest.mark.slow]


def test_the_watchers_demo_says_the_chip_hours_and_cost_its_run_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(
        "RLPIPE_PRICES", '{"v6e": {"reservation": {"price": 2.0, "source": "test", "read": "2026-12-01"}}}'
    )
    code, out = run_demo_here(capsys, events="watcher", root=tmp_path / "demo")
    assert code == 0, out[-3000:]
    assert "GCS's events were PLAYED by a bucket watcher" in out
    held = re.search(r"chip-hours\s+([\d.]+) TPU chip-hours held \(train ([\d.]+)", out)
    assert held and float(held[1]) > 0 and float(held[2]) > 0, out[-2000:]
    cost = re.search(r"cost\s+\$([\d.]+)", out)
    assert cost and float(cost[1]) > 0, out[-2000:]
