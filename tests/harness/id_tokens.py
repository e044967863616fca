"""The local stack's token issuer for tests that call the stage function in-process: a signing key
(rlpipe.local.identities), its certificate published over HTTP as Google publishes its own, and the
settings that point the function's verification at it (control/adapters/callers.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlpipe.control import services
from rlpipe.control.adapters import callers
from rlpipe.local import identities

STAGE_URL = "https://rlpipe-stage-abc123-uc.a.run.app"


@dataclass(frozen=True)
class Issuer:
    key_path: Path
    certs_url: str

    def token(self, email: str, audience: str = STAGE_URL, *, now: float | None = None) -> str:
        return identities.played_id_token(email, audience, now=now, key_path=self.key_path)


def serve_certs(key_path: Path) -> ThreadingHTTPServer:
    """``GET /oauth2/v1/certs`` answering the key's published certificate."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = identities.published_certs(key_path)
            self.send_response(200 if self.path == identities.CERTS_PATH else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="session")
def token_issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Issuer]:
    key = identities.ensure_signing_key(tmp_path_factory.mktemp("issuer"))
    server = serve_certs(key)
    yield Issuer(key, f"http://127.0.0.1:{server.server_address[1]}{identities.CERTS_PATH}")
    server.shutdown()


@pytest.fixture
def signed_calls(token_issuer: Issuer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Issuer]:
    """The stage function verifies against ``token_issuer`` for STAGE_URL, and played tokens are
    signed by it (the settings the local stack gives its functions and its CLI)."""
    monkeypatch.setenv(identities.SIGNING_KEY_ENV, str(token_issuer.key_path))
    monkeypatch.setenv("RLPIPE_ID_TOKEN_CERTS_URL", token_issuer.certs_url)
    monkeypatch.setenv("RLPIPE_STAGE_AUDIENCE", STAGE_URL)
    services.reset()
    monkeypatch.setattr(callers, "_CERTS", None)
    yield token_issuer
    if hasattr(
        services.settings, "cache_clear"
    ):  # a test may have replaced it (its monkeypatch undoes that later)
        services.reset()
