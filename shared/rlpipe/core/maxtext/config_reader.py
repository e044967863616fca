"""One ``key=value`` argument, read as MaxText 0.2.4's config reader reads it.

Why read with the reader's own library: MaxText never sees our text, it sees what OmegaConf's YAML
loader makes of it. A check on the text (``startswith("gs://")``, a list of unsafe characters)
passes ``'gs://…'``, ``" gs://…"`` or ``0xfff…`` that then reach MaxText as another run's path or a
1,600-bit number. So every check on an argument runs on what this module returns, and a text
whose reading differs from what rlpipe means is refused (``core.request.reading``).

What ``maxtext.configs.pyconfig`` does with its argv, at tag ``maxtext-v0.2.4``
(``src/maxtext/configs/pyconfig.py``), and how this module follows it:

* ``omegaconf.OmegaConf.from_cli(cli_args)`` (:439): each argument is a dotlist item, split at the
  first unescaped ``=``; the key's dots make nesting (``rl.num_iterations=2`` is
  ``{"rl": {"num_iterations": 2}}``) and the value is read by OmegaConf's YAML loader (YAML 1.1:
  ``yes`` is true, ``0x1f`` and ``59:59`` are integers, quotes and a leading space go away, ``#``
  starts a comment). Called here as is (omegaconf 2.4.0, what MaxText 0.2.4 resolved to).
* ``OmegaConf.to_container(final_config, resolve=True)`` (:517): interpolations are resolved, so
  ``${oc.env:HF_TOKEN}`` would become a secret and ``${other_key}`` another value. They are
  refused here, never resolved: resolving would read *this* process's environment.
* ``???`` is OmegaConf's "missing" marker, and a merge keeps the value it would replace
  (``OmegaConf.merge``, :446-453 and :514): the argument would be lost. Refused.
* ``_prepare_for_pydantic`` (:254-324), on top-level keys: the string ``none`` in any case becomes
  None (:274-275); four list keys are coerced from a string (:286-287, ``_coerce_to_list``
  :216-236); ``""`` becomes None for seven keys (:290-302). Applied here to the top-level key.
* ``M_<KEY>`` environment variables override keys (:43, :124-125, :519-553): no argument is
  involved; ``core.request.env_allowlist`` refuses every ``M_`` name.

Pure and cached: the same text always reads the same, and requests repeat their presets' values.
"""

from __future__ import annotations

import ast
import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

# pyconfig.py:290-302: an empty value is None for these keys.
EMPTY_IS_NONE = frozenset(
    {
        "hf_train_files",
        "hf_eval_files",
        "hf_access_token",
        "hf_name",
        "hf_data_dir",
        "hf_eval_split",
        "tokenizer_path",
    }
)
# pyconfig.py:286-287: a string for these keys becomes a list.
LIST_KEYS = frozenset({"train_data_columns", "eval_data_columns", "trainable_parameters_mask", "adamw_mask"})


class Unreadable(ValueError):
    """MaxText's reader fails on the argument, or would read something rlpipe cannot check."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


@dataclass(frozen=True)
class Reading:
    """What one argument becomes in MaxText's config: a tree, almost always one key path long."""

    tree: Mapping[str, Any]

    def at(self, path: tuple[str, ...]) -> Any:
        """The value at ``path``; ``KeyError`` when the argument sets something else."""
        node: Any = self.tree
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(".".join(path))
            node = node[part]
        return node


def read(argument: str) -> Reading:
    """``argument`` (``key=value``) as MaxText reads it; ``Unreadable`` when it cannot be, or when
    it holds an interpolation or OmegaConf's missing marker."""
    return Reading(copy.deepcopy(_read(argument)))


def read_value(text: str, key: str = "value") -> Any:
    """The value ``key=text`` gives ``key`` (a top-level key, so pyconfig's ``none`` rule applies)."""
    return read(f"{key}={text}").at((key,))


def key_path(key: str) -> tuple[str, ...]:
    """The path OmegaConf makes of ``key``: its dots nest, a backslash escapes, brackets index."""
    node: Any = _read(f"{key}=0")
    path: tuple[str, ...] = ()
    while isinstance(node, Mapping) and len(node) == 1:  # one key per level: a scalar sets one path
        ((part, node),) = node.items()
        path = (*path, str(part))
    if not path or node != 0:
        raise Unreadable(
            f"OmegaConf reads no single key path from {key[:80]!r}", "write a key such as rl.num_iterations"
        )
    return path


@functools.lru_cache(maxsize=8192)
def _read(argument: str) -> dict[str, Any]:
    try:
        config = OmegaConf.from_cli([argument])
        _refuse_unresolved(config, ())
        tree = OmegaConf.to_container(config, resolve=True)
    except Unreadable:
        raise
    except Exception as exc:  # whatever OmegaConf raises (YAML errors, its own, IndexError on a key
        # such as "[", RecursionError on deep nesting), MaxText's pyconfig raises it too and exits
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Unreadable(
            f"MaxText's config reader (OmegaConf's YAML loader) fails on it: {first[:160]}",
            "write a plain value (a number, true/false, or text MaxText reads as that text)",
        ) from None
    assert isinstance(tree, dict)
    return {str(key): _prepared(str(key), value) for key, value in tree.items()}


def _refuse_unresolved(node: DictConfig | ListConfig, path: tuple[str, ...]) -> None:
    keys: list[Any] = list(node.keys()) if isinstance(node, DictConfig) else list(range(len(node)))
    for key in keys:
        where = ".".join((*path, str(key)))
        if OmegaConf.is_missing(node, key):
            raise Unreadable(
                f"{where}: '???' is OmegaConf's missing-value marker; MaxText would keep its default",
                "give the value itself",
            )
        if OmegaConf.is_interpolation(node, key):
            raise Unreadable(
                f"{where}: MaxText resolves ${{...}} as an interpolation (another key's value, or an "
                "environment variable with oc.env)",
                "give a literal value without ${",
            )
        child = node[key]  # neither missing nor an interpolation: reading it resolves nothing
        if isinstance(child, DictConfig | ListConfig):
            _refuse_unresolved(child, (*path, str(key)))


def _prepared(key: str, value: Any) -> Any:
    """pyconfig's ``_prepare_for_pydantic`` value rules for a top-level key (pyconfig.py:274-302)."""
    if isinstance(value, str) and value.lower() == "none":
        return None
    if key in LIST_KEYS:
        return _coerce_to_list(value)
    if key in EMPTY_IS_NONE and value == "":
        return None
    return value


def _coerce_to_list(value: Any) -> Any:
    """pyconfig.py:216-236, as written there."""
    if isinstance(value, str):
        cleaned = value.strip()
        if (cleaned.startswith("[") and cleaned.endswith("]")) or (
            cleaned.startswith("(") and cleaned.endswith(")")
        ):
            try:
                parsed = ast.literal_eval(cleaned)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return [value]
            return list(parsed) if isinstance(parsed, list | tuple) else [str(parsed)]
        return [value]
    if isinstance(value, tuple):
        return list(value)
    return value
