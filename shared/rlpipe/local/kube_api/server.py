"""The public face of the API double: :class:`KubeApiServer` (lifecycle, the Python API a
simulator or a test writes through, injected faults, the request log)."""

from __future__ import annotations

import builtins
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from rlpipe.local.pod_logs import LogLine

from .errors import KubeApiError, reason_for
from .http import RequestRecord, _HTTPServer
from .patch import PATCH_TYPES, apply_patch, merge_patch
from .resources import Obj, Resource, resolve_resource
from .selectors import Selection
from .store import KubeStore, Validator
from .watch import Listener

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
        return (
            self.remaining > 0
            and (self.method is None or self.method == method)
            and (self.path is None or bool(self.path.search(path)))
        )

    def error(self) -> KubeApiError:
        headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after is not None else {}
        details = {"retryAfterSeconds": int(self.retry_after)} if self.retry_after is not None else None
        message = self.message or f"injected fault: {HTTPStatus(self.status).phrase}"
        return KubeApiError(self.status, reason_for(self.status), message, details, headers)


# --------------------------------------------------------------------------- public API


class KubeApiServer:
    """The API double: an HTTP server for the real ``kubernetes`` client plus a Python API
    through which a simulator (or a test) plays the controllers' part.

    Python-API writes set server metadata, bump resourceVersion and emit watch events exactly
    like HTTP writes; they skip fault injection and the request log, and may write ``status``
    and the read-only kinds (pods, events).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        validator: Validator | None = None,
        history_limit: int = 10_000,
        request_log_limit: int = 10_000,
    ) -> None:
        """``validator`` defaults to ``rlpipe.local.kube_api.validation.validate_object`` (imported on first
        use); pass :func:`no_validation` to accept everything. ``history_limit`` bounds the watch
        history (older resourceVersions get 410 Expired); ``request_log_limit`` the request log."""
        self.store = KubeStore(validator, history_limit)
        self._address = (host, port)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._faults: list[Fault] = []
        self._requests: deque[RequestRecord] = deque(maxlen=request_log_limit)
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str], list[LogLine]] = {}
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
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="kube-api-double",
            daemon=True,
        )
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
        return f"http://{host!s}:{port}"

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

    def list(
        self,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        """Matching objects; ``namespace=None`` lists all namespaces."""
        sel = Selection.build(resolve_resource(resource), namespace, label_selector, field_selector)
        return self.store.list(sel)[0]

    def modify(
        self,
        resource: str | Resource,
        name: str,
        mutate: Callable[[Obj], None],
        *,
        namespace: str = "default",
    ) -> Obj:
        """Read-modify-write without conflicts: ``mutate`` edits a copy in place and is re-run
        if another writer got in between. Status edits are kept."""

        def apply(current: Obj) -> Obj:
            mutate(current)
            return current

        return self.store.update(resolve_resource(resource), namespace, name, apply, keep_status=True)

    def patch(
        self,
        resource: str | Resource,
        name: str,
        patch: Any,
        *,
        namespace: str = "default",
        patch_type: str = "merge",
    ) -> Obj:
        """Patch like a client would (status untouched); ``patch_type``: merge | strategic | json."""
        res = resolve_resource(resource)
        media = PATCH_TYPES[patch_type]
        return self.store.update(res, namespace, name, lambda cur: apply_patch(res, cur, patch, media))

    def patch_status(
        self, resource: str | Resource, name: str, status: Obj, *, namespace: str = "default"
    ) -> Obj:
        """Merge-patch ``status`` (the status fields themselves, not ``{"status": ...}``)."""
        res = resolve_resource(resource)
        return self.store.update(
            res, namespace, name, lambda cur: merge_patch(cur, {"status": status}), status_only=True
        )

    def delete(
        self,
        resource: str | Resource,
        name: str,
        *,
        namespace: str = "default",
        propagation_policy: str | None = None,
    ) -> Obj:
        """Delete one object (cascading per ``propagation_policy``; Jobs default to Orphan like
        batch/v1). Returns the object; it still exists if finalizers hold it."""
        return self.store.delete(resolve_resource(resource), namespace, name, propagation=propagation_policy)[
            0
        ]

    def delete_collection(
        self,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation_policy: str | None = None,
    ) -> builtins.list[Obj]:
        sel = Selection.build(resolve_resource(resource), namespace, label_selector, field_selector)
        return self.store.delete_collection(sel, propagation=propagation_policy)[0]

    def append_pod_log(
        self,
        name: str,
        lines: builtins.list[str],
        *,
        namespace: str = "default",
        when: datetime | None = None,
    ) -> None:
        """Add lines to what ``GET .../pods/{name}/log`` answers, each stamped with the time it was
        written (``when``, default now), as the container runtime stamps it (the simulator writes a
        container's output, and keeps the same stamp in its retained copy)."""
        stamped = when or datetime.now(UTC)
        with self._lock:
            self._logs.setdefault((namespace, name), []).extend(LogLine(stamped, line) for line in lines)

    def set_pod_log(self, name: str, text: str, *, namespace: str = "default") -> None:
        """Replace a pod's log with ``text`` (its lines stamped now)."""
        with self._lock:
            self._logs.pop((namespace, name), None)
        self.append_pod_log(name, text.splitlines(), namespace=namespace)

    def pod_log_lines(self, name: str, *, namespace: str = "default") -> builtins.list[LogLine]:
        with self._lock:
            return list(self._logs.get((namespace, name), []))

    def pod_log(self, name: str, *, namespace: str = "default") -> str:
        """The log's text, as ``kubectl logs`` shows it without options."""
        return "".join(f"{line.text}\n" for line in self.pod_log_lines(name, namespace=namespace))

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(event)`` after every change (in the writer's thread, outside locks)."""
        self.store.add_listener(listener)

    def remove_listener(self, listener: Listener) -> None:
        self.store.remove_listener(listener)

    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    # -- faults and request log ---------------------------------------------------------------

    def inject_fault(
        self,
        status: int = 503,
        *,
        count: int = 1,
        retry_after: float | None = None,
        message: str | None = None,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Fail the next ``count`` HTTP requests (optionally only ``method`` and/or paths matching
        the regex ``path``) with ``status`` and a ``Status`` body; ``retry_after`` adds the header."""
        if not 400 <= status <= 599:
            raise ValueError("a fault needs an HTTP error status (4xx/5xx)")
        fault = Fault(
            status,
            count,
            retry_after,
            message,
            method.upper() if method else None,
            re.compile(path) if path else None,
        )
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
    def requests(self) -> builtins.list[RequestRecord]:
        """The HTTP requests so far (the newest ``request_log_limit``), oldest first; a copy."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()
