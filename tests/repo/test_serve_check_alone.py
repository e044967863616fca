"""torch and transformers are the serving tier's (programs/requirements-serving.lock), so deptry is
told to let them be imported without being in requirements.txt. That exemption holds only because
exactly one module imports them, the serve check, which runs from its source in the serving
workload and imports nothing of rlpipe: no function ever loads it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

SERVING_ONLY = {"torch", "transformers"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_serve_check_imports_the_serving_tiers_libraries_and_it_imports_no_rlpipe() -> None:
    importers = sorted(
        str(p.relative_to(ROOT))
        for base in ("shared", "functions")
        for p in (ROOT / base).rglob("*.py")
        if _imports(p) & SERVING_ONLY
    )
    assert importers == ["shared/rlpipe/publisher/serve_check.py"]
    assert "rlpipe" not in _imports(ROOT / importers[0])
