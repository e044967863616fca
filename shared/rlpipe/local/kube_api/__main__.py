"""``python -m rlpipe.local.kube_api``: serve the API double until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import threading

from .server import KubeApiServer
from .store import no_validation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlpipe.local.kube_api", description="Serve the Kubernetes API double until Ctrl-C."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--no-validate", action="store_true", help="accept any object (no schema checks)")
    parser.add_argument("--kubeconfig", help="also write a kubeconfig pointing at the server here")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    server = KubeApiServer(
        args.host, args.port, validator=no_validation if args.no_validate else None, verbose=args.verbose
    )
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
