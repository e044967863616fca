"""The package layout holds: modules reviewed past a size, no name-prefix families, layers enforced.

`make check` runs `lint-imports` on the tree; these tests show the contracts bite (a forbidden
import planted in a copy of the library breaks them) and keep the rules import-linter cannot see.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "shared" / "rlpipe"
# Past this a module is looked at again: it may do two jobs. A module that is one job and longer
# is named in REVIEWED with why it stays whole. This is a trigger for a review, not a cap to split
# at: splitting by a line count left one-line forwarders and fragments no one could name.
REVIEW_AT_LINES = 800
REVIEWED: dict[str, str] = {}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _modules() -> list[Path]:
    return sorted(p for p in LIBRARY.rglob("*.py") if "__pycache__" not in p.parts)


def test_a_module_past_the_review_size_was_reviewed() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > REVIEW_AT_LINES
    }
    unreviewed = {path: n for path, n in long.items() if path not in REVIEWED}
    assert not unreviewed, (
        f"over {REVIEW_AT_LINES} lines: {unreviewed}. Does each do one job? Split it by meaning, or "
        "name it in REVIEWED with why it stays whole"
    )
    assert not set(REVIEWED) - set(long), "REVIEWED names a module that is no longer long: drop it"


def test_no_package_groups_modules_by_a_name_prefix() -> None:
    # `upstream_hub.py`, `upstream_poller.py`, ... beside each other are a package waiting to be made.
    for package in {p.parent for p in _modules()}:
        names = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
        prefixes = Counter(name.split("_", 1)[0] for name in names if "_" in name)
        families = {prefix: n for prefix, n in prefixes.items() if n + (prefix in names) >= 3}
        assert not families, f"{package.relative_to(ROOT)}: make a package of {families}"


# What functions/main.py may import of rlpipe: the control plane's entry points and wiring, the
# doors every entry needs (parsing events, logs, the verified caller), and the two services' ticks.
# import-linter sees packages only, and main.py is a module on the function's path: this holds it
# to the same layers (above the control plane, below the local stand-ins and the CLI).
FUNCTION_MAY_IMPORT = (
    "rlpipe.control.stage_http",
    "rlpipe.control.completion_signals",
    "rlpipe.control.services",
    "rlpipe.control.adapters",
    "rlpipe.upstream.service",
    "rlpipe.reconcile.runner",
)


def _rlpipe_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlpipe"):
            found |= {
                f"{node.module}.{a.name}" if node.module == "rlpipe.control" else node.module
                for a in node.names
            }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("rlpipe")}
    return found


def test_the_function_entry_points_import_only_the_control_planes_entries_and_the_services() -> None:
    imported = _rlpipe_imports(ROOT / "functions" / "main.py")
    assert imported, "main.py should call the library"
    outside = sorted(m for m in imported if not m.startswith(FUNCTION_MAY_IMPORT))
    assert not outside, f"functions/main.py imports {outside}: call the control plane's entry points instead"


def test_the_function_layer_rule_bites(tmp_path: Path) -> None:
    planted = tmp_path / "main.py"
    planted.write_text(
        (ROOT / "functions" / "main.py").read_text()
        + "\nfrom rlpipe.control.stage.service import StageService\nfrom rlpipe.local import gcs\n"
    )
    imported = _rlpipe_imports(planted)
    assert {"rlpipe.control.stage.service", "rlpipe.local"} <= {
        m for m in imported if not m.startswith(FUNCTION_MAY_IMPORT)
    }


def _lint_imports(library_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=library_root,
        # The library's copy first; the repository for the contract types in tests/harness.
        env={"PYTHONPATH": f"{library_root}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def library_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shared")
    shutil.copytree(LIBRARY, root / "rlpipe", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is installed by `make install`")
@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        ("core/layout.py", "from rlpipe.local import stack", "The core is pure"),
        ("core/presets.py", "import kubernetes", "The core is pure"),
        ("control/lifecycle/ledger.py", "from rlpipe.local import gcs", "Production code never imports"),
        ("cluster/__init__.py", "from rlpipe.control import ledger", "No import cycles"),
        (
            "cli/watch.py",
            "from rlpipe.control.lifecycle.ledger import RunRecord as Passed",
            "The run record comes from",
        ),
        (
            "reconcile/rules.py",
            "import rlpipe.control.lifecycle.quality_gate as passing; passing.Attempt",
            "The run record comes from",
        ),
    ],
)
def test_a_forbidden_import_breaks_a_contract(
    library_copy: Path, module: str, planted: str, broken: str
) -> None:
    target = library_copy / "rlpipe" / module
    original = target.read_text()
    target.write_text(f"{original}\n{planted}  # planted by the test\n")
    try:
        result = _lint_imports(library_copy)
    finally:
        target.write_text(original)
    assert result.returncode != 0, result.stdout
    report = result.stdout.split("Broken contracts", 1)[-1]
    assert broken in report, result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is installed by `make install`")
def test_the_unchanged_copy_keeps_every_contract(library_copy: Path) -> None:
    result = _lint_imports(library_copy)
    assert result.returncode == 0, result.stdout[-3000:]


def test_the_artifact_events_hot_path_loads_no_request_models() -> None:
    """artifact_event scales out during every checkpoint write; its cold start must not build the
    request's pydantic models (the deployment's allowlists are read only where a request is)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, 'shared'); import rlpipe.control.completion_signals, rlpipe.control.adapters.settings; "
        "print('rlpipe.core.request' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_no_functions_cold_start_loads_the_maxtext_config_reader() -> None:
    """``import main`` is every function's cold start. MaxText's config reader (omegaconf, about 60
    ms here) is needed only where a request's overrides are read, so nothing on the import path of
    main may load it at import time (it did, through core.layout → core.steps: bench section 2)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.path[:0] = ['functions', 'shared']; import main; print('omegaconf' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_no_test_or_bench_takes_a_run_record_name_from_a_module_that_passes_it_on() -> None:
    """The record contract (tests/harness/import_contracts.py) over the code lint-imports does not
    read: every test and benchmark imports the record from rlpipe.core.runs."""
    from tests.harness.import_contracts import passed_on

    library = {
        ".".join(p.relative_to(LIBRARY.parent).with_suffix("").parts).removesuffix(".__init__")
        for p in _modules()
    }
    others = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in others if p.name != "__init__.py"]
    found = [p for name in names for p in passed_on(name, library, "rlpipe.core.runs")]
    assert not found, found


# Test folders that are not a package of the library: what spans the repository (the layout,
# goldens, infra, benchmarks), whole runs of the local stack, the function entry points, the real
# MaxText programs' tier (programs/), the tests that run the real control plane (grouped
# because they share one plane per worker), and the ClusterClient's tests on the API double
# (grouped because they share its fixtures and the RBAC check of every call, cluster/client/).
TESTS = ROOT / "tests"
NOT_A_PACKAGE = {"repo", "e2e", "functions", "programs", "cluster/real_plane", "cluster/client"}
SUPPORT = {"fixtures", "golden", "harness", "schemas"}


def _test_folders() -> set[str]:
    return {str(p.parent.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if not SUPPORT & set(p.parts)}


def test_the_tests_mirror_the_package_tree() -> None:
    # 135 flat files with name-prefix families made "which tests hold this module" a grep.
    assert "." not in _test_folders(), "a test file directly under tests/: put it beside its package"
    packages = {str(p.parent.relative_to(LIBRARY)) for p in LIBRARY.rglob("__init__.py")}
    strays = _test_folders() - packages - NOT_A_PACKAGE
    assert not strays, f"test folders that name no package of shared/rlpipe: {sorted(strays)}"
    assert _test_folders() >= NOT_A_PACKAGE, "NOT_A_PACKAGE names a folder that no longer holds tests"
    basenames = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not {n for n, k in basenames.items() if k > 1}, (
        "two test files share a name (pytest imports them by it)"
    )
