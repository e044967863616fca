"""Stand-ins for ``vllm`` and ``tpu_inference``, so train_rl's module can be imported on CPU.

train_rl imports MaxText's vLLM adapter at module level (``train_rl.py:67``), which imports
``vllm`` and ``tpu_inference`` (neither is installable here: tpu-inference pins a qwix Tunix
0.1.7 refuses, and vLLM's TPU build needs a TPU), and registers the adapter at import
(``train_rl.py:69``). The tier calls only train_rl's data and reward functions, which use
neither, so any module under those two names is an empty stand-in: every attribute is a class
that can be subclassed, called and asked for further attributes, and does nothing.

Imported by the train_data driver only, before train_rl; never by rlpipe.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

STUBBED = ("vllm", "tpu_inference")


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stub_class(name)


def stub_class(name: str) -> type:
    return _StubMeta(
        name,
        (),
        {
            "__init__": lambda self, *a, **k: None,
            "__call__": lambda self, *a, **k: None,
            "__getattr__": lambda self, n: stub_class(n),
        },
    )


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = stub_class(name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    """Stand in for the two packages; refuses to when either is really installed."""
    for name in STUBBED:
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            raise SystemExit(f"stubs: {name} is installed; the data driver stubs it only where it is not")
    sys.meta_path.insert(0, _Finder())
