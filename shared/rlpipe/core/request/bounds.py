"""Every value of a request document is bounded before anything else reads it.

Why a walk of the raw document, before the schema: a value the schema refuses is still read by the
cross-field checks, the step arithmetic and the ledger's JSON encoder. A 400-digit integer raises
``OverflowError`` where a float is made of it; a YAML ``0x…`` or base-60 integer of 4,000 digits
parses (powers of two have no digit limit) and then cannot be printed ("Exceeds the limit (4300
digits)"); a lone surrogate (``"\\ud800"``) cannot be encoded as UTF-8, so the ledger that holds it
can never be read back. Refusing them here, with their paths, turns each crash into a problem a
person can fix, and leaves the schema and every later step with values of bounded size.

Integers are measured by ``bit_length`` (no conversion to text, which is what fails), strings by
their length and by encoding them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from rlpipe.core.problems import Problem

MAX_DEPTH = 12  # the schema nests four deep; room for maps inside overrides
MAX_ITEMS = 512  # per mapping or list
MAX_KEY_CHARS = 256
MAX_STRING_CHARS = 8192  # the longest typed field (vllm_hf_overrides) is 2,048
MAX_INT_BITS = 63  # any integer the pipeline stores fits a signed 64-bit field
MAX_PROBLEMS = 50  # then stop walking: the answer is already long enough to act on
SHOWN_KEY_CHARS = 64  # a key is quoted in a path at most this long, then marked as cut


def shown(text: str, limit: int = SHOWN_KEY_CHARS) -> str:
    """``text`` as it may appear in a problem: valid Unicode (a lone surrogate escaped), and cut to
    ``limit`` characters with the cut said, so a record about a huge key stays small."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= limit else f"{safe[:limit]}…(+{len(safe) - limit} chars)"


def bound_problems(doc: Any) -> list[Problem]:
    """The values of ``doc`` that are too deep, too wide, too long, too large, not finite or not
    valid Unicode; at most ``MAX_PROBLEMS`` of them."""
    found: list[Problem] = []
    for problem in _walk(doc, (), 0):
        found.append(problem)
        if len(found) >= MAX_PROBLEMS:
            break
    return found


def _join(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _walk(value: Any, path: tuple[str, ...], depth: int) -> Iterator[Problem]:
    where = _join(path)
    if depth > MAX_DEPTH:
        yield Problem(where, f"nested more than {MAX_DEPTH} levels deep", "flatten the value")
        return
    if isinstance(value, dict):
        if len(value) > MAX_ITEMS:
            yield Problem(where, f"{len(value)} keys (at most {MAX_ITEMS})", "remove keys")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                continue  # the schema names non-string keys (validation._merge)
            label = shown(key)
            if not _is_unicode(key):
                yield Problem(
                    _join((*path, label)), "the key is not valid Unicode (a lone surrogate)", "retype the key"
                )
                continue
            if len(key) > MAX_KEY_CHARS:
                yield Problem(
                    _join((*path, label)),
                    f"the key is {len(key)} characters (at most {MAX_KEY_CHARS})",
                    "shorten the key",
                )
                continue
            yield from _walk(item, (*path, key), depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            yield Problem(where, f"{len(value)} items (at most {MAX_ITEMS})", "remove items")
            return
        for i, item in enumerate(value):
            yield from _walk(item, (*path, str(i)), depth + 1)
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            yield Problem(
                where,
                f"the number has {value.bit_length()} bits (at most {MAX_INT_BITS}: about 19 digits)",
                "use a number between -9223372036854775807 and 9223372036854775807",
            )
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield Problem(where, "the number is not finite (inf or nan)", "write a finite number")
    elif isinstance(value, str):
        if not _is_unicode(value):
            yield Problem(
                where,
                "the value is not valid Unicode (it holds a lone surrogate such as \\ud800)",
                "retype the value; JSON escapes must pair surrogates",
            )
        elif len(value) > MAX_STRING_CHARS:
            yield Problem(
                where,
                f"the value is {len(value)} characters (at most {MAX_STRING_CHARS})",
                "shorten the value",
            )
    elif isinstance(value, bytes) and len(value) > MAX_STRING_CHARS:  # YAML !!binary
        yield Problem(where, f"the value is {len(value)} bytes (at most {MAX_STRING_CHARS})", "shorten it")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
