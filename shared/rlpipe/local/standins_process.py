"""The local stack's Python-side stand-ins, in one process: the cluster (the Kubernetes API double +
cluster simulator, or the real control plane with its pod player: ``rlpipe.local.clusters``), the
Workflows engine (Executions gRPC + callback HTTP), the Hub double, and the Eventarc shim.

Started by ``LocalStack`` as ``python -m rlpipe.local.standins_process CONFIG.json``; runs until SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from rlpipe.control.adapters.identities import WORKFLOW_IDENTITY_ENV
from rlpipe.control.adapters.logs import Logger

ROOT = Path(__file__).resolve().parents[3]
SHORT_DATASET = "rlpipe-demo/gsm8k-30"  # GSM8K's layout with 30 training examples


def _control_server(port: int, cluster: Any, hub: Any) -> Any:
    """Loopback control API for tests and benchmarks: swap the fault scenario (the double's), switch
    the programs' timing, push a release to the Hub double, list workloads (and their namespaces)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from rlpipe.local.clusters import TIMINGS, timing
    from rlpipe.local.identities import CERTS_PATH, SIGNING_KEY_ENV, published_certs
    from rlpipe.local.simulator import ScenarioError

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

        def do_PUT(self) -> None:
            if self.path == "/timing":
                self._put_timing()
                return
            if self.path != "/scenario":
                self._reply(404, {"error": "unknown path"})
                return
            try:
                self._reply(200, cluster.set_scenario(self._body(), "PUT /scenario"))
            except (ScenarioError, ValueError) as exc:
                self._reply(400, {"error": str(exc)})

        def _put_timing(self) -> None:
            """Switch the programs' durations for workloads created from now on: one long-lived
            stack runs most tests at ``fast`` and those about timing at ``demo``."""
            name = self._body().get("timing")
            if name not in TIMINGS:
                self._reply(400, {"error": f"timing must be one of {sorted(TIMINGS)}, not {name!r}"})
                return
            value = timing(name)
            cluster.set_timing(value)
            self._reply(200, {"timing": name, "scale": value.scale})

        def do_POST(self) -> None:
            if self.path == "/release":  # a run's training past its hold fault
                run = self._body().get("run")
                if not isinstance(run, str) or not run:
                    self._reply(400, {"error": 'release needs the run id: {"run": "<run id>"}'})
                    return
                try:
                    cluster.release(run)
                except ValueError as exc:  # the real plane plays no fault
                    self._reply(400, {"error": str(exc)})
                    return
                self._reply(200, {"released": run})
                return
            if self.path != "/hub/release":
                self._reply(404, {"error": "unknown path"})
                return
            import uuid

            from rlpipe.local.hub_double import model_files

            body = self._body()
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
            if self.path == CERTS_PATH:  # Google's ID-token certificates: the stack's key's
                self._reply(200, json.loads(published_certs(Path(os.environ[SIGNING_KEY_ENV]))))
            elif self.path == "/scenario":
                self._reply(200, cluster.scenario())
            elif self.path == "/workloads":
                placed = cluster.placed()
                self._reply(200, {"workloads": list(placed), "namespaces": placed})
            else:
                self._reply(404, {"error": "unknown path"})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="local-control", daemon=True).start()
    return server


def run(config: dict[str, Any]) -> None:
    from rlpipe.control.adapters.blobstore import make_client
    from rlpipe.local import clusters
    from rlpipe.local.hub_double import HubDouble
    from rlpipe.local.hub_double.datasets import gsm8k_files
    from rlpipe.local.shim import BucketWatcher, EmulatorShim, Routes
    from rlpipe.local.workflows import LocalWorkflows

    log = Logger("local-core")
    os.environ["STORAGE_EMULATOR_HOST"] = config["gcs_url"]
    if config.get("pubsub_host"):
        os.environ["PUBSUB_EMULATOR_HOST"] = config["pubsub_host"]
    storage = make_client(config["project"])

    hub = HubDouble(port=config["hub_port"]).start()
    for repo in config.get("hub_repos", []):
        hub.add_repo(repo)
    # The datasets requests name (GSM8K, the presets' default, among them), with revisions and
    # splits, so plan pins them and the head stages them as on the Hub.
    # GSM8K's layout with enough examples for every preset's run (50 batches of at most 8: 400),
    # staged by every simulated run, so kept small (the real split has 7,473 and 1,319).
    hub.add_known_datasets({"openai/gsm8k": {"train": 800, "test": 160}})
    # A split shorter than a preset's run asks for (30 examples for 50 batches of 4): its training
    # ends early and cleanly (docs/datasets.md, "The train done rule follows the data").
    hub.add_dataset(SHORT_DATASET, gsm8k_files({"train": 30, "test": 8}, configs=("main",)))

    try:
        cluster = clusters.start(config, storage, hub.url)
    except BaseException:
        hub.stop()
        raise

    workflow = Path(config.get("workflow_file") or ROOT / "workflows" / "pipeline.yaml").read_text()
    # the workflow's user_env_vars (infra/terraform/workflow.tf): the stack's stage URL is its audience
    env = {"RLPIPE_STAGE_URL": config["stage_url"], "RLPIPE_STAGE_AUDIENCE": config["stage_url"]}
    workflows = LocalWorkflows(
        workflow,
        workflow_id=config["workflow"],
        project=config["project"],
        location=config["location"],
        env=env,
        grpc_port=config["grpc_port"],
        callback_port=config["callback_port"],
        # The identity the stage function accepts the workflow's operations from: the stack's
        # settings (this process's environment) name it (local/identities.py).
        service_account=os.environ.get(WORKFLOW_IDENTITY_ENV) or None,
    ).start()

    def dropped(bucket: str, name: str) -> bool:
        return cluster.drops_event(bucket, name)

    # As in production: the requests and artifacts buckets trigger functions; the state bucket
    # (ledgers, READY.json, upstream state) has no trigger, the control plane's writes wake nothing.
    routes = Routes(
        buckets={
            config["requests_bucket"]: config["functions"]["intake_object"],
            config["artifacts_bucket"]: config["functions"]["artifact_event"],
        },
        requests_topic=config["requests_topic"] if config.get("pubsub_host") else None,
        # each declared team's own topic, to the same function (infra/terraform/teams.tf)
        team_topics=tuple(config.get("team_topics") or ()) if config.get("pubsub_host") else (),
        intake_message_url=config["functions"]["intake_message"],
        drop=dropped,
    )
    shim: Any
    if config.get("pubsub_host"):
        shim = EmulatorShim(config["project"], config["gcs_topic"], routes, log).start()
    else:
        shim = BucketWatcher(storage, routes, log).start()

    control = _control_server(config["control_port"], cluster, hub)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # Written whole, then renamed: the stack reads it as soon as the name exists.
    ready = Path(config["ready_file"])
    ready.with_suffix(".tmp").write_text(
        json.dumps(
            {
                **cluster.ready(),
                "grpc": workflows.grpc_target,
                "callbacks": workflows.callback_base_url,
                "hub": hub.url,
            }
        )
    )
    ready.with_suffix(".tmp").replace(ready)
    log.info(
        "local core ready",
        cluster=cluster.name,
        workflows=workflows.grpc_target,
        hub=hub.url,
        events="pubsub-emulator" if config.get("pubsub_host") else "bucket-watcher",
    )
    stop.wait()
    control.shutdown()
    for component in (shim, workflows, cluster, hub):
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
