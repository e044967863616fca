"""The published Workflows syntax schema, with the few loosenings the Workflows reference requires.

The schema (SchemaStore's ``workflows.json``, contributed by Google; fetched by
``tests.harness.workflow_schema_fetch``) types some fields as integer literals that the Workflows
reference lets a definition write as an expression or a float. Validated as published, our
``workflows/pipeline.yaml`` fails at exactly those fields. Each loosening below widens one schema
location, named by its JSON pointer, from its published type to that type (or ``number``) *or an
expression*, written in the schema's own spelling of an expression (``definitions.for.in``:
a string matching ``^\\$\\{.+\\}$``), and cites the reference page that allows it. They are applied
as RFC 6902 JSON Patch operations: a ``test`` that the location still has its published type (so a
changed schema is reported, not silently patched), then ``remove`` that type and ``add`` the wider
``anyOf``. Nothing else in the schema is changed.

``schema_errors`` reports each error where it is, not as the top-level ``oneOf`` failure
jsonschema raises: inside ``anyOf``/``oneOf`` it follows only the branches whose type fits the
value, so a map under ``raise`` is reported against the map branch, not as "not a string".
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator
from jsonschema.exceptions import ValidationError

from tests.harness import workflow_schema_fetch as fetched

# The schema's own spelling of "an expression" (definitions.for.properties.in.anyOf[1]).
EXPRESSION = {"type": "string", "pattern": r"^\$\{.+\}$"}

EXPRESSIONS_PAGE = "https://cloud.google.com/workflows/docs/reference/syntax/expressions"
RETRYING_PAGE = "https://cloud.google.com/workflows/docs/reference/syntax/retrying"
DEFAULT_RETRY_PAGE = "https://cloud.google.com/workflows/docs/reference/stdlib/http/default_retry"
RAISING_PAGE = "https://cloud.google.com/workflows/docs/reference/syntax/raising-errors"
AWAIT_CALLBACK_PAGE = "https://cloud.google.com/workflows/docs/reference/stdlib/events/await_callback"


@dataclass(frozen=True)
class Loosening:
    """One schema location widened from its published type to ``allowed`` or an expression."""

    pointer: str
    published: str
    allowed: tuple[str, ...]
    cites: tuple[str, ...]
    why: str

    def patch(self) -> list[dict[str, Any]]:
        """The RFC 6902 operations that apply it."""
        return [
            {"op": "test", "path": f"{self.pointer}/type", "value": self.published},
            {"op": "remove", "path": f"{self.pointer}/type"},
            {"op": "add", "path": f"{self.pointer}/anyOf", "value": self.widened()},
        ]

    def widened(self) -> list[dict[str, Any]]:
        return [{"type": kind} for kind in self.allowed] + [dict(EXPRESSION)]


_RETRY = "/definitions/retry/oneOf/0/properties"
_BACKOFF = f"{_RETRY}/backoff/properties"
_BACKOFF_WHY = (
    "the reference documents the backoff values as seconds and a multiplier, not integers, "
    "Google's own http.default_retry backs off by a multiplier of 1.25, and retry values may be "
    "expressions"
)

LOOSENINGS: tuple[Loosening, ...] = (
    Loosening(
        f"{_RETRY}/max_retries",
        "integer",
        ("integer",),
        (EXPRESSIONS_PAGE, RETRYING_PAGE),
        'expressions may be used for "retry values, including max_retries and multiplier"',
    ),
    Loosening(
        f"{_BACKOFF}/initial_delay",
        "integer",
        ("number",),
        (RETRYING_PAGE, EXPRESSIONS_PAGE),
        _BACKOFF_WHY,
    ),
    Loosening(
        f"{_BACKOFF}/max_delay",
        "integer",
        ("number",),
        (RETRYING_PAGE, EXPRESSIONS_PAGE),
        _BACKOFF_WHY,
    ),
    Loosening(
        f"{_BACKOFF}/multiplier",
        "integer",
        ("number",),
        (RETRYING_PAGE, DEFAULT_RETRY_PAGE, EXPRESSIONS_PAGE),
        _BACKOFF_WHY,
    ),
    Loosening(
        "/definitions/raise/anyOf/1/properties/code",
        "integer",
        ("integer",),
        (RAISING_PAGE, EXPRESSIONS_PAGE),
        "an error map is raised and re-raised with values computed at run time "
        "(raise: ${e} re-raises a caught error whole); a re-raised error keeps the code it was "
        "caught with",
    ),
    Loosening(
        "/definitions/args/properties/timeout",
        "number",
        ("number",),
        (AWAIT_CALLBACK_PAGE, EXPRESSIONS_PAGE),
        "call arguments may be expressions; events.await_callback's timeout is the seconds left "
        "before a deadline, computed at run time",
    ),
)


class LooseningDoesNotApply(Exception):
    """The published schema no longer has what a loosening widens: the schema changed."""


def _pointer_parts(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise ValueError(f"not a JSON pointer: {pointer!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _parent(document: Any, pointer: str) -> tuple[Any, str | int]:
    """The container holding ``pointer``'s last part, and that part (an index in a list)."""
    *walk, last = _pointer_parts(pointer)
    node = document
    for part in walk:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node, int(last) if isinstance(node, list) else last


