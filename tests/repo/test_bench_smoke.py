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

# Each section in its own test (and so on any worker): run one after another they took five
# minutes under the suite's load, the longest single test in it.
pytestmark = [pytest.mark.slow]
WAIT = 120  # the longest section (soak) takes about a minute on a quiet 2-core machine


@pytest.mark.timeout(int(ceiling(WAIT)) + 60)
@pytest.mark.parametrize("key", ORDER)
def test_every_bench_section_runs_and_its_checks_pass(key: str, tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.run_all", "--smoke", "--only", key, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=ceiling(WAIT),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    text = out.read_text()
    assert "`--smoke`: correctness only" in text
    number = TITLES[key].split(" ", 1)[0]  # the section ran (by its number: a section may title itself)
    assert f"\n## {number} " in text, key
    assert "**The benchmark crashed**" not in text and "**FAILED**" not in text
