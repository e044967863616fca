"""Cloud Logging's ``entries.list``, played from the local clusters' retained container lines.

On GKE every line a container prints is also a Cloud Logging entry, kept after its pod is gone; the
stage function reads a gone head's evaluations from there (``control/adapters/cloud_logs.py``) and
``rlpipe logs`` an ended attempt's lines (``control/adapters/workload_logs.py``). Locally both clusters keep
every container line in a :class:`~rlpipe.local.pod_logs.ContainerLogFolder`; this server answers
``POST /v2/entries:list`` from it, so the production code runs unchanged against it
(``RLPIPE_LOGGING_ENDPOINT``). What it plays, each from Google's reference:

- the request (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list):
  ``resourceNames`` is required (here only ``projects/<the stack's project>``; another project is
  403 PERMISSION_DENIED, as for a caller without access); ``filter`` at most 20,000 characters, in
  the query language (``local/logging_query.py``), empty matching everything; ``orderBy``
  ``"timestamp asc"`` (the default) or ``"timestamp desc"``, entries of one timestamp in
  ``insertId`` order; ``pageSize`` default 50, negative or above 1000 rejected; ``pageToken`` the
  previous answer's ``nextPageToken``, valid only with the same other parameters. Anything else,
  an unknown field included (proto3 JSON parsing refuses it), is 400 INVALID_ARGUMENT, in Google's
  error shape (``{"error": {"code", "message", "status"}}``,
  https://cloud.google.com/apis/design/errors);
- the answer: ``entries`` (left out when there are none, as proto3 JSON leaves out an empty list) and
  ``nextPageToken`` while more remain;
- each entry as GKE writes a container line: resource type ``k8s_container`` with its labels
  ``project_id``, ``location``, ``cluster_name``, ``namespace_name``, ``pod_name``,
  ``container_name`` (https://cloud.google.com/logging/docs/api/v2/resource-list), the line as
  ``textPayload``, the runtime's time as ``timestamp`` (RFC 3339 with nanoseconds, the time
  ``kubectl logs --timestamps`` shows), ``logName`` ``projects/<p>/logs/stdout`` and severity INFO
  (https://cloud.google.com/kubernetes-engine/docs/concepts/about-logs). The retained copy does not
  tell stdout from stderr, so every line is logged as stdout.

Not played: ingestion delay (an entry is listed as soon as its line is written; on GCP lines
arrive within seconds, docs/logs.md), retention limits, and structured (JSON) lines, which GKE
turns into ``jsonPayload``: the played programs print text.

Run as ``python -m rlpipe.local.cloud_logging --folder DIR --port N --project P``; the local stack
starts it (``local/stack.py``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlpipe.local import logging_query
from rlpipe.local.pod_logs import ContainerLog, ContainerLogFolder, LogLine, rfc3339nano

PATH = "/v2/entries:list"
REQUEST_FIELDS = frozenset({"resourceNames", "projectIds", "filter", "orderBy", "pageSize", "pageToken"})
ORDERS = ("timestamp asc", "timestamp desc")
DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 50, 1000
MAX_FILTER_CHARS = 20_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ApiError(Exception):
    """An error answer: HTTP code, Google's status name, message."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status, self.message = code, status, message

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "status": self.status}}


def _invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", message)


def _nanos(time: datetime) -> int:
    return (time - _EPOCH) // (_EPOCH.resolution) * 1000


@dataclass(frozen=True)
class Resource:
    """Where the local cluster stands in GKE's naming (the entries' resource labels)."""

    project: str
    location: str = "us-central1"
    cluster: str = "rlpipe-local"