def apply_patch(document: Any, operations: list[dict[str, Any]]) -> None:
    """Apply ``test``, ``remove`` and ``add`` (of a map member) in place, as RFC 6902 says."""
    for operation in operations:
        path = operation["path"]
        try:
            parent, key = _parent(document, path)
            if operation["op"] == "test":
                if parent[key] != operation["value"]:
                    raise LooseningDoesNotApply(f"{path} is {parent[key]!r}, not {operation['value']!r}")
            elif operation["op"] == "remove":
                del parent[key]
            elif operation["op"] == "add" and isinstance(parent, dict):
                parent[key] = copy.deepcopy(operation["value"])
            else:
                raise ValueError(f"unsupported patch operation {operation!r}")
        except (KeyError, IndexError, TypeError) as missing:
            raise LooseningDoesNotApply(f"{path} is not in the schema ({missing!r})") from None


def loosened(published: dict[str, Any], loosenings: tuple[Loosening, ...] = LOOSENINGS) -> dict[str, Any]:
    """A copy of ``published`` with ``loosenings`` applied."""
    schema = copy.deepcopy(published)
    for loosening in loosenings:
        try:
            apply_patch(schema, loosening.patch())
        except LooseningDoesNotApply as changed:
            raise LooseningDoesNotApply(
                f"the loosening of {loosening.pointer} no longer applies: {changed}. The schema changed: "
                "review it and the loosenings in tests/harness/workflow_schema.py"
            ) from None
    return schema


def published_schema(wheel: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(fetched.schema_bytes(wheel))
    return loaded


def drift(wheel: Path) -> str | None:
    """Why the wheel's schema is not the reviewed one, or ``None`` when it is."""
    found = fetched.schema_sha256(wheel)
    if found == fetched.SCHEMA_SHA256:
        return None
    return (
        f"the schema in {wheel.name} (sha256 {found}) differs from the pinned hash "
        f"{fetched.SCHEMA_SHA256}: review the diff against the schema of the version reviewed, check "
        "each loosening in tests/harness/workflow_schema.py still applies and is still needed, then update "
        "EMULATOR_VERSION and SCHEMA_SHA256 in tests/harness/workflow_schema_fetch.py"
    )


# ---- validation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaError:
    """One error: where in the definition, what is wrong, and the schema rule that says so."""

    where: str
    message: str
    rule: str

    def __str__(self) -> str:
        return f"{self.where or '(the definition)'}: {self.message} [schema {self.rule}]"


class WorkflowSchema:
    """A schema ready to validate definitions (parsed YAML or JSON data)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        Draft7Validator.check_schema(schema)
        self.schema = schema
        self.validator = Draft7Validator(schema)
        self._pointers = dict(_pointers_of(schema, ""))

    def errors(self, document: Any) -> list[SchemaError]:
        found = [
            SchemaError(
                "/".join(map(str, leaf.absolute_path)),
                leaf.message,
                f"{self._pointers.get(id(leaf.schema), '?')}/{leaf.validator}",
            )
            for error in self.validator.iter_errors(document)
            for leaf in _leaves(error)
        ]
        return sorted(set(found), key=lambda e: (e.where, e.rule))


def _pointers_of(node: Any, pointer: str) -> Iterator[tuple[int, str]]:
    """Each sub-schema (a map) of the schema by identity, with its JSON pointer."""
    if isinstance(node, dict):
        yield id(node), pointer
        for key, value in node.items():
            yield from _pointers_of(value, f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _pointers_of(value, f"{pointer}/{index}")


def _leaves(error: ValidationError) -> Iterator[ValidationError]:
    """The errors under an ``anyOf``/``oneOf`` failure, in the branches whose type fits the value."""
    if not error.context:
        yield error
        return
    branches: dict[Any, list[ValidationError]] = {}
    for inner in error.context:
        branches.setdefault(inner.relative_schema_path[0], []).append(inner)
    fitting = [
        inner
        for errors in branches.values()
        if not any(e.validator == "type" and not e.relative_path for e in errors)
        for inner in errors
    ]
    if not fitting:
        yield error
        return
    for inner in fitting:
        yield from _leaves(inner)


# ---- the schema these tests use ------------------------------------------------------------------


@cache
def cached_schemas() -> tuple[WorkflowSchema, WorkflowSchema] | None:
    """The published and the loosened schema from the cached wheel, or ``None`` without it."""
    wheel = fetched.cached_wheel()
    if wheel is None:
        return None
    published = published_schema(wheel)
    return WorkflowSchema(published), WorkflowSchema(loosened(published))


MISSING = (
    f"the published Workflows schema is not cached ({fetched.EMULATOR} {fetched.EMULATOR_VERSION} "
    f"in {fetched.CACHE_DIR.relative_to(fetched.ROOT)}): run `make workflows-schema`"
)


def require_schemas() -> tuple[WorkflowSchema, WorkflowSchema]:
    """The published and the loosened schema; without them the test skips, naming
    ``make workflows-schema`` (under CI=true, where ``make test`` fetches it first, it fails)."""
    schemas = cached_schemas()
    if schemas is not None:
        return schemas
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI runs make test, which fetches the schema first, but {MISSING}")
    pytest.skip(MISSING)
