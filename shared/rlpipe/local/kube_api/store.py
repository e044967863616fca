"""The object store: resourceVersions, create/get/list/update/delete, generateName, validation
on write, finalizers and garbage collection, and the change history that watches read."""

from __future__ import annotations

import builtins
import contextlib
import copy
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable

from .errors import KubeApiError, already_exists, bad_request, conflict, invalid, not_found
from .objects import (
    _meta,
    _owned_by,
    _rv_of,
    _spec_part,
    _without_rv,
    apply_job_defaults,
    now_rfc3339,
    owned_pod_labels_match,
)
from .resources import FOREGROUND_FINALIZER, JOBS, JOBSETS, PODS, RESOURCES, WORKLOADS, Obj, Resource
from .selectors import Selection
from .watch import Expired, Listener, WatchEvent

log = logging.getLogger(__name__)

Validator = Callable[[Obj], list[str]]


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
                        from rlpipe.local.kube_api.validation import validate_object
                    except ImportError as exc:
                        raise KubeApiError(
                            500,
                            "InternalError",
                            f"no validator: rlpipe.local.kube_api.validation unavailable ({exc})",
                        ) from exc
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
            items = [
                copy.deepcopy(o) for key, o in sorted(self._objects[sel.resource].items()) if sel.matches(o)
            ]
            return items, self._rv

    # -- writes ----------------------------------------------------------------------------

    def create(
        self, res: Resource, namespace: str, body: Obj, *, keep_status: bool, dry_run: bool = False
    ) -> Obj:
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
        if obj["apiVersion"] != res.api_version or obj["kind"] != res.kind:
            raise bad_request(
                f"the API version/kind in the data ({obj['apiVersion']}/{obj['kind']}) does "
                f"not match the expected {res.api_version}/{res.kind}"
            )
        meta = _meta(obj)
        if meta.get("namespace", namespace) != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        generate = not meta.get("name") and meta.get("generateName")
        if not meta.get("name") and not generate:
            raise invalid(res, "", ["metadata.name: Required value: name or generateName is required"])
        for server_field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
            "selfLink",
            "managedFields",
        ):
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

    def update(
        self,
        res: Resource,
        namespace: str,
        name: str,
        transform: Callable[[Obj], Obj],
        *,
        status_only: bool = False,
        keep_status: bool = False,
        dry_run: bool = False,
    ) -> Obj:
        """Guaranteed update: ``transform`` gets a private copy of the current object and returns
        the desired one (it may raise, e.g. for a stale resourceVersion); it is re-run if another
        writer commits in between. Server-owned metadata is always restored. ``status_only``
        takes only the status from the result (the /status subresource); otherwise the result's
        status is honoured only with ``keep_status`` (controllers), else the stored one stays."""
        for _ in range(100):
            current = self.get(res, namespace, name)
            desired = transform(copy.deepcopy(current))
            new = self._merge_server_fields(
                res, current, desired, status_only=status_only, keep_status=keep_status
            )
            if _without_rv(new) == _without_rv(current):
                return current  # a no-op write changes nothing, not even resourceVersion
            if not status_only:
                self._check_immutable(res, current, new)
            if _spec_part(new) != _spec_part(current):
                new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
            self._validate(res, new)
            if dry_run:
                return new
            events: builtins.list[WatchEvent] = []
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
                    self._release_foreground(events)
                else:
                    self._objects[res][(namespace, name)] = new
                    events.append(self._record("MODIFIED", res, new, stored))
                result = copy.deepcopy(new)
            self._publish(events)
            return result
        raise conflict(res, name, "too many concurrent writers")

    @staticmethod
    def _merge_server_fields(
        res: Resource, current: Obj, desired: Obj, *, status_only: bool, keep_status: bool
    ) -> Obj:
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
        for key in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
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

    def delete(
        self,
        res: Resource,
        namespace: str,
        name: str,
        *,
        propagation: str | None,
        precondition_uid: str | None = None,
        precondition_rv: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
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
                raise conflict(
                    res,
                    name,
                    f"Precondition failed: UID in precondition: {precondition_uid}, "
                    f"UID in object meta: {meta['uid']}",
                )
            if precondition_rv and precondition_rv != meta["resourceVersion"]:
                raise conflict(
                    res,
                    name,
                    "Precondition failed: ResourceVersion in precondition: "
                    f"{precondition_rv}, ResourceVersion in object meta: {meta['resourceVersion']}",
                )
            if dry_run:
                return copy.deepcopy(stored), True
            events: builtins.list[WatchEvent] = []
            obj, gone = self._delete_locked(res, namespace, name, policy, events)
            self._release_foreground(events)
        self._publish(events)
        return obj, gone

    def _delete_locked(
        self, res: Resource, namespace: str, name: str, policy: str, events: builtins.list[WatchEvent]
    ) -> tuple[Obj, bool]:
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
                    refs = [
                        r
                        for r in dep["metadata"]["ownerReferences"]
                        if r.get("uid") != stored["metadata"]["uid"]
                    ]
                    if refs:
                        dep["metadata"]["ownerReferences"] = refs
                    else:
                        del dep["metadata"]["ownerReferences"]
                    dep["metadata"]["resourceVersion"] = self._next_rv()
                    events.append(self._record("MODIFIED", dep_res, dep, old))
            else:
                self._delete_locked(dep_res, *dep_key, "Background", events)
        meta = stored["metadata"]
        held = [d for r, d in self._dependents(res, stored) if self._exists(r, d)]
        if policy == "Foreground" and held and FOREGROUND_FINALIZER not in (meta.get("finalizers") or []):
            # The owner stays, with a deletionTimestamp, until its dependents are gone
            # (dependents still terminating are held by their own finalizers).
            meta["finalizers"] = [*(meta.get("finalizers") or []), FOREGROUND_FINALIZER]
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

    def _exists(self, res: Resource, obj: Obj) -> bool:
        return (obj["metadata"]["namespace"], obj["metadata"]["name"]) in self._objects[res]

    def _release_foreground(self, events: builtins.list[WatchEvent]) -> None:
        """Owners held for a foreground deletion go once their last dependent is gone (and up the
        chain: a JobSet waits for its Jobs, which wait for their pods). Caller holds the lock."""
        released = True
        while released:
            released = False
            for res in (JOBSETS, JOBS):
                for key, owner in sorted(self._objects[res].items()):
                    meta = owner["metadata"]
                    if FOREGROUND_FINALIZER not in (meta.get("finalizers") or []):
                        continue
                    if any(self._exists(r, d) for r, d in self._dependents(res, owner)):
                        continue
                    old = copy.deepcopy(owner)
                    meta["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND_FINALIZER]
                    meta["resourceVersion"] = self._next_rv()
                    if meta["finalizers"]:
                        events.append(self._record("MODIFIED", res, owner, old))
                    else:
                        del meta["finalizers"]
                        del self._objects[res][key]
                        events.append(self._record("DELETED", res, owner, None))
                    released = True

    def _dependents(self, res: Resource, owner: Obj) -> builtins.list[tuple[Resource, Obj]]:
        """Objects the garbage collector would remove with ``owner``: those with an
        ownerReference to it, and pods (and for JobSets, Jobs) labelled as its children."""
        namespace, uid = owner["metadata"]["namespace"], owner["metadata"]["uid"]
        found = []
        for dep_res in (JOBS, PODS, WORKLOADS):
            for (ns, _), obj in sorted(self._objects[dep_res].items()):
                if ns != namespace or obj is owner:
                    continue
                labelled = (dep_res is PODS or res is JOBSETS) and owned_pod_labels_match(res, owner, obj)
                if _owned_by(obj, uid) or labelled:
                    found.append((dep_res, obj))
        return found

    def delete_collection(
        self, sel: Selection, *, propagation: str | None, dry_run: bool = False
    ) -> tuple[builtins.list[Obj], int]:
        items, _ = self.list(sel)
        deleted = []
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(KubeApiError):  # gone meanwhile (e.g. a cascade)
                obj, _gone = self.delete(
                    sel.resource,
                    meta["namespace"],
                    meta["name"],
                    propagation=propagation,
                    precondition_uid=meta["uid"],
                    dry_run=dry_run,
                )
                deleted.append(obj)
        return deleted, self.resource_version

    # -- watch -----------------------------------------------------------------------------

    def open_watch(self, sel: Selection, since: int | None) -> tuple[builtins.list[tuple[str, Obj]], int]:
        """Initial events and the cursor to continue from. ``since`` None/0 means "now", with a
        synthetic ADDED per existing object; else events after ``since`` (410 if forgotten)."""
        with self._cond:
            if not since:
                items = [
                    ("ADDED", copy.deepcopy(o))
                    for _, o in sorted(self._objects[sel.resource].items())
                    if sel.matches(o)
                ]
                return items, self._rv
            if since < self._floor:
                raise Expired(since, self._floor)
            return [], since

    def wait_events(
        self, sel: Selection, cursor: int, timeout: float
    ) -> tuple[builtins.list[tuple[str, Obj]], int]:
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
