"""`make bench` stays green: every section of bench/run_all.py runs in its smallest form
(``--smoke``), in its own interpreter as `make bench` runs it, and each one's correctness checks
pass. Its figures are not looked at (benchmarks are not timed tests: bench/README.md); what fails
here is a benchmark that no longer runs, as section 9 did when publish began to need --manifest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.run_all import ORDER, TITLES
from tests.conftest import ROOT
from tests.harness.patience import ceiling

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("bench-smoke")]
WAIT = 240  # about 2.5 minutes on a quiet 2-core machine; the hang guard is the wait's own ceiling


@pytest.mark.timeout(int(ceiling(WAIT)) + 60)
def test_every_bench_section_runs_and_its_checks_pass(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.run_all", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=ceiling(WAIT),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    text = out.read_text()
    assert "`--smoke`: correctness only" in text
    for key in ORDER:  # every section ran (by its number: a section may title itself), none crashed
        number = TITLES[key].split(" ", 1)[0]
        assert f"\n## {number} " in text, key
    assert "**The benchmark crashed**" not in text and "**FAILED**" not in text
