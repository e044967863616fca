"""A Kubernetes API double: a real HTTP server speaking the Kubernetes REST protocol.

No kube-apiserver can run on a laptop or in CI here, and the mocks on PyPI either ignore
label selectors, return 200 where the client expects 201, or never end a watch (see
reference/emulators.md §4). The pipeline must be tested with the *real* ``kubernetes``
client, so this module serves the few resources rlpipe touches over plain HTTP/1.1:

* ``batch/v1`` Jobs and ``jobset.x-k8s.io/v1alpha2`` JobSets: create, get, list, replace,
  patch (merge, strategic-merge, JSON patch), ``/status``, delete, delete-collection, watch;
* ``v1`` Pods and Events: read-only over HTTP (get, list, watch); a cluster simulator in the
  same process writes them through the Python API of :class:`KubeApiServer`.

Server behaviour that callers depend on is real: uid/resourceVersion/creationTimestamp/
generation, 201/409/404/422 with proper ``Status`` bodies, optimistic concurrency, label and
field selectors, watch with resourceVersion/timeoutSeconds/410 Expired, cascading deletion,
finalizers. Approximations are named where they are made (search for "Approximation").
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import functools
import json
import logging
import re
import select
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Validator = Callable[[Obj], list[str]]
Listener = Callable[["WatchEvent"], None]

SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-rlpipe-double",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

# Labels by which cascading deletion finds a workload's pods (besides ownerReferences):
# the Job controller sets both job-name labels and the controller-uid labels on its pods;
# the JobSet controller sets jobset-name (and jobset-uid) on its child Jobs and their pods.
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    """One served resource type; everything path- and message-shaped derives from it."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    singular: str
    http_writable: bool  # pods/events are written only by the in-process simulator
    validated: bool  # run the injected validator on every write
    has_status: bool  # has a /status subresource
    field_labels: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})
    # Paths under spec that may not change after create (approximation of the real rules):
    immutable: tuple[str, ...] = ()
    # ...except these, which may change while the object is suspended.
    mutable_when_suspended: tuple[str, ...] = ()
    strategic_merge: bool = True  # custom resources reject strategic-merge patches

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``jobs.batch``: the name the apiserver uses in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


JOBS = Resource(
    "batch", "v1", "jobs", "Job", "job", http_writable=True, validated=True, has_status=True,
    field_labels=frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
    immutable=("selector", "completionMode", "podFailurePolicy", "template"),
    mutable_when_suspended=("template",),
)
JOBSETS = Resource(
    "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", "jobset", http_writable=True,
    validated=True, has_status=True, immutable=("replicatedJobs",),
    mutable_when_suspended=("replicatedJobs",), strategic_merge=False,
)
PODS = Resource(
    "", "v1", "pods", "Pod", "pod", http_writable=False, validated=False, has_status=True,
    field_labels=frozenset({
        "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
        "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
        "status.podIP", "status.nominatedNodeName",
    }),
)
EVENTS = Resource(
    "", "v1", "events", "Event", "event", http_writable=False, validated=False, has_status=False,
    field_labels=frozenset({
        "metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
        "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
        "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
        "reportingComponent", "type",
    }),
)
RESOURCES: tuple[Resource, ...] = (JOBS, JOBSETS, PODS, EVENTS)


def resolve_resource(name: str | Resource) -> Resource:
    """Accept ``"jobs"``, ``"Job"``, ``"job"`` or a :class:`Resource` (for the Python API)."""
    if isinstance(name, Resource):
        return name
    wanted = name.lower()
    for res in RESOURCES:
        if wanted in (res.plural, res.singular, res.kind.lower()):
            return res
    raise ValueError(f"unknown resource {name!r}; served: {[r.plural for r in RESOURCES]}")


# --------------------------------------------------------------------------- errors


class KubeApiError(Exception):
    """An API failure, carried as the apiserver's ``Status`` object (HTTP and Python API alike)."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = dict(headers or {})

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(res: Resource, name: str, **extra: Any) -> Obj:
    return {"name": name, "group": res.group, "kind": res.plural, **extra}


def not_found(res: Resource, name: str) -> KubeApiError:
    return KubeApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> KubeApiError:
    return KubeApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                        _details(res, name))


def conflict(res: Resource, name: str, why: str = "the object has been modified; please apply "
             "your changes to the latest version and try again") -> KubeApiError:
    return KubeApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
                        _details(res, name))


# A problem that starts with a field path (``$.spec.x[0]["a/b"]: ...`` or ``spec.x: ...``).
_CAUSE_FIELD = re.compile(r'^\s*((?:\$|[A-Za-z_])(?:[\w.$-]|\[(?:\d+|"[^"]*")\])*)\s*:\s')


def invalid(res: Resource, name: str, problems: list[str]) -> KubeApiError:
    """422 Invalid, one cause per problem; ``field`` is the problem's leading path, written as
    the apiserver writes it (``spec.template...``, no ``$.``)."""
    causes = []
    for problem in problems:
        m = _CAUSE_FIELD.match(problem)
        cause = {"reason": "FieldValueInvalid", "message": problem}
        if m and m.group(1) != "$":
            cause["field"] = m.group(1).removeprefix("$.").removeprefix("$")
        causes.append(cause)
    message = f'{res.group_kind} "{name}" is invalid: ' + (
        problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")
    details = {"name": name, "group": res.group, "kind": res.kind, "causes": causes}
    return KubeApiError(422, "Invalid", message, details)


def bad_request(message: str) -> KubeApiError:
    return KubeApiError(400, "BadRequest", message)


_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType",
    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    return _REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")


# --------------------------------------------------------------------------- selectors


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
                raise ValueError(f'field label not supported: {m.group("key")}')
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
    def build(cls, res: Resource, namespace: str | None, label_selector: str | None = None,
              field_selector: str | None = None) -> Selection:
        try:
            return cls(res, namespace, LabelSelector(label_selector),
                       FieldSelector(field_selector, res.field_labels))
        except ValueError as exc:
            raise bad_request(str(exc)) from exc

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)


# --------------------------------------------------------------------------- patches


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
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath", "imagePullSecrets": "name",
    "ports": "containerPort", "conditions": "type", "ownerReferences": "uid",
    "containerStatuses": "name", "initContainerStatuses": "name",
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
        raise KubeApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media types "
                           f"include: {', '.join(accepted)}")
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
        raise KubeApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                           f"request: {exc}") from exc
    if not isinstance(result, dict):
        raise KubeApiError(422, "Invalid", "the patch did not produce an object")
    return result


# --------------------------------------------------------------------------- object helpers


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _rv_of(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def _spec_part(obj: Obj) -> Obj:
    """Everything that drives ``generation``: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _without_rv(obj: Obj) -> Obj:
    stripped = copy.deepcopy(obj)
    stripped.get("metadata", {}).pop("resourceVersion", None)
    return stripped


