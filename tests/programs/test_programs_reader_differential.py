"""rlpipe's reading of a MaxText argument against MaxText's own, over ordinary and hostile values.

rlpipe checks every request value as MaxText will read it (``core/maxtext/config_reader.py``: omegaconf
2.4.0 plus pyconfig's own rules, written from pyconfig.py). Here the programs tier's ``reader``
part has run MaxText 0.2.4's real ``pyconfig.initialize`` on each line of
``programs/corpus/reader-differential.txt`` and caught what it hands to pydantic
(``programs/drivers/read_values.py``); every line is read again by rlpipe and the two must agree:

- where MaxText reads a value, rlpipe reads the same value of the same type at every level;
- where MaxText fails on a line, rlpipe refuses it too (the value as unreadable, or the key as one
  MaxText does not define: ``core.maxtext.config_keys``);
- where rlpipe refuses a line MaxText reads, it is for a reason rlpipe holds on purpose: an
  interpolation (MaxText resolves it, reading this process's environment or another key).
"""

from __future__ import annotations

from typing import Any

import pytest

from rlpipe.core.maxtext import config_keys, config_reader
from tests.harness.programs import result

# pyconfig.py:304-312: an unset tokenizer_path becomes the model's default tokenizer; rlpipe reads
# the unset value (and never renders an empty tokenizer_path: the field is typed).
FILLED_BY_PYCONFIG = frozenset({"tokenizer_path"})


def typed(value: Any) -> Any:
    """As the driver writes a value: its type at every level (``True`` is not ``1``)."""
    if isinstance(value, dict):
        return {"t": "dict", "v": {str(k): typed(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"t": "list", "v": [typed(v) for v in value]}
    if value is None:
        return {"t": "none", "v": None}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    if isinstance(value, int):
        return {"t": "int", "v": str(value)}
    if isinstance(value, float):
        return {"t": "float", "v": repr(value)}
    if isinstance(value, str):
        return {"t": "str", "v": value}
    return {"t": type(value).__name__, "v": str(value)}


def _entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = result("reader")["reader"]
    return entries


def _key_refused(item: str) -> bool:
    try:
        path = config_reader.key_path(item.split("=", 1)[0])
    except config_reader.Unreadable:
        return True
    return isinstance(config_keys.for_program("train_rl").resolve(path), config_keys.Unknown)


def test_the_corpus_was_read_whole() -> None:
    entries = _entries()
    assert len(entries) > 100 and all("item" in e for e in entries)
    assert sum("value" in e for e in entries) > 80, "most lines read (the corpus is mostly ordinary)"


def test_where_maxtext_reads_a_value_rlpipe_reads_the_same_or_refuses_an_interpolation() -> None:
    disagreements = []
    for entry in _entries():
        if "value" not in entry:
            continue
        item, path = entry["item"], tuple(entry["path"])
        try:
            ours = typed(config_reader.read(item).at(path))
        except config_reader.Unreadable as refused:
            if "interpolation" not in refused.problem:
                disagreements.append(
                    f"{item!r}: rlpipe refuses ({refused.problem}), MaxText reads {entry['value']}"
                )
            continue
        if ours != entry["value"] and not (path[-1] in FILLED_BY_PYCONFIG and ours == typed(None)):
            disagreements.append(f"{item!r}: rlpipe reads {ours}, MaxText {entry['value']}")
    assert not disagreements, "\n".join(disagreements)


def test_where_maxtext_fails_rlpipe_refuses() -> None:
    lenient = []
    for entry in _entries():
        if "error" not in entry:
            continue
        item = entry["item"]
        try:
            config_reader.read(item)
        except config_reader.Unreadable:
            continue
        if not _key_refused(item):
            lenient.append(f"{item!r}: MaxText fails ({entry['error'][:160]}), rlpipe reads it")
    assert not lenient, "\n".join(lenient)


@pytest.mark.parametrize("item", ["run_name=${oc.env:HOME}", "run_name=\\${oc.env:HOME}"])
def test_an_interpolation_maxtext_would_resolve_is_one_rlpipe_refuses(item: str) -> None:
    """The corpus holds them on purpose: MaxText resolved the first to this machine's HOME."""
    [entry] = [e for e in _entries() if e["item"] == item]
    assert "value" in entry
    with pytest.raises(config_reader.Unreadable):
        config_reader.read(item)
