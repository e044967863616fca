"""MaxText's own config reader as the judge of an argv: what ``pyconfig`` makes of every key.

Runs in the programs venv (Python >= 3.12, MaxText 0.2.4 from ``programs/requirements-maxtext.lock``),
never imports rlpipe. Reads a JSON job on stdin and writes a JSON result on stdout:

* ``cases``: ``[{name, module, args, env}]``, one stage's container args each. The program's own
  ``--flags`` are checked against the flags its file defines (argparse's ``add_argument`` for
  ``to_maxtext``, absl's ``DEFINE_*`` for ``to_huggingface``: read from the installed file, so
  a flag the program does not know is reported); the rest goes through
  ``pyconfig.initialize([<the program's file>, *keys], config_class=...)`` exactly as the
  program calls it, so train reads ``configs/post_train/rl.yml`` and the converters ``base.yml``.
  Every key is then read back from the config MaxText built: its value and Python type.
* ``corpus``: ``{module, base, items}``: each ``key=value`` string of ``items`` is read alone
  after ``base`` (a minimal accepted argv), and the result says what MaxText made of it (value
  and type) or the error it raised.
* ``nested``: the installed package's nested key set: every field of every nested config model
  of the config classes (``rl.*`` and the others), for the committed fixture's drift test.

A refusal is a result, never a failure of this script: the tests decide what it means.
"""

from __future__ import annotations

import ast
import enum
import importlib.util
import inspect
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy

# The converters set these before MaxText is imported; pyconfig touches JAX, so set them here too.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ERROR_CHARS = 400  # pyconfig's unknown-key error lists every key; the start says which and why

# Which config model each program's argv builds (train_rl.py passes RLConfig; the converters the default).
CONFIG_CLASS = {
    "maxtext.trainers.post_train.rl.train_rl": "RLConfig",
    "maxtext.checkpoint_conversion.to_maxtext": "MaxTextConfig",
    "maxtext.checkpoint_conversion.to_huggingface": "MaxTextConfig",
}


def program_file(module: str) -> str:
    """argv[0] as ``python -m module`` sets it: the module's file (found without importing it)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SystemExit(f"read_config: {module} is not installed in this interpreter")
    return spec.origin


def defined_flags(path: str) -> set[str]:
    """The command-line flags a program file defines itself (argparse or absl), by name."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
            continue
        func = node.func
        attr = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if attr == "add_argument" and first.value.startswith("--"):
            names.add(first.value[2:])
        elif attr.startswith("DEFINE_"):
            names.add(first.value)
    return names


def jsonable(value: Any) -> Any:
    """A config value as JSON: dtypes and enums by name, models and tuples as their contents."""
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # numpy/jax dtypes: "bfloat16"


def type_name(value: Any) -> str:
    if hasattr(value, "model_dump"):
        return "model"
    if isinstance(value, enum.Enum):
        return "enum"
    if isinstance(value, numpy.dtype):
        return "dtype"
    return type(value).__name__


def read_back(config: Any, key: str) -> dict[str, Any]:
    """The value MaxText's config holds under ``key`` (``a.b`` descends into a nested model)."""
    node: Any = config
    for part in key.split("."):
        if isinstance(node, dict):
            if part not in node:
                return {"missing": True}
            node = node[part]
        elif hasattr(node, part):
            node = getattr(node, part)
        else:
            return {"missing": True}
    return {"value": jsonable(node), "type": type_name(node)}


def error_of(exc: BaseException) -> str:
    """pyconfig turns a config error into ``sys.exit(2)`` outside pytest: the cause is its context."""
    if isinstance(exc, SystemExit) and exc.__context__ is not None:
        exc = exc.__context__
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + " ..."


class Reader:
    def __init__(self) -> None:
        started = time.monotonic()
        from maxtext.configs import pyconfig, types

        self.pyconfig, self.types = pyconfig, types
        self.import_seconds = round(time.monotonic() - started, 2)

    def initialize(self, module: str, keys: list[str], env: dict[str, str]) -> Any:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            config_class = getattr(self.types, CONFIG_CLASS[module])
            return self.pyconfig.initialize([program_file(module), *keys], config_class=config_class)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def case(self, case: dict[str, Any]) -> dict[str, Any]:
        module, args = case["module"], case["args"]
        flags = [a for a in args if a.startswith("--")]
        keys = [a for a in args if not a.startswith("--")]
        known = defined_flags(program_file(module))
        out: dict[str, Any] = {
            "name": case["name"],
            "flags": {f: f[2:].split("=", 1)[0] in known for f in flags},
        }
        started = time.monotonic()
        try:
            config = self.initialize(module, keys, case.get("env") or {})
        except (Exception, SystemExit) as exc:
            out.update(accepted=False, error=error_of(exc))
        else:
            out.update(accepted=True, error=None)
            out["values"] = {k.split("=", 1)[0]: read_back(config, k.split("=", 1)[0]) for k in keys}
        out["seconds"] = round(time.monotonic() - started, 2)
        return out

    def corpus(self, corpus: dict[str, Any]) -> list[dict[str, Any]]:
        results = []
        for item in corpus["items"]:
            key = item.split("=", 1)[0]
            entry: dict[str, Any] = {"item": item, "key": key}
            try:
                config = self.initialize(corpus["module"], [*corpus["base"], item], {})
            except (Exception, SystemExit) as exc:
                entry["error"] = error_of(exc)
            else:
                entry.update(read_back(config, key))
            results.append(entry)
        return results

    def nested(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Every nested section of each config class: its model's name, field names and where both
        are defined in ``configs/types.py`` (line numbers). The sections are the fields whose type
        is itself a config model (``rl``, ``dataset``, ...)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for cls_name in sorted(set(CONFIG_CLASS.values())):
            config_class = getattr(self.types, cls_name)
            body, first = inspect.getsourcelines(config_class)
            sections = out.setdefault(cls_name, {})
            for name, field in config_class.model_fields.items():
                model = field.annotation
                if not hasattr(model, "model_fields"):
                    continue
                declared = [first + i for i, line in enumerate(body) if line.strip().startswith(f"{name}:")]
                sections[name] = {
                    "model": model.__name__,
                    "model_line": inspect.getsourcelines(model)[1],
                    "field_line": declared[0] if declared else None,
                    "keys": sorted(model.model_fields),
                }
        return out


def main() -> None:
    job = json.load(sys.stdin)
    logging.disable(logging.WARNING)  # pyconfig logs every key at INFO; the result holds what matters
    reader = Reader()
    result: dict[str, Any] = {"import_seconds": reader.import_seconds}
    result["cases"] = [reader.case(c) for c in job.get("cases", [])]
    if job.get("corpus"):
        result["corpus"] = reader.corpus(job["corpus"])
    if job.get("nested"):
        result["nested"] = reader.nested()
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