def apply_job_defaults(job: Obj) -> None:
    """A subset of the apiserver's Job defaulting (SetDefaults_Job + the strategy's
    selector/labels), so a simulator finds the same labels a real Job controller would set."""
    meta, spec = job["metadata"], job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return  # leave it to the validator to complain
    uid, name = meta["uid"], meta["name"]
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    if not spec.get("manualSelector"):
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        template = spec.setdefault("template", {})
        if isinstance(template, dict):
            tmeta = template.setdefault("metadata", {})
            labels = tmeta.setdefault("labels", {}) if isinstance(tmeta, dict) else None
            if isinstance(labels, dict):
                for key in JOB_UID_LABELS:
                    labels.setdefault(key, uid)
                for key in JOB_NAME_LABELS:
                    labels.setdefault(key, name)


def owned_pod_labels_match(owner_res: Resource, owner: Obj, pod: Obj) -> bool:
    """Does ``pod`` carry the labels its Job/JobSet controller would have put on it?"""
    meta = owner["metadata"]
    labels = pod.get("metadata", {}).get("labels") or {}
    if owner_res is JOBS:
        names, uids = JOB_NAME_LABELS, JOB_UID_LABELS
    elif owner_res is JOBSETS:
        names, uids = (JOBSET_NAME_LABEL,), (JOBSET_UID_LABEL,)
    else:
        return False
    if not any(labels.get(k) == meta["name"] for k in names):
        return False
    # A uid label, when present, must be this owner's: a recreated Job of the same name
    # must not take the previous incarnation's pods with it.
    return all(labels.get(k, meta["uid"]) == meta["uid"] for k in uids)


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


# --------------------------------------------------------------------------- store


@dataclass(frozen=True)
class WatchEvent:
    """One change in the store; ``old`` is the previous state for MODIFIED."""

    type: str  # ADDED | MODIFIED | DELETED
    resource: Resource
    object: Obj
    old: Obj | None
    resource_version: int

    def for_selection(self, sel: Selection) -> tuple[str, Obj] | None:
        """The event as a watcher with ``sel`` sees it: an object moving in or out of the
        selection is ADDED / DELETED for that watcher, as in the apiserver's watch cache."""
        if self.resource is not sel.resource:
            return None
        now = sel.matches(self.object)
        if self.type == "MODIFIED":
            before = sel.matches(self.old)
            if before and now:
                return "MODIFIED", self.object
            if now:
                return "ADDED", self.object
            if before:
                return "DELETED", self.object
            return None
        return (self.type, self.object) if now else None


