"""Validation: merge a document onto its preset and list every problem at once.

Why one pass: a user fixes a request in one round trip, so pydantic's errors, the secret scan and
the cross-field checks are gathered into one ``RequestInvalid``.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from pydantic import ValidationError

from rlpipe.core import presets
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import bounds, checks, grid, provisioning, reading
from rlpipe.core.request.documents import parse_document
from rlpipe.core.request.model import Request
from rlpipe.core.request.policy import Policy

# No word boundary: `hf_<token>_prod` is a token too, and `_` is a word character.
_TOKEN_LIKE = re.compile(r"(?i:hf_)[A-Za-z0-9]{30,}")
_SECRET_KEY = re.compile(
    r"(^|[_-])(token|password|passwd|secret|credentials?|api[_-]?key)($|[_-])", re.IGNORECASE
)


def load_request(data: bytes | str, *, source: str = "request", policy: Policy | None = None) -> Request:
    """Parse, merge onto the preset, validate. Raises only ``RequestInvalid``."""
    return validate_request(parse_document(data, source=source), policy)


def validate_request(doc: Any, policy: Policy | None = None) -> Request:
    """Validate a decoded document (from a file, a message or a watch template) against the
    schema and a deployment's allowlists (``policy``; the built-in defaults when None)."""
    if not isinstance(doc, dict):
        raise RequestInvalid([Problem("", "the request is not a mapping", "write a mapping: `model: ...`")])
    # Unbounded values first, and alone: every later step (the schema's cross-field checks, step
    # arithmetic, the ledger's encoder) may assume bounded numbers, strings and nesting.
    unbounded = bounds.bound_problems(doc)
    if unbounded:
        raise RequestInvalid(unbounded)
    problems = list(_secret_problems(doc))
    preset = doc.get("preset", presets.DEFAULT_PRESET)
    if not isinstance(preset, str) or preset not in presets.PRESET_NAMES:
        problems.append(
            Problem("preset", f"unknown preset {preset!r}", f"use one of: {', '.join(presets.PRESET_NAMES)}")
        )
        preset = presets.DEFAULT_PRESET
    merged, merge_problems = _merge(presets.preset_defaults(preset), doc, ())
    problems.extend(merge_problems)
    provisioning.apply_defaults(merged, doc)
    try:
        request = Request.model_validate(merged)
    except ValidationError as exc:
        reported = {p.path for p in problems}
        problems.extend(p for p in _problems_from_pydantic(exc) if p.path not in reported)
        # Cross-field checks still run on the values that did parse, so one answer lists everything.
        problems.extend(checks.cross_field_problems(merged))
        raise RequestInvalid(_dedupe(problems)) from None
    dumped = request.model_dump(mode="python")
    problems.extend(checks.cross_field_problems(dumped))
    problems.extend(reading.argument_problems(request))  # every argument, as MaxText reads it
    problems.extend((policy or Policy()).problems(request))
    if request.sweep is not None and not problems:  # each child is checked as a request of its own
        problems.extend(grid.problems(request, policy or Policy(), validate_request))
    if problems:
        raise RequestInvalid(_dedupe(problems))
    return request


