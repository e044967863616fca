"""Label and field selectors, and the :class:`Selection` one list/watch request asks for."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import bad_request
from .resources import Obj, Resource


@dataclass(frozen=True)
class _LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists", ">", "<"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):  # absent labels match, as in the real apiserver
            return not present or value not in self.values
        try:  # ">" / "<" compare integers; non-integers never match
            number, bound = int(value or ""), int(self.values[0])
        except ValueError:
            return False
        return number > bound if self.op == ">" else number < bound


_KEY = r"[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?"
_SET_TERM = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_NOT_TERM = re.compile(rf"^!\s*(?P<key>{_KEY})$")
_CMP_TERM = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|!=|=|>|<)\s*(?P<value>{_VALUE})$")
_EXISTS_TERM = re.compile(rf"^(?P<key>{_KEY})$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b`` is two terms)."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t.strip() for t in terms]


class LabelSelector:
    """The apiserver's label selector grammar; all requirements must hold (comma = AND)."""

    def __init__(self, text: str | None) -> None:
        self.text = text or ""
        self.requirements: list[_LabelRequirement] = []
        if not self.text.strip():
            return
        for term in _split_top_level(self.text):
            self.requirements.append(self._parse_term(term))

    @staticmethod
    def _parse_term(term: str) -> _LabelRequirement:
        if m := _SET_TERM.match(term):
            values = tuple(v.strip() for v in m.group("values").split(","))
            if any(not re.fullmatch(_VALUE, v) for v in values):
                raise ValueError(f"invalid label value in {term!r}")
            return _LabelRequirement(m.group("key"), m.group("op"), values)
        if m := _NOT_TERM.match(term):
            return _LabelRequirement(m.group("key"), "!exists")
        if m := _CMP_TERM.match(term):
            op = "=" if m.group("op") == "==" else m.group("op")
            if op in (">", "<") and not re.fullmatch(r"-?\d+", m.group("value")):
                raise ValueError(f"{term!r}: {op} needs an integer value")
            return _LabelRequirement(m.group("key"), op, (m.group("value"),))
        if m := _EXISTS_TERM.match(term):
            return _LabelRequirement(m.group("key"), "exists")
        raise ValueError(f"unable to parse requirement: {term!r}")

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


class FieldSelector:
    """``metadata.name=x,status.phase!=Running``; only fields the real apiserver indexes."""

    _TERM = re.compile(r"^(?P<key>[A-Za-z][\w.]*)\s*(?P<op>==|!=|=)\s*(?P<value>.*)$")

    def __init__(self, text: str | None, allowed: frozenset[str]) -> None:
        self.text = text or ""
        self.terms: list[tuple[str, bool, str]] = []  # (path, equal, value)
        if not self.text.strip():
            return
        for term in _split_top_level(self.text):
            m = self._TERM.match(term)
            if not m:
                raise ValueError(f"invalid field selector: {term!r}")
            if m.group("key") not in allowed:
                raise ValueError(f"field label not supported: {m.group('key')}")
            self.terms.append((m.group("key"), m.group("op") != "!=", m.group("value").strip()))

    @staticmethod
    def _lookup(obj: Obj, path: str) -> str:
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return ""
        if isinstance(node, bool):
            return "true" if node else "false"
        return str(node)

    def matches(self, obj: Obj) -> bool:
        return all((self._lookup(obj, path) == value) == equal for path, equal, value in self.terms)


@dataclass(frozen=True)
class Selection:
    """What one list/watch/delete-collection request asks for."""

    resource: Resource
    namespace: str | None  # None: all namespaces
    labels: LabelSelector
    fields: FieldSelector

    @classmethod
    def build(
        cls,
        res: Resource,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Selection:
        try:
            return cls(
                res, namespace, LabelSelector(label_selector), FieldSelector(field_selector, res.field_labels)
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from exc

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)
