"""Terraform files held to the google provider's own schema: what `terraform validate` would say.

`terraform validate` needs the provider binary, which cannot be downloaded here; its schema can
(tests/harness/google_schemas.py). This walks every ``resource``, ``data`` and ``provider "google"``
block of a directory's ``*.tf`` files (python-hcl2) and reports, against that schema:

- an argument or block the provider does not have, at any depth (``dynamic "x"`` is checked as
  block ``x``, its ``content`` against ``x``'s schema);
- a required argument or block that is missing (a ``dynamic`` block counts as present);
- a block written as an argument (``versioning = {…}``) or an argument written as a block, and a
  block the provider takes once given twice;
- a literal value Terraform could not convert to the argument's type. The rules are cty's
  (github.com/zclconf/go-cty, cty/convert/conversion_primitive.go): a number or bool becomes a
  string; a bool becomes a number; a string becomes a number if it parses as one and a bool only
  if it is "true", "false", "1" or "0"; nothing becomes a list or a map but a list or a map.

Not checked: the value of an expression (``var.x``, ``"${…}"``, function calls: their types are
known only to Terraform), cross-argument rules (``ConflictsWith``, ``ExactlyOneOf``), the values
an argument accepts (enums, formats), and resources of other providers (``time_sleep``) and of
Terraform itself (``terraform_data``), which are returned as unchecked so a caller can hold that
set to an allowlist.

python-hcl2 (8.x) returns blocks as lists of dicts marked ``__is_block__``, a quoted literal
with its quotes (``"\\"STANDARD\\""``), an interpolation as ``"${…}"`` and a bare reference or
keyword (``var.x`` in ``ignore_changes``) as an unquoted string: only the quoted form is a literal.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions

_OPTIONS = SerializationOptions(with_comments=False)
_MARKERS = {"__is_block__", "__start_line__", "__end_line__"}

# Terraform's meta-arguments (developer.hashicorp.com/terraform/language/meta-arguments): allowed
# in every resource and data block whatever the provider's schema says.
_META_ARGUMENTS = {"count", "for_each", "depends_on", "provider"}
_META_BLOCKS = {
    "resource": frozenset({"lifecycle", "provisioner", "connection"}),
    "data": frozenset({"lifecycle"}),
}
# What a `dynamic "x"` block may hold (developer.hashicorp.com/terraform/language/expressions/dynamic-blocks).
_DYNAMIC_ARGUMENTS = {"for_each", "iterator", "labels"}
# The provider checked here and the resource types Terraform itself provides.
CHECKED_PROVIDER = "google"
_BUILT_IN = {"terraform_data"}
# cty.ParseNumberVal takes a decimal with an optional sign, fraction and exponent.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BOOL_STRINGS = {"true", "false", "1", "0"}


@dataclass(frozen=True)
class Finding:
    file: str
    address: str  # google_storage_bucket.requests
    path: str  # lifecycle_rule[1].condition
    problem: str

    def __str__(self) -> str:
        where = f"{self.address}.{self.path}" if self.path else self.address
        return f"{self.file}: {where}: {self.problem}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    checked: set[str] = field(default_factory=set)  # addresses held to the schema
    unchecked: set[str] = field(default_factory=set)  # resource/data types of other providers


# ------------------------------------------------------------------------------------ literals


class _Expression:
    """A value only Terraform can evaluate: never type-checked."""


EXPRESSION = _Expression()


def literal(value: Any) -> Any:
    """python-hcl2's value → the Python value it spells, or EXPRESSION."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            inner = value[1:-1]
            escaped = inner.replace("$${", "").replace("%%{", "")
            if "${" in escaped or "%{" in escaped:
                return EXPRESSION  # a template
            return inner
        return EXPRESSION  # "${…}" or a bare reference
    if isinstance(value, list):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items() if k not in _MARKERS}
    return EXPRESSION


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    return "an object"


