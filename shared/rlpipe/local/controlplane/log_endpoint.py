"""The kubelet's log endpoint for the played nodes, so ``GET pods/{name}/log`` works.

The pipeline reads training progress and rewards from the Pathways head's log through the API
server (``ClusterClient.log_tail``), and so does ``kubectl logs``. The API server does not store
logs: it proxies the request to the kubelet of the pod's node, at the node's preferred address and
``status.daemonEndpoints.kubeletEndpoint.Port``, path ``/containerLogs/<ns>/<pod>/<container>``
(k8s pkg/registry/core/pod/strategy.go LogLocation, pkg/kubelet/client/kubelet_client.go
GetConnectionInfo). It verifies the kubelet's certificate only when given
``--kubelet-certificate-authority``; the plane gives none, as a kind cluster does not. This server
answers that path from the played containers' log files (``programs.PodLogs``) on loopback, and
:func:`node_endpoint` is the node status that points the API server at it.
"""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rlpipe.local.controlplane.pki import KeyPair
from rlpipe.local.controlplane.programs import PodLogs
from rlpipe.local.pod_logs import BadLogOptions
from rlpipe.local.ports import free_port

HOST = "127.0.0.1"


class LogEndpoint:
    """HTTPS on loopback: ``GET /containerLogs/<namespace>/<pod>/<container>`` with the kubelet's
    log options (``timestamps``, ``sinceSeconds``, ``tailLines``, ``limitBytes``: local/pod_logs.py)."""

    def __init__(self, logs: PodLogs, certificate: KeyPair) -> None:
        self.logs = logs
        self.certificate = certificate
        self._server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> LogEndpoint:
        logs = self.logs

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                try:
                    body = logs.serve(parts[1], parts[2], parts[3], query).encode()
                except BadLogOptions as exc:  # the kubelet, too, refuses options out of range
                    self.send_error(400, str(exc))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer((HOST, free_port()), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.certificate.cert), str(self.certificate.key))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, name="kubelet-logs", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def node_endpoint(port: int) -> dict[str, Any]:
    """The node status fields a kubelet reports for its address and port (a merge patch)."""
    return {
        "status": {
            "addresses": [{"type": "InternalIP", "address": HOST}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        }
    }
