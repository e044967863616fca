"""The HTTP side of the API double: routing, request handling, list paging, watch streams, and
the record of each request."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from rlpipe.local import pod_logs
from rlpipe.local.pod_logs import LogLine

from .errors import KubeApiError, _details, bad_request, conflict
from .patch import MERGE_PATCH, apply_patch
from .resources import JOBSETS, PODS, RESOURCES, Obj, Resource
from .selectors import Selection
from .store import KubeStore
from .watch import Expired

log = logging.getLogger(__name__)


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


class Api(Protocol):
    """What the HTTP layer uses of :class:`~rlpipe.local.kube_api.server.KubeApiServer`, which
    starts it (a protocol, so that this module does not import the server back)."""

    store: KubeStore
    stopping: bool
    watch_lock: threading.Lock
    active_watches: int

    def pod_log_lines(self, name: str, *, namespace: str = "default") -> list[LogLine]: ...

    def _take_fault(self, method: str, path: str) -> KubeApiError | None: ...

    def _log_request(self, record: RequestRecord) -> None: ...


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

    def __init__(self, address: tuple[str, int], api: Api) -> None:
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
        """Quiet: every request is in the request log (``RequestRecord``) instead."""

    # -- plumbing --------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
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
        route = _route(path)
        if route is None:
            raise KubeApiError(404, "NotFound", "the server could not find the requested resource")
        res, store = route.resource, self.server.api.store
        if res is PODS and route.sub == "log" and route.name and self.command == "GET":
            return self._pod_log(route.namespace or "default", route.name, query)
        if route.sub is not None and (route.sub != "status" or not res.has_status):
            raise KubeApiError(404, "NotFound", "the server could not find the requested resource")
        dry_run = query.get("dryRun") == "All"
        method = self.command
        if method != "GET" and not res.http_writable:
            raise KubeApiError(
                405,
                "MethodNotAllowed",
                f"{res.plural} are read-only in this API double (the simulator writes them)",
            )
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

            self._send_json(
                200, store.update(res, ns, name, replace, status_only=status_only, dry_run=dry_run)
            )
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
            obj, gone = store.delete(
                res,
                ns,
                name,
                propagation=options.get("propagationPolicy"),
                precondition_uid=pre.get("uid"),
                precondition_rv=pre.get("resourceVersion"),
                dry_run=dry_run,
            )
            # The apiserver answers 202 only for an object still held by finalizers after an
            # explicit orphanDependents=false; the client maps nothing but 200 for custom objects.
            code = 202 if not gone and options.get("orphanDependents") is False else 200
            if res is JOBSETS or not gone:
                # Custom resources return the deleted object; anything held by finalizers
                # is returned as it now is.
                self._send_json(code, obj)
            else:
                self._send_json(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": _details(res, name, uid=obj["metadata"]["uid"]),
                    },
                )
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
            created = store.create(
                res, route.namespace, self._object_body(body), keep_status=False, dry_run=dry_run
            )
            self._send_json(201, created)
            return 201
        if self.command == "DELETE":
            options = self._delete_options(query, body)
            deleted, rv = store.delete_collection(
                sel, propagation=options.get("propagationPolicy"), dry_run=dry_run
            )
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

    def _pod_log(self, namespace: str, name: str, query: dict[str, str]) -> int:
        self.server.api.store.get(PODS, namespace, name)  # 404 for an unknown pod
        if not _accepts_api_media(self.headers.get("Accept")):
            # What the real API server (v1.34) answers, though the body it sends is plain text.
            raise KubeApiError(
                406,
                "NotAcceptable",
                "only the following media types are accepted: application/json, application/yaml, "
                "application/vnd.kubernetes.protobuf",
            )
        try:
            data = pod_logs.render(self.server.api.pod_log_lines(name, namespace=namespace), query)
        except pod_logs.BadLogOptions as exc:
            raise KubeApiError(400, "BadRequest", str(exc)) from None
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
                return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
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


def _list_body(
    res: Resource, items: list[Obj], rv: int, cont: str | None = None, remaining: int | None = None
) -> Obj:
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
    page = items[start : start + limit]
    last = page[-1]["metadata"]
    token = base64.urlsafe_b64encode(json.dumps({"ns": last["namespace"], "name": last["name"]}).encode())
    return _list_body(res, page, rv, token.decode(), len(items) - start - limit)


_API_MEDIA = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


def _accepts_api_media(accept: str | None) -> bool:
    """Whether an Accept header allows a media type the API server serves (absent: anything)."""
    if not accept:
        return True
    ranges = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    return any(r in ("*/*", "application/*") or r in _API_MEDIA for r in ranges)
