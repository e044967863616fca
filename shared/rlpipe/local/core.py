"""The local stack's Python-side stand-ins, in one process: Kubernetes API double + cluster simulator,
the Workflows engine (Executions gRPC + callback HTTP), the Hub double, and the Eventarc shim.

Started by ``LocalStack`` as ``python -m rlpipe.local.core CONFIG.json``; runs until SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from rlpipe.control.logs import Logger

ROOT = Path(__file__).resolve().parents[3]


def _load_scenario(config: dict[str, Any]) -> Any:
    from rlpipe.local.simulator import Scenario

    scenario = Scenario.load(config["scenario_file"]) if config.get("scenario_file") else Scenario()
    if config.get("faults"):
        extra = Scenario.from_strings(config["faults"])
        scenario = Scenario.from_document(
            {"faults": [*scenario.to_document()["faults"], *extra.to_document()["faults"]]}
        )
    return scenario


TIMINGS = ("demo", "fast", "zero")


def _timing(name: str) -> Any:
    from rlpipe.local.simulator import Timing

    return {"zero": Timing.zero, "fast": Timing.fast}.get(name, Timing)()


def _control_server(port: int, simulator: Any, kube: Any, hub: Any) -> Any:
    """Loopback control API for tests and benchmarks: swap the fault scenario, list workloads."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from rlpipe.local.simulator import Scenario, ScenarioError

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            if self.path == "/timing":
                self._put_timing()
                return
            if self.path != "/scenario":
                self._reply(404, {"error": "unknown path"})
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                simulator.set_scenario(
                    Scenario.from_document(json.loads(body or b"{}"), source="PUT /scenario")
                )
            except (ScenarioError, ValueError) as exc:
                self._reply(400, {"error": str(exc)})
                return
            self._reply(200, simulator.scenario.to_document())

        def _put_timing(self) -> None:
            """Switch the simulated durations for workloads created from now on: one long-lived
            stack runs most tests at ``fast`` and those about timing at ``demo``."""
            name = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}").get(
                "timing"
            )
            if name not in TIMINGS:
                self._reply(400, {"error": f"timing must be one of {sorted(TIMINGS)}, not {name!r}"})
                return
            simulator.env.timing = _timing(name)
            self._reply(200, {"timing": name, "scale": simulator.env.timing.scale})

        def do_POST(self) -> None:
            if self.path != "/hub/release":
                self._reply(404, {"error": "unknown path"})
                return
            import uuid

            from rlpipe.local.hub import model_files

            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            repo = body.get("repo", "")
            if repo not in hub.repos:
                self._reply(404, {"error": f"no repo {repo!r} in the Hub double"})
                return
            files = model_files(seed=uuid.uuid4().hex)
            changes = {
                n: f for n, f in files.items() if n.endswith((".safetensors", ".safetensors.index.json"))
            }
            sha = hub.push(repo, changes, message=body.get("message", "new weights"))
            self._reply(200, {"repo": repo, "sha": sha, "changed": sorted(changes)})

        def do_GET(self) -> None:
            if self.path == "/scenario":
                self._reply(200, simulator.scenario.to_document())
            elif self.path == "/workloads":
                names = [
                    o["metadata"]["name"]
                    for r in ("jobs", "jobsets")
                    for o in kube.list(r)
                    if "rlpipe.dev/run" in (o["metadata"].get("labels") or {})
                ]
                self._reply(200, {"workloads": names})
            else:
                self._reply(404, {"error": "unknown path"})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="local-control", daemon=True).start()
    return server


# The Secrets an operator creates before the first run (docs/deploy.md): the read token every stage
# uses, and the publish stage's own write token. The Hub double accepts any token it has not
# revoked or marked read-only.
LOCAL_HUB_SECRETS = {"hf-token": "local-read-token", "hf-write-token": "local-write-token"}


def _create_hub_secrets(kube: Any, config: dict[str, Any]) -> None:
    import base64

    for name, value in LOCAL_HUB_SECRETS.items():
        data = {"token": base64.b64encode(value.encode()).decode()}
        kube.create(
            "secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name},
                "type": "Opaque",
                "data": data,
            },
            namespace=config.get("namespace", "rlpipe"),
        )


def run(config: dict[str, Any]) -> None:
    from rlpipe.control.blobstore import make_client
    from rlpipe.local.hub import HubDouble
    from rlpipe.local.kube_api import KubeApiServer
    from rlpipe.local.shim import BucketWatcher, EmulatorShim, Routes
    from rlpipe.local.simulator import ClusterSimulator
    from rlpipe.local.workflows import LocalWorkflows

    log = Logger("local-core")
    os.environ["STORAGE_EMULATOR_HOST"] = config["gcs_url"]
    if config.get("pubsub_host"):
        os.environ["PUBSUB_EMULATOR_HOST"] = config["pubsub_host"]
    storage = make_client(config["project"])

    hub = HubDouble(port=config["hub_port"]).start()
    for repo in config.get("hub_repos", []):
        hub.add_repo(repo)

    kube = KubeApiServer(port=config["kube_port"])
    kube.start()
    _create_hub_secrets(kube, config)
    scenario = _load_scenario(config)
    simulator = ClusterSimulator(
        kube,
        storage,
        scenario=scenario,
        timing=_timing(config.get("timing", "demo")),
        hub_url=f"http://127.0.0.1:{config['hub_port']}",
    )
    simulator.start()

    workflow = Path(config.get("workflow_file") or ROOT / "workflows" / "pipeline.yaml").read_text()
    env = {"RLPIPE_STAGE_URL": config["stage_url"]}
    workflows = LocalWorkflows(
        workflow,
        workflow_id=config["workflow"],
        project=config["project"],
        location=config["location"],
        env=env,
        grpc_port=config["grpc_port"],
        callback_port=config["callback_port"],
    ).start()

    def dropped(bucket: str, name: str) -> bool:
        return bool(simulator.drops_event(name, bucket))

    # As in production: the requests and artifacts buckets trigger functions; the state bucket
    # (ledgers, READY.json, upstream state) has no trigger, the control plane's writes wake nothing.
    routes = Routes(
        buckets={
            config["requests_bucket"]: config["functions"]["intake_object"],
            config["artifacts_bucket"]: config["functions"]["artifact_event"],
        },
        requests_topic=config["requests_topic"] if config.get("pubsub_host") else None,
        intake_message_url=config["functions"]["intake_message"],
        drop=dropped,
    )
    shim: Any
    if config.get("pubsub_host"):
        shim = EmulatorShim(config["project"], config["gcs_topic"], routes, log).start()
    else:
        shim = BucketWatcher(storage, routes, log).start()

    control = _control_server(config["control_port"], simulator, kube, hub)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    Path(config["ready_file"]).write_text(
        json.dumps(
            {
                "kube": kube.url,
                "grpc": workflows.grpc_target,
                "callbacks": workflows.callback_base_url,
                "hub": hub.url,
            }
        )
    )
    log.info(
        "local core ready",
        kube=kube.url,
        workflows=workflows.grpc_target,
        hub=hub.url,
        events="pubsub-emulator" if config.get("pubsub_host") else "bucket-watcher",
    )
    stop.wait()
    control.shutdown()
    for component in (shim, workflows, simulator, kube, hub):
        try:
            component.stop()
        except Exception as exc:  # keep stopping the rest
            log.warning("stop failed", component=type(component).__name__, error=str(exc))


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    run(json.loads(Path(args[0]).read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
