"""MaxText's reading of single ``key=value`` arguments: what ``pyconfig`` hands to pydantic.

Runs in the programs venv (MaxText 0.2.4), never imports rlpipe. Reads ``{module, items}`` as JSON
on stdin; for each item, calls the real ``pyconfig.initialize([<the program's file>, item],
config_class=...)`` as the program would, and catches the values at the one point where MaxText's
own reading is done and pydantic's typing has not started: the return of
``pyconfig._prepare_for_pydantic`` (pyconfig.py:254-330 at maxtext-v0.2.4, called at :556), which
holds every key after OmegaConf's parsing, the merge with rl.yml, interpolation (``resolve=True``,
:517) and pyconfig's own ``none``/empty/list rules. The run stops there (nothing is validated, no
device is touched), so each item costs the config load only.

Each value is written with its Python type at every level (``{"t": "int", "v": 3}``), because
``True`` and ``1`` or ``"2"`` and ``2`` must not compare equal. The result for an item is the
value at the key path the item sets (``path``, from OmegaConf's own reading of the key), or the
error pyconfig raised, or ``absent`` when the path is not in what pyconfig built.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CONFIG_CLASS = {
    "maxtext.trainers.post_train.rl.train_rl": "RLConfig",
    "maxtext.checkpoint_conversion.to_maxtext": "MaxTextConfig",
    "maxtext.checkpoint_conversion.to_huggingface": "MaxTextConfig",
}
ERROR_CHARS = 300


class _Read(Exception):
    """Raised from inside pyconfig once its reading is done: carries what it handed on."""

    def __init__(self, prepared: dict[str, Any]) -> None:
        super().__init__("read")
        self.prepared = prepared


def typed(value: Any) -> Any:
    """A value with its type at every level."""
    if isinstance(value, dict):
        return {"t": "dict", "v": {str(k): typed(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"t": "list", "v": [typed(v) for v in value]}
    if value is None:
        return {"t": "none", "v": None}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    if isinstance(value, int):
        return {"t": "int", "v": str(value)}  # as text: JSON would round a 100-digit number
    if isinstance(value, float):
        return {"t": "float", "v": repr(value)}  # repr keeps nan and inf
    if isinstance(value, str):
        return {"t": "str", "v": value}
    return {"t": type(value).__name__, "v": str(value)}


def main() -> None:
    job = json.load(sys.stdin)
    logging.disable(logging.WARNING)
    from maxtext.configs import pyconfig, types
    from omegaconf import OmegaConf

    module = job["module"]
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    config_class = getattr(types, CONFIG_CLASS[module])
    real_prepare = pyconfig._prepare_for_pydantic

    def stop_after_reading(raw_keys: dict[str, Any], config_class: Any = None) -> dict[str, Any]:
        raise _Read(real_prepare(raw_keys, config_class=config_class))

    pyconfig._prepare_for_pydantic = stop_after_reading
    results = []
    for item in job["items"]:
        entry: dict[str, Any] = {"item": item}
        try:
            tree = OmegaConf.to_container(OmegaConf.from_cli([item]), resolve=False)
            path: list[str] = []
            node: Any = tree
            while isinstance(node, dict) and len(node) == 1:
                ((key, node),) = node.items()
                path.append(str(key))
            entry["path"] = path
        except Exception as exc:  # OmegaConf cannot read it: pyconfig would fail the same way
            entry["path"] = None
            entry["key_error"] = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        try:
            pyconfig.initialize([spec.origin, item], config_class=config_class)
            entry["error"] = "pyconfig returned without reaching _prepare_for_pydantic"
        except _Read as read:
            node = read.prepared
            for part in entry["path"] or []:
                if not isinstance(node, dict) or part not in node:
                    entry["absent"] = True
                    break
                node = node[part]
            else:
                entry["value"] = typed(node)
        except (Exception, SystemExit) as exc:
            cause = exc.__context__ if isinstance(exc, SystemExit) and exc.__context__ else exc
            entry["error"] = f"{type(cause).__name__}: {cause}"[:ERROR_CHARS]
        results.append(entry)
    json.dump({"reader": results}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