def type_problem(value: Any, wanted: str) -> str | None:
    """Why Terraform could not convert the literal ``value`` to ``wanted``; None if it can."""
    if value is EXPRESSION or value is None:
        return None
    container = re.fullmatch(r"(list|map)\((\w+)\)", wanted)
    if container:
        outer, element = container.groups()
        items = value if outer == "list" and isinstance(value, list) else None
        if outer == "map" and isinstance(value, dict):
            items = list(value.values())
        if items is None:
            return f"{_kind(value)} where a {wanted} is wanted"
        for item in items:
            problem = type_problem(item, element)
            if problem:
                return f"an element: {problem}"
        return None
    if isinstance(value, (list, dict)):
        return f"{_kind(value)} where a {wanted} is wanted"
    if wanted == "string":
        return None
    if wanted == "number":
        if isinstance(value, (bool, int, float)) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
            return None
        return f"{_kind(value)} where a number is wanted"
    if wanted == "bool":
        if isinstance(value, bool) or (isinstance(value, str) and value in _BOOL_STRINGS):
            return None
        return f"{_kind(value)} where a bool is wanted"
    raise ValueError(f"unknown schema type {wanted!r}")


# ------------------------------------------------------------------------------------ blocks


def _is_block_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and v.get("__is_block__") for v in value)
    )


