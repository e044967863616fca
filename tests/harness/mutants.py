"""A module loaded from a mutated copy of its source, to show a check bites.

Why a copy and not a monkeypatch: the mutation is the mistake someone could commit (one spelled
change to the real file), and the check is run against that file's behaviour as a whole. The copy
lives in the test's tmp_path and is loaded under its own name, so the real module is untouched
for every other test.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType


@contextmanager
def mutant(module: ModuleType, original: str, mistake: str, tmp_path: Path) -> Iterator[ModuleType]:
    """``module`` as it would be with its one ``original`` text replaced by ``mistake``."""
    source_file = Path(str(module.__file__))
    text = source_file.read_text()
    assert text.count(original) == 1, f"{source_file.name} changed: update the mutation {original!r}"
    copy = tmp_path / f"mutant_{source_file.name}"
    copy.write_text(text.replace(original, mistake))
    name = f"{module.__name__}__mutant"
    spec = importlib.util.spec_from_file_location(name, copy)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # pydantic resolves a model's annotations through its module
    try:
        spec.loader.exec_module(loaded)
        yield loaded
    finally:
        sys.modules.pop(name, None)
