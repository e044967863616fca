"""An import-linter contract the built-in types cannot state: a run record's names are taken from
the core, never from a module that passes them on.

Why: the record (``rlpipe.core.runs``) is used by every layer, and the easy way back to the old
shape is a module above the core that imports ``RunRecord`` for its own use and is then imported
*for* it (``from rlpipe.control.lifecycle.ledger import RunRecord``). Module-level contracts cannot see that:
``control.lifecycle.ledger`` importing the core is right, and ``cli.watch`` importing ``control.lifecycle.ledger`` is
right too (for ``Ledger``). This contract reads the import statements: a module outside the core
that takes a name, directly or as an attribute of a module it imported, from a module which itself
got that name from the record package, breaks it.

Registered in ``pyproject.toml`` (``contract_types``); ``tests/repo/test_architecture.py`` shows it bites.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import grimp
from importlinter import Contract, ContractCheck, fields, output


@dataclass(frozen=True)
class Passed:
    """``importer`` took ``name`` from ``passer``, which had it from the record package."""

    importer: str
    line: int
    passer: str
    name: str


@cache
def _package_dir(top: str) -> Path | None:
    """Where the top-level package ``top`` lives. Only ``top`` is located through the import
    system: finding a submodule's spec would import (run) every package above it."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class _Statements:
    """What the contract reads of one module, gathered in a single walk of its syntax tree."""

    is_package: bool
    imports: tuple[ast.Import | ast.ImportFrom, ...]
    attributes: tuple[tuple[int, str, str], ...]  # (line, a bare name, the attribute taken from it)


@cache
def _statements(module: str) -> _Statements | None:
    top, *rest = module.split(".")
    root = _package_dir(top)
    if root is None:
        return None
    base = root.joinpath(*rest)
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            break
    else:
        return None
    imports: list[ast.Import | ast.ImportFrom] = []
    attributes: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(node)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attributes.append((node.lineno, node.value.id, node.attr))
    return _Statements(path.name == "__init__.py", tuple(imports), tuple(attributes))


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The module an ``ImportFrom`` names, relative imports resolved against ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


@cache
def _from_record(module: str, record_package: str) -> frozenset[str]:
    """The names ``module`` imports from the record package (what it could pass on)."""
    found = _statements(module)
    if found is None:
        return frozenset()
    names: set[str] = set()
    for node in found.imports:
        if isinstance(node, ast.ImportFrom):
            origin = _absolute(module, node, found.is_package)
            if origin == record_package or origin.startswith(record_package + "."):
                names.update(alias.asname or alias.name for alias in node.names)
    return frozenset(names)


def passed_on(importer: str, modules: set[str], record_package: str) -> list[Passed]:
    """Each record name ``importer`` takes from a module (one of ``modules``) that passes it on."""
    found = _statements(importer)
    if found is None:
        return []
    aliases: dict[str, str] = {}  # a local name → the module it is
    taken: list[tuple[int, str, str]] = []  # (line, from module, name)
    for node in found.imports:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else ""
        else:
            origin = _absolute(importer, node, found.is_package)
            for alias in node.names:
                if f"{origin}.{alias.name}" in modules:  # a module: its attributes are checked below
                    aliases[alias.asname or alias.name] = f"{origin}.{alias.name}"
                elif origin in modules:
                    taken.append((node.lineno, origin, alias.name))
    taken += [(line, aliases[name], attr) for line, name, attr in found.attributes if aliases.get(name)]
    return [
        Passed(importer, line, origin, name)
        for line, origin, name in sorted(set(taken))
        if not (origin == record_package or origin.startswith(record_package + "."))
        and name in _from_record(origin, record_package)
    ]


class RecordFromCoreContract(Contract):
    """Modules outside ``core_package`` take the names of ``record_package`` from it alone.

    Options:
        - record_package: the package whose names must come from itself (``rlpipe.core.runs``).
        - core_package: the package inside which mypy's ``no_implicit_reexport`` already holds.
    """

    type_name = "record_from_core"

    record_package = fields.ModuleField()
    core_package = fields.ModuleField()

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        record = self.record_package.name  # type: ignore[attr-defined]
        core = self.core_package.name  # type: ignore[attr-defined]
        modules = set(graph.modules)
        top = record.split(".")[0]
        importers = sorted(
            m
            for m in modules
            if (m == top or m.startswith(top + ".")) and m != core and not m.startswith(core + ".")
        )
        found = [p for m in importers for p in passed_on(m, modules, record)]
        return ContractCheck(kept=not found, metadata={"passed": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for p in check.metadata["passed"]:
            output.print_error(
                f"{p.importer}:{p.line} takes {p.name} from {p.passer}; import it from "
                f"{self.record_package.name} instead",  # type: ignore[attr-defined]
                bold=False,
            )
            output.new_line()