class Expired(KubeApiError):
    """410: the requested resourceVersion is older than the retained watch history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(410, "Expired", f"too old resource version: {requested} ({oldest})")


def no_validation(obj: Obj) -> list[str]:
    """A validator that accepts everything, for tests that are not about validation."""
    return []


class KubeStore:
    """Thread-safe object storage with a global resourceVersion and a bounded change history.

    Writes follow the apiserver's optimistic loop (read, compute and validate outside the
    lock, commit only if nothing changed meanwhile), so a slow validator never blocks readers.
    """

    def __init__(self, validator: Validator | None = None, history_limit: int = 10_000) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._objects: dict[Resource, dict[tuple[str, str], Obj]] = {r: {} for r in RESOURCES}
        self._rv = 0
        self._history: deque[WatchEvent] = deque(maxlen=history_limit)
        self._floor = 0  # newest resourceVersion dropped from the history
        self._listeners: list[Listener] = []
        self._closed = False
        self._validator = validator
        self._validator_lock = threading.Lock()

    # -- validation -------------------------------------------------------------------

    def _validate(self, res: Resource, obj: Obj) -> None:
        if not res.validated:
            return
        validator = self._validator
        if validator is None:
            with self._validator_lock:
                if self._validator is None:
                    try:  # lazy: the validation module is optional for the double itself
                        from rlpipe.core.k8s_validation import validate_object
                    except ImportError as exc:
                        raise KubeApiError(500, "InternalError",
                                           f"no validator: rlpipe.core.k8s_validation unavailable ({exc})") from exc
                    self._validator = validate_object
                validator = self._validator
        problems = list(validator(copy.deepcopy(obj)))
        if problems:
            raise invalid(res, obj.get("metadata", {}).get("name", ""), problems)

    @staticmethod
    def _check_immutable(res: Resource, old: Obj, new: Obj) -> None:
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        suspended = bool(old_spec.get("suspend"))
        problems = []
        for key in res.immutable:
            if suspended and key in res.mutable_when_suspended:
                continue
            if old_spec.get(key) != new_spec.get(key):
                problems.append(f"spec.{key}: Invalid value: field is immutable")
        if problems:
            raise invalid(res, old["metadata"]["name"], problems)

    # -- listeners and history ----------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        with self._cond:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._cond:
            self._listeners.remove(listener)

    def _record(self, kind: str, res: Resource, obj: Obj, old: Obj | None) -> WatchEvent:
        """Append an event (caller holds the lock and has stamped obj's resourceVersion)."""
        if self._history.maxlen and len(self._history) == self._history.maxlen:
            self._floor = self._history[0].resource_version
        event = WatchEvent(kind, res, copy.deepcopy(obj), copy.deepcopy(old) if old else None, _rv_of(obj))
        self._history.append(event)
        return event

    def _publish(self, events: list[WatchEvent]) -> None:
        """Wake watchers and call listeners, outside the lock (listeners may write back)."""
        if not events:
            return
        with self._cond:
            self._cond.notify_all()
            listeners = list(self._listeners)
        for event in events:
            for listener in listeners:
                try:
                    listener(event)
                except Exception:
                    log.exception("kube_api listener %r failed on %s", listener, event.type)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    # -- reads -----------------------------------------------------------------------------

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        with self._cond:
            obj = self._objects[res].get((namespace, name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def list(self, sel: Selection) -> tuple[list[Obj], int]:
        """Matching objects sorted by (namespace, name), as etcd returns them, and the list rv."""
        with self._cond:
            items = [copy.deepcopy(o) for key, o in sorted(self._objects[sel.resource].items())
                     if sel.matches(o)]
            return items, self._rv

    # -- writes ----------------------------------------------------------------------------

    def create(self, res: Resource, namespace: str, body: Obj, *, keep_status: bool,
               dry_run: bool = False) -> Obj:
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        if obj["apiVersion"] != res.api_version or obj["kind"] != res.kind:
            raise bad_request(f"the API version/kind in the data ({obj['apiVersion']}/{obj['kind']}) does "
                              f"not match the expected {res.api_version}/{res.kind}")
        meta = _meta(obj)
        if meta.get("namespace", namespace) != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on "
                              "the request")
        generate = not meta.get("name") and meta.get("generateName")
        if not meta.get("name") and not generate:
            raise invalid(res, "", ["metadata.name: Required value: name or generateName is required"])
        for server_field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                             "generation", "resourceVersion", "selfLink", "managedFields"):
            meta.pop(server_field, None)
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
        if generate:
            meta["name"] = generate + uuid.uuid4().hex[:5]
        if res is JOBS:
            apply_job_defaults(obj)
        if not keep_status:  # the main resource never sets status; /status does
            obj.pop("status", None)
        if res is JOBS:
            obj.setdefault("status", {})  # as the apiserver stores an empty JobStatus
        self._validate(res, obj)
        if dry_run:
            meta["resourceVersion"] = ""
            return obj
        with self._cond:
            key = (namespace, meta["name"])
            if key in self._objects[res]:
                raise already_exists(res, meta["name"])
            meta["resourceVersion"] = self._next_rv()
            self._objects[res][key] = obj
            event = self._record("ADDED", res, obj, None)
            result = copy.deepcopy(obj)
        self._publish([event])
        return result

    def update(self, res: Resource, namespace: str, name: str, transform: Callable[[Obj], Obj], *,
               status_only: bool = False, keep_status: bool = False, dry_run: bool = False) -> Obj:
        """Guaranteed update: ``transform`` gets a private copy of the current object and returns
        the desired one (it may raise, e.g. for a stale resourceVersion); it is re-run if another
        writer commits in between. Server-owned metadata is always restored. ``status_only``
        takes only the status from the result (the /status subresource); otherwise the result's
        status is honoured only with ``keep_status`` (controllers), else the stored one stays."""
        for _ in range(100):
            current = self.get(res, namespace, name)
            desired = transform(copy.deepcopy(current))
            new = self._merge_server_fields(res, current, desired, status_only=status_only,
                                            keep_status=keep_status)
            if _without_rv(new) == _without_rv(current):
                return current  # a no-op write changes nothing, not even resourceVersion
            if not status_only:
                self._check_immutable(res, current, new)
            if _spec_part(new) != _spec_part(current):
                new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
            self._validate(res, new)
            if dry_run:
                return new
            events: list[WatchEvent] = []
            with self._cond:
                stored = self._objects[res].get((namespace, name))
                if stored is None:
                    raise not_found(res, name)
                if stored["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                    continue  # someone wrote meanwhile: recompute from the new state
                new["metadata"]["resourceVersion"] = self._next_rv()
                meta = new["metadata"]
                if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                    del self._objects[res][(namespace, name)]  # last finalizer removed
                    events.append(self._record("DELETED", res, new, None))
                else:
                    self._objects[res][(namespace, name)] = new
                    events.append(self._record("MODIFIED", res, new, stored))
                result = copy.deepcopy(new)
            self._publish(events)
            return result
        raise conflict(res, name, "too many concurrent writers")

    @staticmethod
    def _merge_server_fields(res: Resource, current: Obj, desired: Obj, *, status_only: bool,
                             keep_status: bool) -> Obj:
        if not isinstance(desired, dict):
            raise bad_request("the object must be a JSON object")
        if status_only:
            new = copy.deepcopy(current)
            if "status" in desired:
                new["status"] = copy.deepcopy(desired["status"])
            else:
                new.pop("status", None)
            return new
        new = copy.deepcopy(desired)
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        if new["apiVersion"] != res.api_version or new["kind"] != res.kind:
            raise bad_request(f"apiVersion/kind must stay {res.api_version}/{res.kind}")
        meta, old_meta = _meta(new), current["metadata"]
        if meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise bad_request("the name of the object does not match the name on the URL")
        if meta.get("namespace", old_meta["namespace"]) != old_meta["namespace"]:
            raise bad_request("the namespace of the object does not match the namespace on the URL")
        for key in ("name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion",
                    "deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if not keep_status:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        return new

    def delete(self, res: Resource, namespace: str, name: str, *, propagation: str | None,
               precondition_uid: str | None = None, precondition_rv: str | None = None,
               dry_run: bool = False) -> tuple[Obj, bool]:
        """Delete one object; returns (object, gone). ``gone`` is False when finalizers hold it
        (then it carries a deletionTimestamp until an update removes the last finalizer)."""
        policy = propagation or ("Orphan" if res is JOBS else "Background")  # batch/v1 Jobs orphan by default
        if policy not in ("Orphan", "Background", "Foreground"):
            raise bad_request(f"propagationPolicy: Unsupported value: {policy!r}")
        with self._cond:
            stored = self._objects[res].get((namespace, name))
            if stored is None:
                raise not_found(res, name)
            meta = stored["metadata"]
            if precondition_uid and precondition_uid != meta["uid"]:
                raise conflict(res, name, f"Precondition failed: UID in precondition: {precondition_uid}, "
                               f"UID in object meta: {meta['uid']}")
            if precondition_rv and precondition_rv != meta["resourceVersion"]:
                raise conflict(res, name, "Precondition failed: ResourceVersion in precondition: "
                               f"{precondition_rv}, ResourceVersion in object meta: {meta['resourceVersion']}")
            if dry_run:
                return copy.deepcopy(stored), True
            events: list[WatchEvent] = []
            obj, gone = self._delete_locked(res, namespace, name, policy, events)
        self._publish(events)
        return obj, gone

    def _delete_locked(self, res: Resource, namespace: str, name: str, policy: str,
                       events: list[WatchEvent]) -> tuple[Obj, bool]:
        stored = self._objects[res][(namespace, name)]
        # Approximation: the garbage collector's work (foreground or background) is done at once,
        # dependents first; Orphan drops the ownerReferences to this owner from dependents.
        for dep_res, dep in self._dependents(res, stored):
            dep_key = (dep["metadata"]["namespace"], dep["metadata"]["name"])
            if dep_key not in self._objects[dep_res]:
                continue  # already removed through another path
            if policy == "Orphan":
                if _owned_by(dep, stored["metadata"]["uid"]):
                    old = copy.deepcopy(dep)
                    refs = [r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != stored["metadata"]["uid"]]
                    if refs:
                        dep["metadata"]["ownerReferences"] = refs
                    else:
                        del dep["metadata"]["ownerReferences"]
                    dep["metadata"]["resourceVersion"] = self._next_rv()
                    events.append(self._record("MODIFIED", dep_res, dep, old))
            else:
                self._delete_locked(dep_res, *dep_key, "Background", events)
        meta = stored["metadata"]
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                old = copy.deepcopy(stored)
                meta["deletionTimestamp"] = now_rfc3339()
                meta["deletionGracePeriodSeconds"] = 0
                meta["resourceVersion"] = self._next_rv()
                events.append(self._record("MODIFIED", res, stored, old))
            return copy.deepcopy(stored), False
        del self._objects[res][(namespace, name)]
        meta["resourceVersion"] = self._next_rv()
        events.append(self._record("DELETED", res, stored, None))
        return copy.deepcopy(stored), True

    def _dependents(self, res: Resource, owner: Obj) -> list[tuple[Resource, Obj]]:
        """Objects the garbage collector would remove with ``owner``: those with an
        ownerReference to it, and pods (and for JobSets, Jobs) labelled as its children."""
        namespace, uid = owner["metadata"]["namespace"], owner["metadata"]["uid"]
        found = []
        for dep_res in (JOBS, PODS):
            for (ns, _), obj in sorted(self._objects[dep_res].items()):
                if ns != namespace or obj is owner:
                    continue
                labelled = (dep_res is PODS or res is JOBSETS) and owned_pod_labels_match(res, owner, obj)
                if _owned_by(obj, uid) or labelled:
                    found.append((dep_res, obj))
        return found

    def delete_collection(self, sel: Selection, *, propagation: str | None,
                          dry_run: bool = False) -> tuple[list[Obj], int]:
        items, _ = self.list(sel)
        deleted = []
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(KubeApiError):  # gone meanwhile (e.g. a cascade)
                obj, _gone = self.delete(sel.resource, meta["namespace"], meta["name"], propagation=propagation,
                                         precondition_uid=meta["uid"], dry_run=dry_run)
                deleted.append(obj)
        return deleted, self.resource_version

    # -- watch -----------------------------------------------------------------------------

    def open_watch(self, sel: Selection, since: int | None) -> tuple[list[tuple[str, Obj]], int]:
        """Initial events and the cursor to continue from. ``since`` None/0 means "now", with a
        synthetic ADDED per existing object; else events after ``since`` (410 if forgotten)."""
        with self._cond:
            if not since:
                items = [("ADDED", copy.deepcopy(o)) for _, o in sorted(self._objects[sel.resource].items())
                         if sel.matches(o)]
                return items, self._rv
            if since < self._floor:
                raise Expired(since, self._floor)
            return [], since

    def wait_events(self, sel: Selection, cursor: int, timeout: float) -> tuple[list[tuple[str, Obj]], int]:
        """Events for ``sel`` after ``cursor``, waiting up to ``timeout`` for the first one."""
        with self._cond:
            if self._rv <= cursor and not self._closed:
                self._cond.wait(timeout)
            if cursor < self._floor:
                raise Expired(cursor, self._floor)
            fresh = []
            for event in reversed(self._history):
                if event.resource_version <= cursor:
                    break
                fresh.append(event)
            out = [seen for event in reversed(fresh) if (seen := event.for_selection(sel))]
            return out, max(cursor, self._rv)

    def close(self) -> None:
        """End all watches (the server is stopping); the objects stay."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def reopen(self) -> None:
        with self._cond:
            self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed


# --------------------------------------------------------------------------- faults and log


@dataclass
class Fault:
    """Fail the next ``remaining`` matching HTTP requests with ``status``."""

    status: int
    remaining: int
    retry_after: float | None = None
    message: str | None = None
    method: str | None = None
    path: re.Pattern[str] | None = None

    def applies(self, method: str, path: str) -> bool:
        return (self.remaining > 0 and (self.method is None or self.method == method)
                and (self.path is None or bool(self.path.search(path))))

    def error(self) -> KubeApiError:
        headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after is not None else {}
        details = {"retryAfterSeconds": int(self.retry_after)} if self.retry_after is not None else None
        message = self.message or f"injected fault: {HTTPStatus(self.status).phrase}"
        return KubeApiError(self.status, reason_for(self.status), message, details, headers)


@dataclass(frozen=True)
class RequestRecord:
    """One HTTP request as the server saw it (query values: the last one given)."""

    method: str
    path: str
    query: dict[str, str]
    status: int
    content_type: str | None = None
    body: Any = None
    time: float = field(default_factory=time.time)


# --------------------------------------------------------------------------- HTTP


_NAMESPACED = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)
_TRUE = ("true", "1")


@dataclass(frozen=True)
class _Route:
    resource: Resource
    namespace: str | None
    name: str | None
    sub: str | None


def _route(path: str) -> _Route | None:
    m = _NAMESPACED.match(path)
    if not m:
        return None
    group, version = ("", m["core"]) if m["core"] else (m["group"], m["version"])
    for res in RESOURCES:
        if (res.group, res.version, res.plural) == (group, version, m["plural"]):
            if m["name"] and not m["ns"]:
                return None  # namespaced objects are only addressable inside a namespace
            return _Route(res, m["ns"], m["name"], m["sub"])
    return None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api: KubeApiServer) -> None:
        self.api = api
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Cut keep-alive connections so idle handler threads end with the server."""
        with self.connections_lock:
            connections = list(self.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: avoid 40 ms delayed-ACK stalls
    server: _HTTPServer
    server_version = "rlpipe-kube-api-double"

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.api.verbose:
            super().log_message(format, *args)

    # -- plumbing --------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(self, code: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self) -> None:
        api = self.server.api
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        content_type = self.headers.get("Content-Type")
        raw = self._read_body()
        body: Any = None
        status = 500
        try:
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError as exc:
                    raise bad_request(f"the request body is not valid JSON: {exc}") from exc
            fault = api._take_fault(self.command, path)
            if fault is not None:
                raise fault
            status = self._handle(path, query, body, content_type)
        except KubeApiError as exc:
            status = exc.code
            self._send_json(exc.code, exc.status(), exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            log.exception("kube_api: %s %s failed", self.command, self.path)
            status = 500
            self._send_json(500, KubeApiError(500, "InternalError", f"{type(exc).__name__}: {exc}").status())
        finally:
            api._log_request(RequestRecord(self.command, path, query, status, content_type, body))

    # -- routing ---------------------------------------------------------------------------

    def _handle(self, path: str, query: dict[str, str], body: Any, content_type: str | None) -> int:
        if self.command == "GET" and path in _discovery_paths():
            payload = _discovery_paths()[path]
            if isinstance(payload, str):
                data = payload.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._send_json(200, payload)
            return 200
        route = _route(path)
        if route is None:
            raise KubeApiError(404, "NotFound", "the server could not find the requested resource")
        res, store = route.resource, self.server.api.store
        if res is PODS and route.sub == "log" and route.name and self.command == "GET":
            return self._pod_log(route.namespace or "default", route.name)
        if route.sub is not None and (route.sub != "status" or not res.has_status):
            raise KubeApiError(404, "NotFound", "the server could not find the requested resource")
        dry_run = query.get("dryRun") == "All"
        method = self.command
        if method != "GET" and not res.http_writable:
            raise KubeApiError(405, "MethodNotAllowed",
                               f"{res.plural} are read-only in this API double (the simulator writes them)")
        if route.name is None:
            return self._handle_collection(route, query, body, dry_run)
        ns, name = route.namespace or "default", route.name
        status_only = route.sub == "status"
        if method == "GET":
            self._send_json(200, store.get(res, ns, name))
            return 200
        if method == "PUT":
            obj = self._object_body(body)
            expected = obj.get("metadata", {}).get("resourceVersion")

            def replace(current: Obj) -> Obj:
                if expected and expected != current["metadata"]["resourceVersion"]:
                    raise conflict(res, name)
                return obj

            self._send_json(200, store.update(res, ns, name, replace, status_only=status_only, dry_run=dry_run))
            return 200
        if method == "PATCH":
            if body is None:
                raise bad_request("the patch body is empty")
            media = content_type or MERGE_PATCH

            def patch(current: Obj) -> Obj:
                before = current["metadata"]["resourceVersion"]
                patched = apply_patch(res, current, body, media)
                after = patched.get("metadata", {}).get("resourceVersion")
                if after and after != before:  # a resourceVersion in a patch is a precondition
                    raise conflict(res, name)
                return patched

            self._send_json(200, store.update(res, ns, name, patch, status_only=status_only, dry_run=dry_run))
            return 200
        if method == "DELETE":
            if status_only:
                raise KubeApiError(405, "MethodNotAllowed", "DELETE is not allowed on the status subresource")
            options = self._delete_options(query, body)
            pre = options.get("preconditions") or {}
            obj, gone = store.delete(res, ns, name, propagation=options.get("propagationPolicy"),
                                     precondition_uid=pre.get("uid"), precondition_rv=pre.get("resourceVersion"),
                                     dry_run=dry_run)
            # The apiserver answers 202 only for an object still held by finalizers after an
            # explicit orphanDependents=false; the client maps nothing but 200 for custom objects.
            code = 202 if not gone and options.get("orphanDependents") is False else 200
            if res is JOBSETS or not gone:
                # Custom resources return the deleted object; anything held by finalizers
                # is returned as it now is.
                self._send_json(code, obj)
            else:
                self._send_json(code, {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": _details(res, name, uid=obj["metadata"]["uid"]),
                })
            return code
        raise KubeApiError(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    def _handle_collection(self, route: _Route, query: dict[str, str], body: Any, dry_run: bool) -> int:
        res, store = route.resource, self.server.api.store
        sel = Selection.build(res, route.namespace, query.get("labelSelector"), query.get("fieldSelector"))
        if self.command == "GET":
            if query.get("watch", "").lower() in _TRUE:
                return self._watch(sel, query)
            items, rv = store.list(sel)
            self._send_json(200, _list_page(res, items, rv, query))
            return 200
        if route.namespace is None:
            raise KubeApiError(405, "MethodNotAllowed", f"{self.command} needs a namespace")
        if self.command == "POST":
            created = store.create(res, route.namespace, self._object_body(body), keep_status=False,
                                   dry_run=dry_run)
            self._send_json(201, created)
            return 201
        if self.command == "DELETE":
            options = self._delete_options(query, body)
            deleted, rv = store.delete_collection(sel, propagation=options.get("propagationPolicy"),
                                                  dry_run=dry_run)
            self._send_json(200, _list_body(res, deleted, rv))  # the apiserver returns the deleted items
            return 200
        raise KubeApiError(405, "MethodNotAllowed", f"{self.command} is not supported on a collection")

    @staticmethod
    def _object_body(body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        return body

    @staticmethod
    def _delete_options(query: dict[str, str], body: Any) -> Obj:
        """DeleteOptions from the body, falling back to query parameters field by field."""
        options = dict(body) if isinstance(body, dict) else {}
        if "propagationPolicy" not in options and "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if options.get("orphanDependents") is not None and "propagationPolicy" not in options:
            options["propagationPolicy"] = "Orphan" if options["orphanDependents"] else "Background"
        if "orphanDependents" in query and "propagationPolicy" not in options:
            options["propagationPolicy"] = "Orphan" if query["orphanDependents"] in _TRUE else "Background"
        return options

    def _pod_log(self, namespace: str, name: str) -> int:
        self.server.api.store.get(PODS, namespace, name)  # 404 for an unknown pod
        data = self.server.api.pod_log(name, namespace=namespace).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return 200

    # -- watch -----------------------------------------------------------------------------

    def _chunk(self, payload: Obj) -> None:
        data = json.dumps(payload).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        with contextlib.suppress(OSError, ValueError):
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        return False

    def _watch(self, sel: Selection, query: dict[str, str]) -> int:
        store, api = self.server.api.store, self.server.api
        try:
            timeout = float(query.get("timeoutSeconds") or 0)
            since = int(query.get("resourceVersion") or 0)
        except ValueError as exc:
            raise bad_request(f"invalid watch parameter: {exc}") from exc
        deadline = time.monotonic() + timeout if timeout > 0 else None
        try:
            initial, cursor = store.open_watch(sel, since)
            expired: Expired | None = None
        except Expired as exc:
            initial, cursor, expired = [], since, exc
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with api.watch_lock:
            api.active_watches += 1
        try:
            for kind, obj in initial:
                self._chunk({"type": kind, "object": obj})
            while expired is None and not store.closed and not api.stopping:
                wait = 0.1
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    wait = min(wait, remaining)
                if self._client_gone():
                    return 200
                try:
                    events, cursor = store.wait_events(sel, cursor, wait)
                except Expired as exc:
                    expired = exc
                    break
                for kind, obj in events:
                    self._chunk({"type": kind, "object": obj})
            if expired is not None:  # the apiserver reports this inside a 200 stream
                self._chunk({"type": "ERROR", "object": expired.status()})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client went away
        finally:
            with api.watch_lock:
                api.active_watches -= 1
        return 200


def _list_body(res: Resource, items: list[Obj], rv: int, cont: str | None = None,
               remaining: int | None = None) -> Obj:
    meta: Obj = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
        if remaining is not None:
            meta["remainingItemCount"] = remaining
    return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}


def _list_page(res: Resource, items: list[Obj], rv: int, query: dict[str, str]) -> Obj:
    """``limit``/``continue`` paging. Approximation: a continued page reads the current state,
    not the snapshot of the first page."""
    start = 0
    if query.get("continue"):
        try:
            token = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
            after = (token["ns"], token["name"])
        except (ValueError, KeyError, TypeError) as exc:
            raise bad_request("invalid continue token") from exc
        keys = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]
        start = next((i for i, key in enumerate(keys) if key > after), len(items))
    limit = int(query.get("limit") or 0)
    if limit <= 0 or start + limit >= len(items):
        return _list_body(res, items[start:], rv)
    page = items[start:start + limit]
    last = page[-1]["metadata"]
    token = base64.urlsafe_b64encode(json.dumps({"ns": last["namespace"], "name": last["name"]}).encode())
    return _list_body(res, page, rv, token.decode(), len(items) - start - limit)


def _api_resource_list(group_version: str, resources: list[Resource]) -> Obj:
    out = []
    for res in resources:
        verbs = (["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
                 if res.http_writable else ["get", "list", "watch"])
        out.append({"name": res.plural, "singularName": res.singular, "namespaced": True,
                    "kind": res.kind, "verbs": verbs})
        if res.has_status:
            out.append({"name": f"{res.plural}/status", "singularName": "", "namespaced": True,
                        "kind": res.kind, "verbs": ["get", "patch", "update"] if res.http_writable else ["get"]})
        if res is PODS:
            out.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": out}


def _api_group(group: str, version: str) -> Obj:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


@functools.cache
def _discovery_paths() -> dict[str, Obj | str]:
    """Enough discovery for clients that look before they leap (kubectl, dynamic clients)."""
    groups = [_api_group("batch", "v1"), _api_group("jobset.x-k8s.io", "v1alpha2")]
    return {
        "/version": SERVER_VERSION,
        "/healthz": "ok", "/livez": "ok", "/readyz": "ok",
        "/api": {"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"],
                 "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups},
        "/apis/batch": {"kind": "APIGroup", "apiVersion": "v1", **groups[0]},
        "/apis/jobset.x-k8s.io": {"kind": "APIGroup", "apiVersion": "v1", **groups[1]},
        "/api/v1": _api_resource_list("v1", [PODS, EVENTS]),
        "/apis/batch/v1": _api_resource_list("batch/v1", [JOBS]),
        "/apis/jobset.x-k8s.io/v1alpha2": _api_resource_list("jobset.x-k8s.io/v1alpha2", [JOBSETS]),
    }


# --------------------------------------------------------------------------- public API


class KubeApiServer:
    """The API double: an HTTP server for the real ``kubernetes`` client plus a Python API
    through which a simulator (or a test) plays the controllers' part.

    Python-API writes set server metadata, bump resourceVersion and emit watch events exactly
    like HTTP writes; they skip fault injection and the request log, and may write ``status``
    and the read-only kinds (pods, events).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, validator: Validator | None = None,
                 history_limit: int = 10_000, request_log_limit: int = 10_000, verbose: bool = False) -> None:
        """``validator`` defaults to ``rlpipe.core.k8s_validation.validate_object`` (imported on first
        use); pass :func:`no_validation` to accept everything. ``history_limit`` bounds the watch
        history (older resourceVersions get 410 Expired); ``request_log_limit`` the request log."""
        self.store = KubeStore(validator, history_limit)
        self.verbose = verbose
        self._address = (host, port)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._faults: list[Fault] = []
        self._requests: deque[RequestRecord] = deque(maxlen=request_log_limit)
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str], str] = {}
        self.stopping = False
        self.watch_lock = threading.Lock()
        self.active_watches = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> KubeApiServer:
        if self._httpd is not None:
            return self
        self.stopping = False
        self.store.reopen()
        self._httpd = _HTTPServer(self._address, self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="kube-api-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: open watches end cleanly, keep-alive connections are cut."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.stopping = True
        self.store.close()
        # Let open watches write their terminating chunk before connections are cut.
        deadline = time.monotonic() + 3
        while self.active_watches and time.monotonic() < deadline:
            time.sleep(0.01)
        httpd.shutdown()
        httpd.drop_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the API double is not running; call start()")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # -- client helpers ----------------------------------------------------------------------

    def configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` pointing at this server."""
        from kubernetes import client  # lazy: keeps this module importable without the client

        config = client.Configuration(host=self.url)
        config.verify_ssl = False
        return config

    def api_client(self) -> Any:
        from kubernetes import client

        return client.ApiClient(self.configuration())

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write a kubeconfig (JSON is YAML) so code that loads ``KUBECONFIG`` finds this server."""
        path = Path(path)
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "rlpipe-local",
            "clusters": [{"name": "rlpipe-local", "cluster": {"server": self.url}}],
            "users": [{"name": "rlpipe-local", "user": {"token": "rlpipe-local-not-a-secret"}}],
            "contexts": [{"name": "rlpipe-local", "context": {"cluster": "rlpipe-local", "user": "rlpipe-local",
                                                             "namespace": namespace}}],
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    # -- objects (Python API) ------------------------------------------------------------------

    def create(self, resource: str | Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        """Create as the apiserver would, but keep ``status`` if given (controllers' privilege)."""
        ns = namespace or obj.get("metadata", {}).get("namespace") or "default"
        return self.store.create(resolve_resource(resource), ns, obj, keep_status=True)

    def get(self, resource: str | Resource, name: str, *, namespace: str = "default") -> Obj:
        return self.store.get(resolve_resource(resource), namespace, name)

    def find(self, resource: str | Resource, name: str, *, namespace: str = "default") -> Obj | None:
        """Like :meth:`get`, but None instead of NotFound."""
        try:
            return self.get(resource, name, namespace=namespace)
        except KubeApiError as exc:
            if exc.code == 404:
                return None
            raise

    def list(self, resource: str | Resource, *, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None) -> list[Obj]:
        """Matching objects; ``namespace=None`` lists all namespaces."""
        sel = Selection.build(resolve_resource(resource), namespace, label_selector, field_selector)
        return self.store.list(sel)[0]

    def update(self, resource: str | Resource, obj: Obj, *, namespace: str | None = None) -> Obj:
        """Replace the whole object, status included. A ``metadata.resourceVersion`` in ``obj``
        is a precondition (409 Conflict when stale); without one the write is unconditional."""
        res = resolve_resource(resource)
        meta = obj.get("metadata", {})
        ns, name, expected = namespace or meta.get("namespace") or "default", meta.get("name"), meta.get("resourceVersion")
        if not name:
            raise bad_request("metadata.name is required")

        def replace(current: Obj) -> Obj:
            if expected and expected != current["metadata"]["resourceVersion"]:
                raise conflict(res, name)
            return obj

        return self.store.update(res, ns, name, replace, keep_status=True)

    def modify(self, resource: str | Resource, name: str, mutate: Callable[[Obj], None], *,
               namespace: str = "default") -> Obj:
        """Read-modify-write without conflicts: ``mutate`` edits a copy in place and is re-run
        if another writer got in between. Status edits are kept."""
        def apply(current: Obj) -> Obj:
            mutate(current)
            return current

        return self.store.update(resolve_resource(resource), namespace, name, apply, keep_status=True)

    def patch(self, resource: str | Resource, name: str, patch: Any, *, namespace: str = "default",
              patch_type: str = "merge") -> Obj:
        """Patch like a client would (status untouched); ``patch_type``: merge | strategic | json."""
        res = resolve_resource(resource)
        media = PATCH_TYPES[patch_type]
        return self.store.update(res, namespace, name, lambda cur: apply_patch(res, cur, patch, media))

    def patch_status(self, resource: str | Resource, name: str, status: Obj, *,
                     namespace: str = "default") -> Obj:
        """Merge-patch ``status`` (the status fields themselves, not ``{"status": ...}``)."""
        res = resolve_resource(resource)
        return self.store.update(res, namespace, name, lambda cur: merge_patch(cur, {"status": status}),
                                 status_only=True)

    def delete(self, resource: str | Resource, name: str, *, namespace: str = "default",
               propagation_policy: str | None = None) -> Obj:
        """Delete one object (cascading per ``propagation_policy``; Jobs default to Orphan like
        batch/v1). Returns the object; it still exists if finalizers hold it."""
        return self.store.delete(resolve_resource(resource), namespace, name, propagation=propagation_policy)[0]

    def delete_collection(self, resource: str | Resource, *, namespace: str | None = None,
                          label_selector: str | None = None, field_selector: str | None = None,
                          propagation_policy: str | None = None) -> list[Obj]:
        sel = Selection.build(resolve_resource(resource), namespace, label_selector, field_selector)
        return self.store.delete_collection(sel, propagation=propagation_policy)[0]

    def set_pod_log(self, name: str, text: str, *, namespace: str = "default") -> None:
        """What ``GET .../pods/{name}/log`` answers (the simulator writes a container's output)."""
        with self._lock:
            self._logs[(namespace, name)] = text

    def pod_log(self, name: str, *, namespace: str = "default") -> str:
        with self._lock:
            return self._logs.get((namespace, name), "")

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` after every change (in the writer's thread, outside locks)."""
        self.store.add_listener(listener)

    def remove_listener(self, listener: Listener) -> None:
        self.store.remove_listener(listener)

    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    # -- faults and request log ---------------------------------------------------------------

    def inject_fault(self, status: int = 503, *, count: int = 1, retry_after: float | None = None,
                     message: str | None = None, method: str | None = None, path: str | None = None) -> None:
        """Fail the next ``count`` HTTP requests (optionally only ``method`` and/or paths matching
        the regex ``path``) with ``status`` and a ``Status`` body; ``retry_after`` adds the header."""
        if not 400 <= status <= 599:
            raise ValueError("a fault needs an HTTP error status (4xx/5xx)")
        fault = Fault(status, count, retry_after, message, method.upper() if method else None,
                      re.compile(path) if path else None)
        with self._lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def pending_faults(self) -> int:
        with self._lock:
            return sum(f.remaining for f in self._faults)

    def _take_fault(self, method: str, path: str) -> KubeApiError | None:
        with self._lock:
            for fault in self._faults:
                if fault.applies(method, path):
                    fault.remaining -= 1
                    self._faults = [f for f in self._faults if f.remaining > 0]
                    return fault.error()
        return None

    def _log_request(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    @property
    def requests(self) -> list[RequestRecord]:
        """The HTTP requests so far (the newest ``request_log_limit``), oldest first; a copy."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()


def iter_watch(server: KubeApiServer, resource: str | Resource, *, namespace: str | None = None,
               label_selector: str | None = None, since: int | None = None,
               timeout: float = 1.0) -> Iterator[tuple[str, Obj]]:
    """In-process watch (no HTTP) for a simulator: yields (type, object) until ``timeout``
    seconds pass without a change or the server stops."""
    sel = Selection.build(resolve_resource(resource), namespace, label_selector)
    initial, cursor = server.store.open_watch(sel, since)
    yield from initial
    while not server.store.closed:
        events, cursor = server.store.wait_events(sel, cursor, timeout)
        if not events:
            return
        yield from events


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlpipe.local.kube_api",
                                     description="Serve the Kubernetes API double until Ctrl-C.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--no-validate", action="store_true", help="accept any object (no schema checks)")
    parser.add_argument("--kubeconfig", help="also write a kubeconfig pointing at the server here")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    server = KubeApiServer(args.host, args.port, validator=no_validation if args.no_validate else None,
                           verbose=args.verbose)
    done = threading.Event()
    # SIGTERM (how a process supervisor or the local stack stops it) ends as cleanly as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with server:
        if args.kubeconfig:
            server.write_kubeconfig(args.kubeconfig)
        print(f"Kubernetes API double (simulated, not a real cluster) serving at {server.url}", flush=True)
        try:
            while not done.wait(0.25):
                pass
        except KeyboardInterrupt:
            pass
        print("stopping", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
