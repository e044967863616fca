"""A proxy in front of fake-gcs-server that is as strict as real GCS where the fake is lax.

fake-gcs-server answers a download with the object's current bytes whatever the request says:
its ``mediaLink`` carries no ``generation``, and ``ifGenerationMatch`` on a download is ignored.
Real GCS pins ``mediaLink`` to the generation it describes (``?generation=G&alt=media``), keeps
no old versions in a bucket without versioning (so a superseded generation is a 404), and
answers 412 to a download whose ``ifGenerationMatch`` does not hold (JSON API reference,
objects/get: "generation", "ifGenerationMatch"). Without those, a read that tears across two
requests looks healthy in tests and fails in production. This proxy adds exactly those rules and
forwards everything else unchanged, so the real ``google-cloud-storage`` client is exercised.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from rlpipe.local.ports import free_port

# /storage/v1/b/<bucket>/o/<object> and /download/storage/v1/b/<bucket>/o/<object>
_OBJECT = re.compile(r"^(?:/download)?/storage/v1/b/([^/]+)/o/([^?]+)$")
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class StrictGcs:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.port = free_port()
        self.downloads_refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = (
                True  # headers and body go out in two writes: avoid 40 ms delayed-ACK stalls
            )

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                refusal = proxy._refusal(self.command, self.path)
                if refusal is not None:
                    proxy.downloads_refused += 1
                    self._answer(
                        refusal,
                        {"Content-Type": "application/json"},
                        json.dumps({"error": {"code": refusal, "message": "strict GCS"}}).encode(),
                    )
                    return
                status, headers, payload = proxy._upstream(self.command, self.path, dict(self.headers), body)
                if proxy._is_metadata(self.path) and headers.get("Content-Type", "").startswith(
                    "application/json"
                ):
                    payload = proxy._pin_media_links(payload)
                self._answer(status, headers, payload)

            def _answer(self, status: int, headers: dict[str, str], payload: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in _HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StrictGcs:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- the rules fake-gcs-server does not apply ------------------------------------------------

    def _refusal(self, method: str, path: str) -> int | None:
        """404 for a superseded generation, 412 for a failed ifGenerationMatch, on media downloads."""
        parts = urlsplit(path)
        query = parse_qs(parts.query)
        match = _OBJECT.match(parts.path)
        if method != "GET" or match is None or query.get("alt") != ["media"]:
            return None
        wanted = query.get("generation", [None])[0]
        if_match = query.get("ifGenerationMatch", [None])[0]
        if wanted is None and if_match is None:
            return None
        bucket, name = match.group(1), unquote(match.group(2))
        status, _, payload = self._upstream(
            "GET", f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}", {}, None
        )
        if status != 200:
            return status
        current = str(json.loads(payload).get("generation"))
        if wanted is not None and wanted != current:
            return 404  # the bucket keeps no old generations
        if if_match is not None and if_match != current:
            return 412
        return None

    @staticmethod
    def _is_metadata(path: str) -> bool:
        """A JSON API answer about objects, never an object's own bytes."""
        parts = urlsplit(path)
        return not parts.path.startswith("/download/") and "media" not in parse_qs(parts.query).get("alt", [])

    def _pin_media_links(self, payload: bytes) -> bytes:
        try:
            doc = json.loads(payload)
        except ValueError:
            return payload
        items = doc.get("items") if isinstance(doc, dict) else None
        for obj in [doc, *(items if isinstance(items, list) else [])]:
            if isinstance(obj, dict) and "mediaLink" in obj and "generation" in obj:
                name = quote(str(obj.get("name", "")), safe="")
                obj["mediaLink"] = (
                    f"{self.url}/download/storage/v1/b/{obj.get('bucket')}/o/{name}"
                    f"?generation={obj['generation']}&alt=media"
                )
        return json.dumps(doc).encode()

    def _upstream(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in headers.items() if k.lower() not in ("host", "accept-encoding")}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()
