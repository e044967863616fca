"""Faults are the cluster simulator's: every way into the real plane refuses them, by one rule."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlpipe.local.clusters import NoFaults, refuse_faults
from tests.conftest import ROOT


def test_faults_are_refused_on_the_real_plane_only() -> None:
    with pytest.raises(NoFaults, match="--cluster double"):
        refuse_faults("real", ["train:1:preempt@30"], None)
    with pytest.raises(NoFaults):
        refuse_faults("real", [], "scenarios/preempt.yaml")
    refuse_faults("real", [], None)
    refuse_faults("double", ["train:1:preempt@30"], "scenarios/preempt.yaml")


def test_a_demo_scenario_with_faults_on_the_real_plane_stops_before_starting_anything() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "demo", "--cluster", "real", "--scenario", "preempt"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "needs faults" in result.stderr and "--cluster double" in result.stderr
