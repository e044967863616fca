"""Request bytes → a mapping, refusing what YAML or JSON would silently accept.

Why strict: duplicate keys and aliases make a request mean something its author did not read.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from rlpipe.core.problems import Problem, RequestInvalid

MAX_DOCUMENT_BYTES = 256 * 1024


def parse_document(data: bytes | str, *, source: str = "request") -> dict[str, Any]:
    """Bytes → a mapping, rejecting what YAML would silently accept (duplicate keys, aliases)."""
    if isinstance(data, bytes):
        if len(data) > MAX_DOCUMENT_BYTES:
            raise RequestInvalid(
                [
                    Problem(
                        "",
                        f"{source} is {len(data)} bytes",
                        f"keep requests under {MAX_DOCUMENT_BYTES} bytes",
                    )
                ]
            )
        try:
            text = data.decode("utf-8-sig")  # a byte-order mark is not part of the document
        except UnicodeDecodeError:
            raise RequestInvalid(
                [Problem("", f"{source} is not UTF-8 text", "save the request as UTF-8 JSON or YAML")]
            ) from None
    else:
        text = data
    if not text.strip():
        raise RequestInvalid(
            [Problem("", f"{source} is empty", "write a JSON or YAML mapping with model and hf_repo")]
        )
    if "\x00" in text:
        raise RequestInvalid(
            [Problem("", f"{source} contains NUL bytes", "save the request as JSON or YAML text")]
        )
    doc = _parse_json(text, source) if source.lower().endswith(".json") else _parse_yaml(text, source)
    if not isinstance(doc, dict):
        raise RequestInvalid(
            [
                Problem(
                    "", f"{source} is a {type(doc).__name__}, not a mapping", "write a mapping: `model: ...`"
                )
            ]
        )
    return doc


# Maps whose keys are MaxText's own dotted names (``rl.num_iterations``): a path that enters one
# takes the rest of itself as one key, as the sweep grid's ``maxtext_overrides.<key>`` does.
DOTTED_KEY_MAPS = frozenset({"maxtext_overrides"})


def set_value(doc: dict[str, Any], path: str, text: str, *, source: str = "--set") -> None:
    """``rlpipe submit --set PATH=TEXT``: put TEXT at PATH in the document, read exactly as the
    line ``key: TEXT`` would be read in a YAML request (the same strict loader), so a value means
    the same on the command line as in the file. Raises ``RequestInvalid`` naming the path."""
    parts = path.split(".")
    if not path or any(not p for p in parts):
        raise RequestInvalid(
            [
                Problem(
                    path, f"{source}: {path!r} is not a field path", "write it as training.learning_rate=2e-5"
                )
            ]
        )
    if "\n" in text or "\r" in text:
        raise RequestInvalid(
            [Problem(path, f"{source} {path}: the value spans lines", "give a one-line value")]
        )
    value = _parse_yaml(f"value: {text}", f"{source} {path}")["value"]
    node = doc
    for index, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parts[: index + 1])
            raise RequestInvalid(
                [
                    Problem(
                        where,
                        f"{source} {path}: {where} is not a section of the request",
                        "set a field inside a section",
                    )
                ]
            )
        if part in DOTTED_KEY_MAPS:
            child[".".join(parts[index + 1 :])] = value
            return
        node = child
    node[parts[-1]] = value


class _DuplicateKey(ValueError):
    """A JSON object that names one key twice."""


def _parse_json(text: str, source: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise _DuplicateKey(f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise RequestInvalid(
            [
                Problem(
                    "",
                    f"{source} is not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                    "fix the syntax",
                )
            ]
        ) from None
    except _DuplicateKey as exc:
        raise RequestInvalid([Problem("", f"{source}: {exc}", "keep one value per key")]) from None
    except ValueError as exc:  # an integer past Python's digit limit for text (4,300 digits)
        raise RequestInvalid(
            [Problem("", f"{source} has a value JSON cannot read: {str(exc)[:200]}", "use a smaller number")]
        ) from None
    except RecursionError:
        raise RequestInvalid(
            [Problem("", f"{source} is nested too deeply", "flatten the document")]
        ) from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RequestInvalid(
            [Problem("", f"{source} is not valid JSON or YAML{at}: {problem}", "fix the syntax")]
        ) from None
    except RecursionError:
        raise RequestInvalid(
            [Problem("", f"{source} is nested too deeply", "flatten the document")]
        ) from None
    except (ValueError, OverflowError) as exc:
        # PyYAML's constructors raise these, not YAMLError, for scalars it cannot build: an
        # impossible date (2024-13-01), a timezone out of range, an integer past Python's limit.
        raise RequestInvalid(
            [
                Problem(
                    "",
                    f"{source} has a value YAML cannot read: {str(exc)[:200]}",
                    "quote the value as a string",
                )
            ]
        ) from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and anchors/aliases (billion-laughs, silent overwrite)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it untyped
            raise yaml.constructor.ConstructorError(
                None, None, "aliases (*name) are not allowed in requests", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "mapping keys must be plain strings", key_node.start_mark
                ) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
