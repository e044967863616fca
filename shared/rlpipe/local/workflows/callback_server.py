"""The HTTP endpoint behind callback URLs from ``events.create_callback_endpoint``.

Answers 200 when the request is queued for a waiting or future
``await_callback``, 404 for an unknown callback or one whose execution has
ended, and 405 for a method the endpoint was not created for.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .callbacks import CallbackRegistry
from .clock import Clock


class CallbackServer:
    """Serves callback URLs on 127.0.0.1 and points the registry's base URL at itself."""

    def __init__(
        self, registry: CallbackRegistry, clock: Clock, port: int = 0, host: str = "127.0.0.1"
    ) -> None:
        handler = _make_handler(registry, clock)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.base_url = f"http://{host}:{self.port}"
        registry.base_url = self.base_url
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="wf-callbacks",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _make_handler(registry: CallbackRegistry, clock: Clock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as separate writes; without this a reused connection waits
            # for the client's delayed ACK (~40 ms per callback).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _handle(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not (url.path.startswith("/v1/") and "/callbacks/" in url.path):
                self._reply(HTTPStatus.NOT_FOUND, "not a callback URL")
                return
            delivery = registry.deliver(
                url.path, self.command, dict(self.headers.items()), url.query, body, clock.now()
            )
            self._reply(HTTPStatus(delivery.status), delivery.message)

        def _reply(self, status: HTTPStatus, message: str) -> None:
            payload = json.dumps(
                {} if status == HTTPStatus.OK else {"error": {"code": status.value, "message": message}}
            )
            data = payload.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _handle

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler
