"""Shared helpers for the local Workflows engine tests (no tests of its own).

* ``run`` executes a definition on an ``Engine`` with a ``FakeClock`` and waits.
* ``ScriptedServer`` is a real local HTTP server answering from a script, so
  ``http.*`` steps are tested against real sockets, not mocks.
* ``refused_url`` points at a port nobody listens on.
"""

from __future__ import annotations

import json
import socket
import textwrap
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlpipe.local.workflows import Engine, Execution, State
from tests.harness.patience import ceiling
from tests.harness.workflow_clock import FakeClock


def run(
    definition: str, argument: Any = None, *, clock: FakeClock | None = None, **engine_args: Any
) -> Execution:
    """Run ``definition`` to completion on a fake clock and return the final snapshot."""
    engine = Engine(textwrap.dedent(definition), clock=clock or FakeClock(), **engine_args)
    try:
        return engine.run(argument, timeout=ceiling(10))
    finally:
        engine.shutdown()


def result_of(definition: str, argument: Any = None, **kwargs: Any) -> Any:
    execution = run(definition, argument, **kwargs)
    assert execution.state is State.SUCCEEDED, execution.error
    return execution.result


def error_of(definition: str, argument: Any = None, **kwargs: Any) -> Any:
    execution = run(definition, argument, **kwargs)
    assert execution.state is State.FAILED, execution.result
    assert execution.error is not None
    return execution.error.payload


def expr(expression: str, **variables: Any) -> Any:
    """Evaluate one expression in a workflow whose variables are set from ``variables``."""
    definition = {"main": {"params": ["args"], "steps": []}}
    steps = definition["main"]["steps"]
    if variables:
        steps.append({"init": {"assign": [{k: f"${{args.{k}}}"} for k in variables]}})
    steps.append({"done": {"return": f"${{{expression}}}"}})
    return result_of(json.dumps(definition), variables or None)


def expr_error(expression: str, **variables: Any) -> Any:
    definition = {"main": {"params": ["args"], "steps": []}}
    steps = definition["main"]["steps"]
    if variables:
        steps.append({"init": {"assign": [{k: f"${{args.{k}}}"} for k in variables]}})
    steps.append({"done": {"return": f"${{{expression}}}"}})
    return error_of(json.dumps(definition), variables or None)


def refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/nothing-here"


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class ScriptedServer:
    """Answers each request with the next scripted ``Reply`` (the last one repeats)."""

    def __init__(self, *replies: Reply) -> None:
        self.replies: deque[Reply] = deque(replies or [Reply()])
        self.received: list[Received] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                owner.received.append(
                    Received(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
                )
                reply = owner.replies.popleft() if len(owner.replies) > 1 else owner.replies[0]
                if reply.delay:
                    time.sleep(reply.delay)
                data = b"" if reply.body is None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for key, value in {"Content-Type": "application/json", **reply.headers}.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
