"""The functions' source archive (``infra/bundle.sh``) holds production and only production.

What Terraform uploads is what every Cloud Function loads on a cold start: it must hold the entry
points and the library they import, run from that alone, and hold nothing the functions never
run (the local stand-ins, the CLI, the modules only the tests and the local stack use). Each
expectation here comes from a source other than the script itself:

- which library modules are production: the paths ``[tool.deptry] extend_exclude`` in
  pyproject.toml leaves out of the check of ``requirements.txt`` are not, every other module is;
- which entry points must exist: the ``entry_point`` of every function in ``infra/terraform/``;
- which data files production reads: the package data (pyproject.toml) that a shipped file names;
- that the tree runs alone: every module imported in a fresh interpreter that sees the unzipped
  archive and the virtualenv's site-packages, never the repository.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from tests.harness.patience import ceiling

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "shared" / "rlpipe"
SCRIPT = ROOT / "infra" / "bundle.sh"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CACHE_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
BYTECODE_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Built:
    first: Path  # the archive
    second: Path  # the same sources built again, in another time zone and umask
    tree: Path  # the first archive, unzipped
    names: tuple[str, ...]  # the first archive's entry names, in archive order


def _build(out: Path, env: dict[str, str], umask: str = "022") -> None:
    _build_in(ROOT, out, env, umask)


def _build_in(checkout: Path, out: Path, env: dict[str, str], umask: str = "022") -> None:
    """Run ``infra/bundle.sh`` of ``checkout`` (which builds from the checkout it lives in)."""
    script = checkout / "infra" / "bundle.sh"
    proc = subprocess.run(
        ["bash", "-c", f'umask {umask} && exec bash "$0" "$1"', str(script), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=ceiling(10),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    where = tmp_path_factory.mktemp("bundle")
    env = {**os.environ, "PYTHON": sys.executable}
    first, second = where / "first.zip", where / "second.zip"
    _build(first, env)
    # What could leak into the bytes otherwise: the local time zone (zip times are local) and the
    # umask (file modes).
    _build(second, {**env, "TZ": "Pacific/Kiritimati"}, umask="077")
    tree = where / "tree"
    with zipfile.ZipFile(first) as zf:
        names = tuple(zf.namelist())
        zf.extractall(tree)
    return Built(first, second, tree, names)


def _library_names(built: Built) -> set[str]:
    return {n[len("rlpipe/") :] for n in built.names if n.startswith("rlpipe/")}


def _repo_files(under: Path) -> Iterator[str]:
    """Every source file under ``under`` (relative, POSIX), caches and bytecode left out."""
    for path in under.rglob("*"):
        rel = path.relative_to(under)
        hidden = any(part.startswith(".") or part.endswith(".egg-info") for part in rel.parts)
        cached = bool(CACHE_PARTS & set(rel.parts)) or path.name.endswith(BYTECODE_SUFFIXES)
        if path.is_file() and not hidden and not cached:
            yield rel.as_posix()


def _not_production() -> list[str]:
    """The library paths (relative to shared/rlpipe/) deptry does not hold to requirements.txt."""
    prefix = "shared/rlpipe/"
    excluded = PYPROJECT["tool"]["deptry"]["extend_exclude"]
    found = [e[len(prefix) :].rstrip("/") for e in excluded if e.startswith(prefix)]
    assert found, "pyproject.toml's [tool.deptry] extend_exclude names no library path"
    return found


def _is_under(rel: str, path: str) -> bool:
    return rel == path or rel.startswith(path + "/")


def _terraform_entry_points() -> set[str]:
    found: set[str] = set()
    for tf in sorted((ROOT / "infra" / "terraform").glob("*.tf")):
        found.update(re.findall(r'^\s*entry_point\s*=\s*"([A-Za-z_][A-Za-z0-9_]*)"', tf.read_text(), re.M))
    assert found, "no function in infra/terraform/ names an entry_point"
    return found


# ------------------------------------------------------------------------------ the bytes


def test_two_builds_of_the_same_sources_are_the_same_bytes(built: Built) -> None:
    assert built.first.read_bytes() == built.second.read_bytes()
    with zipfile.ZipFile(built.first) as zf:
        infos = zf.infolist()
    assert list(built.names) == sorted(built.names), "entries are in name order"
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert not [i.filename for i in infos if i.is_dir()], "no directory entries"


# ------------------------------------------------------------------------------ what it holds


def test_the_root_holds_the_entry_points_and_the_repositorys_requirements(built: Built) -> None:
    root_files = {n for n in built.names if "/" not in n}
    functions = set(_repo_files(ROOT / "functions"))
    assert "main.py" in functions
    assert root_files == functions | {"requirements.txt"}
    for name in functions:
        assert (built.tree / name).read_bytes() == (ROOT / "functions" / name).read_bytes()
    assert (built.tree / "requirements.txt").read_bytes() == (ROOT / "requirements.txt").read_bytes()
    assert {n.split("/")[0] for n in built.names if "/" in n} == {"rlpipe"}


def test_no_stand_in_cli_cache_or_bytecode_is_shipped(built: Built) -> None:
    library = _library_names(built)
    assert "__init__.py" in library
    assert not [n for n in library if _is_under(n, "local") or _is_under(n, "cli")]
    assert not [n for n in built.names if CACHE_PARTS & set(PurePosixPath(n).parts)]
    assert not [n for n in built.names if n.endswith(BYTECODE_SUFFIXES) or n.endswith(".so")]
    assert not [n for n in built.names if any(p.startswith(".") for p in PurePosixPath(n).parts)]


def test_caches_and_bytecode_in_the_checkout_never_ship(tmp_path: Path) -> None:
    """The checkout a deploy builds from has run tests and tools: their leftovers stay out. Built
    from a copy of the checkout's inputs with such leftovers planted in it."""
    checkout = tmp_path / "checkout"
    (checkout / "infra").mkdir(parents=True)
    shutil.copy2(SCRIPT, checkout / "infra" / "bundle.sh")
    shutil.copy2(ROOT / "requirements.txt", checkout / "requirements.txt")
    shutil.copytree(ROOT / "functions", checkout / "functions", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(LIBRARY, checkout / "shared" / "rlpipe", ignore=shutil.ignore_patterns("__pycache__"))
    planted = [
        "functions/__pycache__/main.cpython-311.pyc",
        "shared/rlpipe/core/__pycache__/layout.cpython-311.pyc",
        "shared/rlpipe/control/stale.pyc",
        "shared/rlpipe/control/.mypy_cache/3.11/x.json",
        "shared/rlpipe/report/.ruff_cache/x",
        "shared/rlpipe/upstream/.pytest_cache/v/x",
        "shared/rlpipe/cluster/.swp.py",
    ]
    for rel in planted:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_bytes(b"leftover")
    out = tmp_path / "out.zip"
    _build_in(checkout, out, {**os.environ, "PYTHON": sys.executable})
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
    assert "rlpipe/core/layout.py" in names
    leftovers = [n for n in names if "cache" in n or n.endswith(BYTECODE_SUFFIXES) or "/." in n]
    assert leftovers == []


def test_the_python_shipped_is_exactly_what_deptry_holds_to_requirements_txt(built: Built) -> None:
    """Every library module deptry checks against requirements.txt ships, and no other: a module
    left out would fail in production, one more would ship code whose imports nobody checked."""
    not_production = _not_production()
    expected = {
        rel
        for rel in _repo_files(LIBRARY)
        if rel.endswith(".py") and not any(_is_under(rel, path) for path in not_production)
    }
    shipped = {n for n in _library_names(built) if n.endswith(".py")}
    assert sorted(shipped - expected) == [], "shipped, but deptry does not check it against requirements.txt"
    assert sorted(expected - shipped) == [], "production modules missing from the archive"


def _package_data() -> set[str]:
    """The library's data files, as pyproject.toml's package-data declares them (relative paths)."""
    found: set[str] = set()
    files = [f for f in _repo_files(LIBRARY) if not f.endswith(".py")]
    for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        base = package.removeprefix("rlpipe").lstrip(".").replace(".", "/")
        for pattern in patterns:
            full = f"{base}/{pattern}" if base else pattern
            found.update(f for f in files if fnmatch.fnmatchcase(f, full))
    assert found, "pyproject.toml declares no package data"
    return found


def test_the_data_files_shipped_are_those_shipped_code_reads(built: Built) -> None:
    """A data file ships when a shipped file names it (a template, a price list, the MaxText key
    list), and only then: the JobSet schema, which only the local API double's validator reads,
    stays out with that validator."""
    library = _library_names(built)
    texts = {n: (built.tree / n).read_text(encoding="utf-8") for n in built.names}

    def named_by_another_shipped_file(rel: str) -> bool:
        return any(PurePosixPath(rel).name in text for n, text in texts.items() if n != f"rlpipe/{rel}")

    named = {f for f in _package_data() if named_by_another_shipped_file(f)}
    shipped_data = {n for n in library if not n.endswith(".py")}
    assert sorted(named - shipped_data) == [], "data a shipped file reads is missing"
    assert sorted(shipped_data - named) == [], "data no shipped file reads"


def _imported_rlpipe_modules(source: str) -> Iterator[tuple[int, str, str | None]]:
    """(line, module, name) for every import of rlpipe at any depth: module level, inside a
    function or under ``if TYPE_CHECKING`` alike. ``name`` is what ``from module import name``
    takes (None for ``import module``). Relative imports are not used in the library."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "rlpipe":
                    yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import at line {node.lineno}"
            if node.module and node.module.split(".")[0] == "rlpipe":
                for alias in node.names:
                    yield node.lineno, node.module, alias.name


def test_no_shipped_module_imports_anything_the_archive_lacks(built: Built) -> None:
    """Also the imports no cold start runs (inside a function, behind TYPE_CHECKING): a lazy
    ``from rlpipe.local import …`` in production would fail only when that path is taken."""
    shipped = {n.removesuffix(".py").removesuffix("/__init__") for n in built.names if n.endswith(".py")}
    in_repo = {
        f"rlpipe/{rel}".removesuffix(".py").removesuffix("/__init__")
        for rel in _repo_files(LIBRARY)
        if rel.endswith(".py")
    }
    missing: list[str] = []
    for name in built.names:
        if not name.endswith(".py"):
            continue
        source = (built.tree / name).read_text(encoding="utf-8")
        for line, module, imported in _imported_rlpipe_modules(source):
            path = module.replace(".", "/")
            if path not in shipped:
                missing.append(f"{name}:{line} imports {module}")
            elif imported is not None and f"{path}/{imported}" in in_repo - shipped:
                missing.append(f"{name}:{line} imports {module}.{imported}")
    assert missing == []


# ------------------------------------------------------------------------------ it runs alone

_RUN_ALONE = """
import importlib, json, pathlib, sys
tree, site_packages, repository, venv = (pathlib.Path(p) for p in sys.argv[1:5])
sys.path[:] = [str(tree), str(site_packages)] + [p for p in sys.path if "site-packages" not in p]
modules = sorted(
    ".".join(p.relative_to(tree).with_suffix("").parts).removesuffix(".__init__")
    for p in (tree / "rlpipe").rglob("*.py")
)
import main
for module in modules:
    importlib.import_module(module)
import rlpipe
def from_repository(file):
    path = pathlib.Path(file).resolve()
    return path.is_relative_to(repository) and not path.is_relative_to(venv)
print(json.dumps({
    "rlpipe": str(pathlib.Path(rlpipe.__file__).resolve()),
    "main": str(pathlib.Path(main.__file__).resolve()),
    "modules": len(modules),
    "from_repository": sorted(
        name for name, m in list(sys.modules.items()) if from_repository(getattr(m, "__file__", None) or "/")
    ),
    "path_in_repository": [p for p in sys.path if from_repository(p)],
    "callables": sorted(n for n in dir(main) if callable(getattr(main, n))),
}))
"""


def test_every_module_and_entry_point_loads_from_the_archive_alone(built: Built) -> None:
    """A fresh interpreter (``-I``: no user site, no environment, no script directory; ``-S``: no
    site-packages and none of their .pth files, the editable install's pointer to this checkout
    among them) is given the unzipped archive and the virtualenv's site-packages, and nothing else."""
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    venv = Path(sys.prefix).resolve()
    isolated = [sys.executable, "-I", "-S", "-B", "-c", _RUN_ALONE]
    proc = subprocess.run(
        [*isolated, *map(str, (built.tree, site_packages, ROOT, venv))],
        cwd=built.tree.parent,
        capture_output=True,
        text=True,
        timeout=ceiling(15),
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    tree = built.tree.resolve()
    assert Path(seen["rlpipe"]).is_relative_to(tree), seen["rlpipe"]
    assert Path(seen["main"]) == tree / "main.py"
    assert seen["modules"] == len([n for n in built.names if n.startswith("rlpipe/") and n.endswith(".py")])
    assert seen["from_repository"] == []
    assert seen["path_in_repository"] == []
    missing = sorted(_terraform_entry_points() - set(seen["callables"]))
    assert missing == [], "entry points Terraform deploys that main.py does not define"
