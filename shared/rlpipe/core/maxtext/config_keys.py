"""Which config keys MaxText 0.2.4 defines, and what it does with a key path it does not.

Why a committed list: MaxText refuses an unknown *top-level* key when the run starts (pyconfig.py
:239-271, ``ValueError``), after conversion has already run, and silently ignores an unknown
*nested* one (``rl.bogus_key=1``: the nested pydantic models keep their default ``extra``, which
drops it). A typo'd ``rl.num_iteratons`` would train with the default and nobody would know. So a
key path is resolved here against the fields MaxText's pydantic models define, and a key MaxText
would refuse or drop is refused at validation with a "did you mean".

The names live in ``config_keys.json`` (package data): every model class of
``src/maxtext/configs/types.py`` at ``maxtext-v0.2.4``, with its line range, bases, field names,
nested sections, free-form map fields (``dict[...]``) and whether it forbids unknown keys, written
by ``tests/fixtures/maxtext_keys_from_source.py``. Which class reads which program's keys:
``train_rl`` validates with ``RLConfig`` (train_rl.py:486, 696); the vLLM rollout's
``maxtext_config`` is passed as keyword arguments to ``pyconfig.initialize`` with the default
``MaxTextConfig`` (integration/vllm/maxtext_vllm_adapter/adapter.py:82-83, 160).

How pyconfig decides (pyconfig.py:239-271 ``_check_for_invalid_keys``): a top-level key is known
when it is a field of the config class or of one of its nested models. ``RLConfig`` then routes
a flat key into the nested section that has a field of that name (types.py
``map_flat_fields_to_nested_models``); ``MaxTextConfig`` forbids extra keys, so for it only its
own fields pass.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Resolved:
    """A key path MaxText reads: the field it sets (``field``), inside ``section`` when nested."""

    field: str
    section: str | None = None
    # The nested field a flat key of the program's config files is copied over: MaxText drops
    # this spelling's value (``ConfigKeys.flat_from_configs``).
    overwritten: bool = False


@dataclass(frozen=True)
class Unknown:
    """A key path MaxText refuses (top level) or silently drops (nested): why, and the closest name."""

    problem: str
    suggestion: str | None


@dataclass(frozen=True)
class ConfigKeys:
    """The keys one program's config class reads."""

    program: str
    config_class: str
    top: frozenset[str]
    sections: dict[str, frozenset[str]]  # nested section -> its fields
    maps: frozenset[str]  # fields whose value is a free-form map (any key below them)
    source: str  # e.g. "types.py:4419-4718 (RLConfig)"
    # Flat keys the program's own config files set (base.yml, post_train/rl.yml): RLConfig copies a
    # flat key over its nested section's field of the same name (types.py:4571-4585), so a nested
    # spelling of one of these is dropped. Empty for a class that routes nothing.
    flat_from_configs: frozenset[str] = frozenset()
    routes_flat_keys: bool = False

    def resolve(self, path: tuple[str, ...]) -> Resolved | Unknown:
        """What MaxText makes of the key path ``path`` (as ``config_reader.key_path`` reads it)."""
        head, rest = path[0], path[1:]
        if not rest:
            if head in self.sections:
                return Unknown(
                    f"{head} is a section: a value for it replaces the whole section, the pipeline's "
                    f"own {head}.* values included",
                    f"{head}.<field>",
                )
            if head in self.top:
                return Resolved(head)
            return Unknown(
                f"{self.program} refuses a key {self.config_class} does not define and stops at "
                f"start ({self.source})",
                _closest(head, self.top),
            )
        if head in self.maps:
            return Resolved(head)
        if head in self.sections:
            fields = self.sections[head]
            leaf = rest[0]
            if leaf not in fields:
                return Unknown(
                    f"section {head} has no field {leaf}, and MaxText drops it silently, keeping the "
                    f"default ({self.source})",
                    _closest(leaf, fields, prefix=f"{head}."),
                )
            if len(rest) > 1 and leaf not in self.maps:
                return Unknown(f"{head}.{leaf} is a single value, not a section", None)
            overwritten = self.routes_flat_keys and leaf in self.flat_from_configs
            return Resolved(leaf, head, overwritten=overwritten)
        if head in self.top:
            return Unknown(f"{head} is a single value, not a section with keys below it", None)
        return Unknown(
            f"{head} is not a section of {self.config_class}; {self.program} stops at start ({self.source})",
            _closest(head, set(self.sections)) or _closest(head, self.top),
        )


def _closest(word: str, options: frozenset[str] | set[str], prefix: str = "") -> str | None:
    """The nearest name, case folded (``Load_Parameters_Path`` is ``load_parameters_path``)."""
    folded = {o.lower(): o for o in options}
    matches = difflib.get_close_matches(word.lower(), list(folded), n=1, cutoff=0.75)
    return prefix + folded[matches[0]] if matches else None


@cache
def _document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("rlpipe.core.maxtext").joinpath("config_keys.json").read_text()
    )
    return data


def _fields(models: dict[str, Any], name: str) -> set[str]:
    model = models[name]
    found = set(model["fields"])
    for base in model["bases"]:
        found |= _fields(models, base)
    return found


def _collect(models: dict[str, Any], name: str, key: str) -> dict[str, Any]:
    model = models[name]
    found: dict[str, Any] = {}
    for base in model["bases"]:
        found.update(_collect(models, base, key))
    value = model[key]
    found.update(value if isinstance(value, dict) else dict.fromkeys(value))
    return found


@cache
def for_program(program: str) -> ConfigKeys:
    """The keys of ``train_rl`` or of ``vllm_maxtext_config`` (the rollout's MaxText config)."""
    doc = _document()
    models = doc["models"]
    name = doc["programs"][program]
    sections = {
        field: frozenset(_fields(models, model))
        for field, model in _collect(models, name, "sections").items()
    }
    top = set(_fields(models, name))
    if not models[name]["forbids_unknown_keys"]:  # a nested field passes pyconfig's check (:239-252)
        for fields in sections.values():
            top |= fields
    maps = set(_collect(models, name, "maps"))
    for model in _collect(models, name, "sections").values():
        maps |= set(_collect(models, model, "maps"))
    first, last = models[name]["lines"]
    routes = bool(models[name].get("routes_flat_keys"))
    return ConfigKeys(
        program=program,
        config_class=name,
        top=frozenset(top),
        sections=sections,
        maps=frozenset(maps),
        source=f"MaxText {doc['tag']} {doc['file'].rsplit('/', 1)[-1]}:{first}-{last} ({name})",
        flat_from_configs=frozenset(doc.get("config_flat_keys", {}).get(program, [])),
        routes_flat_keys=routes,
    )
