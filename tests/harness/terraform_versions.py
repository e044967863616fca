"""Terraform's version constraints (``">= 7.0, < 8.0"``), read as Terraform reads them.

The syntax (developer.hashicorp.com/terraform/language/expressions/version-constraints): constraints
joined by commas, all of which must hold; each is an operator (``=``, ``!=``, ``>``, ``>=``, ``<``,
``<=``, ``~>``; none means ``=``) and a version of one to three numbers, missing numbers being zero.
``~>`` lets only the right-most given number grow: ``~> 7.0`` is ``>= 7.0, < 8.0`` and
``~> 7.0.1`` is ``>= 7.0.1, < 7.1.0``. Pre-release versions are refused rather than guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import hcl2
from hcl2.utils import SerializationOptions

Version = tuple[int, int, int]

_PART = re.compile(r"\s*(?P<op>!=|>=|<=|~>|=|>|<)?\s*(?P<version>[0-9]+(?:\.[0-9]+){0,2})\s*")


def parse_version(text: str) -> Version:
    if not re.fullmatch(r"[0-9]+(?:\.[0-9]+){0,2}", text):
        raise ValueError(f"{text!r} is not a release version (one to three numbers)")
    major, minor, patch = ([int(n) for n in text.split(".")] + [0, 0])[:3]
    return major, minor, patch


@dataclass(frozen=True)
class Constraint:
    text: str
    parts: tuple[tuple[str, Version, int], ...]  # (operator, version, how many numbers were given)

    @classmethod
    def parse(cls, text: str) -> Constraint:
        parts = []
        for piece in text.split(","):
            m = _PART.fullmatch(piece)
            if m is None:
                raise ValueError(f"{piece.strip()!r} in {text!r} is not a version constraint")
            given = m["version"]
            parts.append((m["op"] or "=", parse_version(given), given.count(".") + 1))
        return cls(text, tuple(parts))

    def allows(self, version: Version) -> bool:
        return all(_holds(op, bound, given, version) for op, bound, given in self.parts)


def _holds(op: str, bound: Version, given: int, version: Version) -> bool:
    if op == "~>":
        if given == 1:  # "~> 7": only the major may grow, so anything from 7 on
            return version >= bound
        upper = [*bound[: given - 2], bound[given - 2] + 1, 0, 0][:3]
        return bound <= version < (upper[0], upper[1], upper[2])
    return {
        "=": version == bound,
        "!=": version != bound,
        ">": version > bound,
        ">=": version >= bound,
        "<": version < bound,
        "<=": version <= bound,
    }[op]


def required_provider(versions_tf: Path, name: str) -> tuple[str, Constraint]:
    """(source, version constraint) of ``required_providers.<name>`` in ``versions_tf``."""
    parsed = hcl2.loads(
        versions_tf.read_text(), serialization_options=SerializationOptions(with_comments=False)
    )
    for terraform in parsed.get("terraform", []):
        for providers in terraform.get("required_providers", []):
            entry = providers.get(name)
            if isinstance(entry, dict):
                source, version = entry.get("source", ""), entry.get("version", "")
                if not (source.startswith('"') and version.startswith('"')):
                    raise ValueError(
                        f"{versions_tf.name}: {name}'s source and version must be literal strings"
                    )
                return source.strip('"'), Constraint.parse(version.strip('"'))
    raise ValueError(f"{versions_tf.name} declares no required provider {name!r}")