class CloudLogging:
    """``entries.list`` over a folder of retained container lines (:meth:`list_entries`), served
    over HTTP on loopback by :meth:`start`."""

    def __init__(self, folder: ContainerLogFolder, resource: Resource) -> None:
        self.folder = folder
        self.resource = resource
        self._server: ThreadingHTTPServer | None = None

    # ---- the method ---------------------------------------------------------------------------

    def list_entries(self, body: Any) -> dict[str, Any]:
        """The answer to one ``entries.list`` request body; :class:`ApiError` for a refused one."""
        if not isinstance(body, dict):
            raise _invalid("the request body must be a JSON object")
        unknown = sorted(set(body) - REQUEST_FIELDS)
        if unknown:
            raise _invalid(f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.')
        self._check_resources(body)
        text = body.get("filter") or ""
        if not isinstance(text, str) or len(text) > MAX_FILTER_CHARS:
            raise _invalid(f"filter must be a string of at most {MAX_FILTER_CHARS} characters")
        try:
            query = logging_query.parse(text)
        except logging_query.QueryError as exc:
            raise _invalid(str(exc)) from None
        order = body.get("orderBy") or ORDERS[0]
        if order not in ORDERS:
            raise _invalid(f'orderBy must be "timestamp asc" or "timestamp desc", not {order!r}')
        size = body.get("pageSize") or DEFAULT_PAGE_SIZE
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size > MAX_PAGE_SIZE:
            raise _invalid(f"pageSize must be a whole number from 0 to {MAX_PAGE_SIZE}, not {size!r}")
        fingerprint = hashlib.sha256(
            json.dumps([body.get("resourceNames"), text, order]).encode()
        ).hexdigest()[:16]
        after = _read_token(body.get("pageToken"), fingerprint)
        descending = order == ORDERS[1]
        keyed = sorted(self._matching(query), key=_key, reverse=descending)
        if after is not None:
            keyed = [e for e in keyed if (_key(e) < after if descending else _key(e) > after)]
        page, rest = keyed[:size], keyed[size:]
        answer: dict[str, Any] = {}
        if page:
            answer["entries"] = [entry for _, entry in page]
        if rest and page:
            last = page[-1]
            answer["nextPageToken"] = _token(_key(last), fingerprint)
        return answer

    def _check_resources(self, body: dict[str, Any]) -> None:
        names = body.get("resourceNames")
        if body.get("projectIds"):  # deprecated, and added to resourceNames by the API
            names = [*(names or []), *(f"projects/{p}" for p in body["projectIds"])]
        if not names or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _invalid("resourceNames is required: the projects to read, as projects/PROJECT_ID")
        mine = f"projects/{self.resource.project}"
        for name in names:
            if name != mine:
                raise ApiError(
                    403,
                    "PERMISSION_DENIED",
                    f"The caller does not have permission to read {name} (this stand-in holds {mine} only)",
                )

    def _matching(self, query: logging_query.Query) -> Iterator[tuple[int, dict[str, Any]]]:
        for log in self.folder.logs():
            labels = self._labels(log)
            # Stable across requests (a page token names the last entry by it): the file, the line.
            file_id = hashlib.sha256(log.path.name.encode()).hexdigest()[:12]
            known = _lookup(labels, None)
            if logging_query.matches(query, known) is False:
                continue  # decided on the resource alone: the file is not read
            for number, line in enumerate(self.folder.read(log)):
                entry = self._entry(labels, line, f"{file_id}-{number:012d}")
                nanos = _nanos(line.time)
                if logging_query.matches(query, _lookup(labels, (entry, nanos))):
                    yield nanos, entry

    def _labels(self, log: ContainerLog) -> dict[str, str]:
        return {
            "project_id": self.resource.project,
            "location": self.resource.location,
            "cluster_name": self.resource.cluster,
            "namespace_name": log.namespace,
            "pod_name": log.pod,
            "container_name": log.container,
        }

    def _entry(self, labels: dict[str, str], line: LogLine, insert_id: str) -> dict[str, Any]:
        stamp = rfc3339nano(line.time)
        return {
            "insertId": insert_id,
            "logName": f"projects/{self.resource.project}/logs/stdout",
            "resource": {"type": "k8s_container", "labels": dict(labels)},
            "textPayload": line.text,
            "timestamp": stamp,
            "receiveTimestamp": stamp,
            "severity": "INFO",
        }

    # ---- HTTP ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self, port: int = 0) -> CloudLogging:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != PATH:
                    self._reply(404, ApiError(404, "NOT_FOUND", f"no method at {self.path}").body())
                    return
                try:
                    body = json.loads(
                        self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null"
                    )
                    self._reply(200, service.list_entries(body))
                except json.JSONDecodeError as exc:
                    self._reply(400, _invalid(f"Invalid JSON payload received. {exc}").body())
                except ApiError as exc:
                    self._reply(exc.code, exc.body())

            def do_GET(self) -> None:  # entries.list is a POST only
                self._reply(404, ApiError(404, "NOT_FOUND", f"no method at GET {self.path}").body())

            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._server.serve_forever, name="cloud-logging", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _lookup(labels: dict[str, str], known: tuple[dict[str, Any], int] | None) -> logging_query.Lookup:
    """A field's value in one entry; without the entry (``known`` None) only the resource's."""

    def field(path: str) -> Any:
        if path == "resource.type":
            return "k8s_container"
        if path.startswith("resource.labels."):
            return labels.get(path.removeprefix("resource.labels."))
        if known is None:
            return logging_query.UNKNOWN
        entry, nanos = known
        if path == "timestamp":
            return nanos
        return entry.get(path)

    return field


def _key(keyed: tuple[int, dict[str, Any]]) -> tuple[int, str]:
    """The order entries.list gives: timestamp, then insertId."""
    return keyed[0], str(keyed[1]["insertId"])


def _token(key: tuple[int, str], fingerprint: str) -> str:
    raw = json.dumps({"after": list(key), "query": fingerprint}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_token(token: Any, fingerprint: str) -> tuple[int, str] | None:
    if not token:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(str(token) + "=" * (-len(str(token)) % 4)))
        nanos, insert_id = data["after"]
        if data["query"] == fingerprint:
            return int(nanos), str(insert_id)
    except (ValueError, KeyError, TypeError):
        pass
    raise _invalid("pageToken is not the nextPageToken of a request with these other parameters")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlpipe.local.cloud_logging")
    parser.add_argument("--folder", required=True, help="the retained container lines (ContainerLogFolder)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--location", default=Resource.location)
    parser.add_argument("--cluster", default=Resource.cluster)
    args = parser.parse_args(argv)
    from pathlib import Path

    service = CloudLogging(
        ContainerLogFolder(Path(args.folder)), Resource(args.project, args.location, args.cluster)
    ).start(args.port)
    print(f"local Cloud Logging entries.list on {service.url}{PATH}, from {args.folder}", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
