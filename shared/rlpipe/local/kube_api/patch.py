"""Patch semantics: JSON merge patch, strategic merge patch (approximated), JSON patch."""

from __future__ import annotations

import copy
from typing import Any

from .errors import KubeApiError, bad_request
from .resources import Obj, Resource


class PatchError(ValueError):
    """A patch that cannot be applied (answered with 422, as the apiserver does)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, lists replace."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Approximation of strategic merge: the merge keys of the list fields rlpipe and a simulator
# are likely to patch. Every other list is replaced, as in a JSON merge patch.
STRATEGIC_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
}


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """JSON merge patch plus merge-by-key for :data:`STRATEGIC_MERGE_KEYS` lists.

    ``$patch``/``$retainKeys``/``$setElementOrder`` directives are refused rather than
    silently mis-applied.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise PatchError(f"strategic merge directive {key!r} is not supported by this API double")
        if value is None:
            result.pop(key, None)
            continue
        merge_key = STRATEGIC_MERGE_KEYS.get(key)
        current = result.get(key)
        if merge_key and isinstance(value, list) and isinstance(current, list):
            result[key] = _merge_list_by_key(current, value, merge_key)
        else:
            result[key] = strategic_merge_patch(current, value)
    return result


def _merge_list_by_key(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    merged = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"list item {item!r} lacks its merge key {merge_key!r}")
        for i, existing in enumerate(merged):
            if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]:
                merged[i] = strategic_merge_patch(existing, item)
                break
        else:
            merged.append(strategic_merge_patch({}, item))
    return merged


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return node, parts[-1]


def _list_index(node: list[Any], token: str, path: str, *, insert: bool) -> int:
    if insert and token == "-":
        return len(node)
    if not token.isdigit():
        raise PatchError(f"invalid array index in {path!r}")
    index = int(token)
    if index > len(node) or (not insert and index == len(node)):
        raise PatchError(f"array index out of range in {path!r}")
    return index


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    node, last = _parent(doc, parts, path)
    if isinstance(node, dict):
        if last not in node:
            raise PatchError(f"path {path!r} does not exist")
        return node[last]
    if isinstance(node, list):
        return node[_list_index(node, last, path, insert=False)]
    raise PatchError(f"path {path!r} does not exist")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    node, last = _parent(doc, parts, path)
    if isinstance(node, dict):
        if last not in node:
            raise PatchError(f"path {path!r} does not exist")
        return node.pop(last)
    if isinstance(node, list):
        return node.pop(_list_index(node, last, path, insert=False))
    raise PatchError(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    node, last = _parent(doc, parts, path)
    if isinstance(node, dict):
        if replace and last not in node:
            raise PatchError(f"path {path!r} does not exist")
        node[last] = value
    elif isinstance(node, list):
        index = _list_index(node, last, path, insert=not replace)
        if replace:
            node[index] = value
        else:
            node.insert(index, value)
    else:
        raise PatchError(f"path {path!r} does not exist")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test); all or nothing."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{kind} at {path!r} needs a value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise PatchError(f"{kind} at {path!r} needs 'from'")
            value = _remove(doc, op["from"]) if kind == "move" else copy.deepcopy(_get(doc, op["from"]))
            doc = _add(doc, path, value, replace=False)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"test failed at {path!r}")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = {"merge": MERGE_PATCH, "strategic": STRATEGIC_PATCH, "json": JSON_PATCH}


def apply_patch(res: Resource, current: Obj, patch: Any, content_type: str) -> Obj:
    """Apply a patch of the given media type, with the apiserver's 415 for unknown types."""
    media = content_type.split(";")[0].strip().lower()
    accepted = [JSON_PATCH, MERGE_PATCH] + ([STRATEGIC_PATCH] if res.strategic_merge else [])
    if media not in accepted:
        raise KubeApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types "
            f"include: {', '.join(accepted)}",
        )
    if media != JSON_PATCH and not isinstance(patch, dict):
        raise bad_request("a merge patch body must be a JSON object")
    try:
        if media == JSON_PATCH:
            result = json_patch(current, patch)
        elif media == STRATEGIC_PATCH:
            result = strategic_merge_patch(current, patch)
        else:
            result = merge_patch(current, patch)
    except PatchError as exc:
        raise KubeApiError(
            422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    if not isinstance(result, dict):
        raise KubeApiError(422, "Invalid", "the patch did not produce an object")
    return result