def _dedupe(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _merge(base: Any, override: Any, path: tuple[str, ...]) -> tuple[Any, list[Problem]]:
    """Deep-merge a request over preset defaults: mappings merge, everything else replaces."""
    if not isinstance(override, dict) or not isinstance(base, dict):
        return override, []
    out = dict(base)
    problems: list[Problem] = []
    for key, value in override.items():
        if not isinstance(key, str):
            where = ".".join(path)
            problems.append(Problem(where, f"key {key!r} is not a string", "quote the key"))
            continue
        if not path and base.get(key) is None and key in presets.SECTION_DEFAULTS and isinstance(value, dict):
            out[key], sub = _merge(copy.deepcopy(presets.SECTION_DEFAULTS[key]), value, (key,))
            problems.extend(sub)
        elif (
            key in base
            and isinstance(base[key], dict)
            and isinstance(value, dict)
            and key not in _REPLACED_MAPS
        ):
            out[key], sub = _merge(base[key], value, (*path, key))
            problems.extend(sub)
        else:
            out[key] = value
    return out, problems


# Maps a request replaces wholesale rather than merging into the preset's.
_REPLACED_MAPS = frozenset({"labels"})


# Fields that name a Kubernetes Secret (name and key), never hold one.
_SECRET_REFERENCES = (("hf_token_secret",), ("publish", "token_secret"))


def _names_a_secret(path: tuple[str, ...]) -> bool:
    return any(path[: len(ref)] == ref for ref in _SECRET_REFERENCES)


def _secret_problems(doc: Any, path: tuple[str, ...] = ()) -> list[Problem]:
    """Tokens never travel in a request: reject keys and values that look like credentials."""
    found: list[Problem] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(key, bytes):
                key = key.decode("utf-8", "replace")
            if isinstance(key, str) and _TOKEN_LIKE.search(key):
                found.append(
                    Problem(
                        ".".join((*path, _TOKEN_LIKE.sub("[REDACTED]", key))),
                        "this key looks like a Hugging Face token",
                        "remove it and revoke the token; the pipeline reads the token from a Kubernetes Secret",
                    )
                )
                continue
            sub = (*path, str(key))
            if isinstance(key, str) and _SECRET_KEY.search(key) and not _names_a_secret(sub):
                found.append(
                    Problem(
                        ".".join(sub),
                        "secrets are never accepted in a request",
                        "remove it; the HF token is read from the Kubernetes Secret named in hf_token_secret",
                    )
                )
                continue
            found.extend(_secret_problems(value, sub))
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            found.extend(_secret_problems(item, (*path, str(i))))
    elif isinstance(doc, bytes):  # YAML !!binary: still text a token can hide in
        found.extend(_secret_problems(doc.decode("utf-8", "replace"), path))
    elif isinstance(doc, str) and _TOKEN_LIKE.search(doc):
        found.append(
            Problem(
                ".".join(path),
                "this value looks like a Hugging Face token",
                "remove it and revoke the token; the pipeline reads the token from a Kubernetes Secret",
            )
        )
    return found


_FIXES = {
    "missing": "add this field",
    "string_type": "write a string (quote the value in YAML)",
    "int_type": "write a whole number",
    "int_parsing": "write a whole number",
    "int_from_float": "write a whole number",
    "float_type": "write a number",
    "float_parsing": "write a number",
    "finite_number": "write a finite number",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "dict_type": "write a mapping",
    "list_type": "write a list",
    "string_pattern_mismatch": "match the pattern shown",
    "string_too_long": "shorten the value",
    "string_too_short": "give a non-empty value",
    "greater_than_equal": "raise the value",
    "greater_than": "raise the value",
    "less_than_equal": "lower the value",
    "less_than": "lower the value",
}


def _problems_from_pydantic(exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        path = _path(loc)
        kind = err["type"]
        ctx = err.get("ctx") or {}
        if kind == "rlpipe":
            problems.append(Problem(path, err["msg"], str(ctx.get("fix", ""))))
            continue
        if kind == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1])
            hint = f"remove it; allowed here: {', '.join(allowed)}" if allowed else "remove it"
            close = _close_match(str(loc[-1]), allowed)
            if close:
                hint = f"did you mean {close!r}? otherwise {hint}"
            problems.append(Problem(path, f"unknown key {loc[-1]!r}", hint))
            continue
        if kind == "literal_error":
            problems.append(Problem(path, err["msg"], f"use one of: {ctx.get('expected', '')}"))
            continue
        # A union such as `int | None` reports one error per member; the None member's error is noise.
        if kind == "none_required":
            continue
        fix = _FIXES.get(kind, "correct the value")
        if kind == "string_pattern_mismatch":
            fix = f"match {ctx.get('pattern')}"
        problems.append(Problem(path, err["msg"], fix))
    return problems


def _path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif str(item) in (
            "int",
            "float",
            "str",
            "bool",
            "constrained-int",
            "constrained-float",
            "constrained-str",
        ):
            continue  # union member tags such as `int` in `training.x.int`
        elif str(item).startswith(("function-", "lax-or-strict")):
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: Any = Request
    for item in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None or item not in fields:
            return []
        annotation = fields[item].annotation
        model = next(
            (a for a in (annotation, *getattr(annotation, "__args__", ())) if hasattr(a, "model_fields")),
            None,
        )
    return sorted(getattr(model, "model_fields", {}) or {})


def _close_match(word: str, options: list[str]) -> str | None:
    import difflib

    matches = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    return matches[0] if matches else None


def json_schema() -> dict[str, Any]:
    """The schema of the request *document*: only model and hf_repo are required.

    The model itself requires every field because the preset fills them; the document a user
    writes may omit all but two, so ``required`` is lifted everywhere except at the top level.
    """
    schema = Request.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://rlpipe.dev/schemas/request.schema.json"
    schema["title"] = "rlpipe request"
    schema["description"] = (
        "An RL post-training request. Unset fields take the preset's value (presets: "
        + ", ".join(presets.PRESET_NAMES)
        + "). Secrets are never part of a request."
    )
    for definition in schema.get("$defs", {}).values():
        definition.pop("required", None)
    schema["required"] = ["model", "hf_repo"]
    return schema