def _is_dynamic_list(value: Any) -> bool:
    """`dynamic "x" { … }` comes as [{'"x"': {…, "__is_block__": True}}, …]."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(entry, dict)
            and all(
                isinstance(v, dict) and v.get("__is_block__") for k, v in entry.items() if k not in _MARKERS
            )
            for entry in value
        )
    )


def _label(key: str) -> str:
    return key[1:-1] if len(key) >= 2 and key.startswith('"') and key.endswith('"') else key


def _hint(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _Walker:
    def __init__(self, file: str, address: str, report: Report) -> None:
        self.file, self.address, self.report = file, address, report

    def problem(self, path: str, text: str) -> None:
        self.report.findings.append(Finding(self.file, self.address, path, text))

    def body(
        self,
        body: Mapping[str, Any],
        schema: Mapping[str, Any],
        path: str,
        meta_blocks: frozenset[str] | None,
    ) -> None:
        """``meta_blocks``: the meta-blocks a top-level block may hold (with the meta-arguments);
        None inside a nested block, where neither is allowed."""
        arguments: Mapping[str, Any] = schema["arguments"]
        blocks: Mapping[str, Any] = schema["blocks"]
        given: dict[str, int] = {}
        for key, value in body.items():
            if key in _MARKERS:
                continue
            at = f"{path}.{key}" if path else key
            if key == "dynamic" and _is_dynamic_list(value):
                for entry in value:
                    for label, dynamic in entry.items():
                        if label in _MARKERS:
                            continue
                        name = _label(label)
                        given[name] = given.get(name, 0) + 1
                        self.dynamic(name, dynamic, blocks, path)
            elif key in blocks:
                if not _is_block_list(value):
                    self.problem(at, f"{key} is a block: write `{key} {{ … }}`, not `{key} = …`")
                    given[key] = given.get(key, 0) + 1
                    continue
                given[key] = given.get(key, 0) + len(value)
                for i, nested in enumerate(value):
                    where = at if blocks[key]["max_one"] and len(value) == 1 else f"{at}[{i}]"
                    self.body(nested, blocks[key]["block"], where, None)
            elif key in arguments:
                given[key] = 1
                if _is_block_list(value):
                    self.problem(at, f"{key} is an argument: write `{key} = …`, not a block")
                    continue
                problem = type_problem(literal(value), arguments[key]["type"])
                if problem:
                    self.problem(at, f"{problem} (Terraform cannot convert it to {arguments[key]['type']})")
            elif meta_blocks is not None and (
                key in _META_ARGUMENTS or (key in meta_blocks and _is_block_list(value))
            ):
                continue
            else:
                kind = "block" if _is_block_list(value) else "argument"
                hint = _hint(key, [*arguments, *blocks])
                self.problem(at, f"unknown {kind} {key!r}: the google provider has no such {kind} here{hint}")
        for name, spec in blocks.items():
            count = given.get(name, 0)
            if spec["required"] and count == 0:
                self.problem(path, f"required block {name!r} is missing")
            if spec["max_one"] and count > 1:
                self.problem(path, f"block {name!r} is given {count} times; the provider takes one")
        for name, spec in arguments.items():
            if spec["required"] and name not in given:
                self.problem(path, f"required argument {name!r} is missing")

    def dynamic(self, name: str, dynamic: Mapping[str, Any], blocks: Mapping[str, Any], path: str) -> None:
        at = f"{path}.{name}[dynamic]" if path else f"{name}[dynamic]"
        if name not in blocks:
            self.problem(
                at, f"dynamic {name!r} names no block of the google provider here{_hint(name, blocks)}"
            )
            return
        for key in dynamic:
            if key not in _MARKERS | _DYNAMIC_ARGUMENTS | {"content"}:
                self.problem(at, f"a dynamic block takes for_each, iterator, labels and content, not {key!r}")
        if "for_each" not in dynamic:
            self.problem(at, "a dynamic block needs for_each")
        content = dynamic.get("content")
        if not isinstance(content, list) or not _is_block_list(content) or len(content) != 1:
            self.problem(at, "a dynamic block needs exactly one content block")
            return
        self.body(content[0], blocks[name]["block"], at, None)


def _provider_of(kind: str, body: Mapping[str, Any]) -> str:
    """The provider local name a resource type belongs to: its `provider` meta-argument, else the
    type's first word (Terraform's implied provider)."""
    chosen = body.get("provider")
    if isinstance(chosen, str) and not chosen.startswith('"'):
        return chosen.removeprefix("${").removesuffix("}").split(".")[0]
    return kind.split("_", 1)[0]


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> dict[str, Any]:
    """python-hcl2 takes about a second for our twelve files: a file's text is parsed once per
    process, so a check of a copy with one file changed parses that file alone. (Read-only.)"""
    parsed: dict[str, Any] = hcl2.loads(text, serialization_options=_OPTIONS)
    return parsed


def check_text(text: str, file: str, schema: Mapping[str, Any], report: Report | None = None) -> Report:
    report = report or Report()
    parsed = _parse(text)
    tables = {"resource": schema["resources"], "data": schema["data_sources"]}
    for section, table in tables.items():
        for entry in parsed.get(section, []):
            for type_key, named in entry.items():
                kind = _label(type_key)
                for name_key, body in named.items():
                    if name_key in _MARKERS:
                        continue
                    prefix = "data." if section == "data" else ""
                    address = f"{prefix}{kind}.{_label(name_key)}"
                    walker = _Walker(file, address, report)
                    if kind in _BUILT_IN or _provider_of(kind, body) != CHECKED_PROVIDER:
                        report.unchecked.add(f"{prefix}{kind}")
                        continue
                    if kind not in table:
                        hint = _hint(kind, table)
                        walker.problem("", f"the google provider has no {section} type {kind!r}{hint}")
                        continue
                    report.checked.add(address)
                    walker.body(body, table[kind], "", _META_BLOCKS[section])
    for entry in parsed.get("provider", []):
        for name_key, body in entry.items():
            if _label(name_key) == CHECKED_PROVIDER:
                report.checked.add("provider.google")
                # A provider block takes no meta-arguments; `alias` is in the provider's own schema.
                _Walker(file, "provider.google", report).body(body, schema["provider"], "", None)
    return report


def check_directory(directory: Path, schema: Mapping[str, Any]) -> Report:
    report = Report()
    for path in sorted(directory.glob("*.tf")):
        check_text(path.read_text(), path.name, schema, report)
    return report
