"""``rlpipe local``: the whole pipeline on one machine, wired like production.

Every component listens on a free loopback port and is its own process group, so it can be
health-checked and stopped reliably (``down`` works from another shell through the state file):

    fake-gcs-server ─(notifications)→ Pub/Sub emulator ─→ shim ─(CloudEvents)→ functions-framework × 4
    requests topics (the deployment's, each team's) ─→ shim ─→ intake_message
    functions → Workflows engine (gRPC) → stage → the cluster
    the cluster's container lines → Cloud Logging's entries.list (``local/cloud_logging.py``)

The cluster is the Kubernetes API double + simulator (``cluster="double"``, the default: TPU
simulated), or the real control plane (``cluster="real"``: kube-apiserver, controllers, scheduler,
JobSet and Kueue built by ``make components``, with played nodes, containers and programs), which
the functions reach as the pipeline's identity through ``RLPIPE_KUBECONFIG``. On the double,
``programs="real"`` has the convert and export pods run MaxText's real converters
(``rlpipe.local.clusters``, ``rlpipe.local.simulator.real_programs``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from rlpipe.local import identities, pubsub
from rlpipe.local.clusters import CLUSTERS, real_programs, refuse_faults
from rlpipe.local.gcs import FakeGcs
from rlpipe.local.pod_logs import CONTAINER_LOGS
from rlpipe.local.ports import free_port
from rlpipe.local.procs import Child, http_ready, stop_all
from rlpipe.local.stack_state import StackState, state_path
from rlpipe.local.teams_declaration import LocalTeams, read_teams_file

ROOT = Path(__file__).resolve().parents[3]
FUNCTIONS: dict[str, str] = {
    "intake_object": "cloudevent",
    "intake_message": "cloudevent",
    "artifact_event": "cloudevent",
    "stage": "http",
    "upstream_poll": "cloudevent",
    "upstream_webhook": "http",
}
DEMO_REPOS = ("google/gemma-4-26b-a4b-it",)
# The local stack lets requests bring reward functions and processors: on your own machine they
# run as you (a deployment decides for itself; off by default there).
LOCAL_ALLOWS_USER_CODE = True
# How long the core may take to be ready: the double starts in seconds; the real plane installs
# its CRDs and webhooks, the deploy's objects and the nodes (about 30 s idle, minutes under load).
CORE_READY_SECONDS = {"double": 60.0, "real": 600.0}
# The core's control API (timing, Hub releases, workloads; faults on the double only), by cluster.
CONTROL = {"double": "simulator control", "real": "stack control"}


@dataclass
class StackConfig:
    root: Path = Path(".rlpipe/local")
    project: str = "rlpipe-local"
    location: str = "us-central1"
    workflow: str = "rlpipe-pipeline"
    requests_bucket: str = "rlpipe-requests"
    artifacts_bucket: str = "rlpipe-artifacts"
    state_bucket: str = "rlpipe-state"  # the control plane's; no events are routed from it
    requests_topic: str = "rlpipe-requests"
    status_topic: str = "rlpipe-status"
    gcs_topic: str = "rlpipe-gcs-events"
    poll_seconds: int = 3
    timing: str = "demo"  # demo | zero
    events: str = "auto"  # auto | pubsub | watcher
    scenario_file: str | None = None
    faults: list[str] = field(default_factory=list)
    detached: bool = False  # `rlpipe local up`: the components outlive the command that started them
    cluster: str = "double"  # double (API double + simulator) | real (the real control plane)
    programs: str = "played"  # played | real (convert and export run MaxText for real; double only)
    # The teams declaration (YAML, core.teams; docs/teams-local.md): None runs one team, as a
    # deployment without teams does.
    teams_file: str | None = None


def describe_cluster(cluster: str) -> str:
    """Which cluster a stack runs on, in one line: every demo and local summary prints it."""
    if cluster == "real":
        from rlpipe.local.controlplane import components

        v = components.versions()
        return (
            f"real: Kubernetes {v['KUBERNETES_VERSION']} (kube-apiserver, etcd {v['ETCD_VERSION']}, "
            f"controller manager, scheduler), JobSet {v['JOBSET_VERSION']}, Kueue {v['KUEUE_VERSION']}, "
            "built by `make components`; nodes, containers, MaxText and the TPU are PLAYED"
        )
    return "double: the Kubernetes API double + cluster simulator (controllers, Kueue, nodes and the TPU SIMULATED)"


def describe_programs(programs: str) -> str:
    """Which MaxText programs a stack runs for real, in one line (the demo prints it too)."""
    if programs == "real":
        return (
            "real: convert and export run MaxText 0.2.4's to_maxtext and to_huggingface for REAL "
            "(the programs venv, .cache/programs/venv) on the tiny Gemma 4 fixture, minutes each; "
            "train is played"
        )
    return "played: convert, train and export are played by the simulator (real file names, tiny contents)"


class LocalStack:
    def __init__(self, config: StackConfig | None = None, *, say: Any = None):
        self.config = config or StackConfig()
        self.root = Path(self.config.root).resolve()
        self.logs = self.root / "logs"
        self.children: dict[str, Child] = {}
        self.gcs: FakeGcs | None = None
        self.pubsub: pubsub.PubSubEmulator | None = None
        self.state: StackState | None = None
        self.teams: LocalTeams | None = None
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> StackState:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> StackState:
        c = self.config
        self._check_cluster()
        real = real_programs(c.cluster, c.programs)  # NoRealPrograms (a ValueError): nothing started
        # TeamsFileInvalid (a ValueError) names the file and each wrong field: nothing started
        self.teams = read_teams_file(c.teams_file) if c.teams_file else None
        self.logs.mkdir(parents=True, exist_ok=True)
        self.say(f"[local] cluster: {describe_cluster(c.cluster)}")
        self.say(f"[local] programs: {describe_programs(c.programs)}")
        for line in self.teams.describe() if self.teams else []:
            self.say(f"[local] team {line}")
        use_pubsub, note = self._events_mode()
        self.say(f"[local] events: {note}")
        if use_pubsub:
            self.pubsub = pubsub.PubSubEmulator(self.logs, die_with_parent=not c.detached).start()
            self.children["pubsub-emulator"] = self.pubsub.child
            self._create_topics()
            self.say(f"[local] Pub/Sub: {self.pubsub.description} on {self.pubsub.host}")
        self.gcs = FakeGcs(
            self.logs,
            pubsub_project=c.project if use_pubsub else None,
            pubsub_topic=c.gcs_topic if use_pubsub else None,
            pubsub_host=self.pubsub.host if self.pubsub else None,
            die_with_parent=not c.detached,
        ).start()
        self.children["fake-gcs-server"] = self.gcs.child
        self._create_buckets()
        self.say(f"[local] fake-gcs-server on {self.gcs.url}")

        ports = {
            name: free_port()
            for name in ("kube", "grpc", "callback", "hub", "control", "logging", *FUNCTIONS)
        }
        function_urls = {name: f"http://127.0.0.1:{ports[name]}/" for name in FUNCTIONS}
        env = self._function_env(ports)
        self._start_cloud_logging(ports["logging"])
        core_config = {
            "project": c.project,
            "location": c.location,
            "workflow": c.workflow,
            "gcs_url": self.gcs.url,
            "pubsub_host": self.pubsub.host if self.pubsub else None,
            "requests_bucket": c.requests_bucket,
            "artifacts_bucket": c.artifacts_bucket,
            "requests_topic": c.requests_topic,
            "gcs_topic": c.gcs_topic,
            "kube_port": ports["kube"],
            "grpc_port": ports["grpc"],
            "callback_port": ports["callback"],
            "hub_port": ports["hub"],
            "hub_repos": list(DEMO_REPOS),
            "control_port": ports["control"],
            "stage_url": function_urls["stage"],
            "functions": function_urls,
            "timing": c.timing,
            "scenario_file": c.scenario_file,
            "faults": list(c.faults),
            "ready_file": str(self.root / "core.ready"),
            "cluster": c.cluster,
            "real_programs": {"python": str(real.python), "fixture": str(real.fixture)} if real else None,
            "cluster_root": str(self.root / "controlplane"),
            "logs": str(self.logs),
            "teams": dict(self.teams.declaration) if self.teams else {},
            "team_topics": self._team_topics(),
        }
        (self.root / "core.ready").unlink(missing_ok=True)
        (self.root / "core.json").write_text(json.dumps(core_config, indent=2))
        core = Child(
            "core",
            [sys.executable, "-m", "rlpipe.local.standins_process", str(self.root / "core.json")],
            log_path=self.logs / "core.log",
            env=env,
            cwd=ROOT,
            die_with_parent=not c.detached,
        ).start()
        self.children["core"] = core
        core.wait_ready(lambda: (self.root / "core.ready").exists(), timeout=CORE_READY_SECONDS[c.cluster])
        ready = json.loads((self.root / "core.ready").read_text())
        cluster_endpoints = self._cluster_endpoints(ready, env)
        self.say(f"[local] Workflows engine on 127.0.0.1:{ports['grpc']}")

        for name, signature in FUNCTIONS.items():
            source = str(ROOT / "functions" / "main.py")
            argv = [sys.executable, "-m", "functions_framework", "--target", name, "--source", source]
            argv += ["--signature-type", signature, "--host", "127.0.0.1", "--port", str(ports[name])]
            self.children[name] = Child(
                name,
                argv,
                log_path=self.logs / f"{name}.log",
                env=env,
                cwd=ROOT,
                die_with_parent=not c.detached,
            ).start()
        for name in FUNCTIONS:
            self.children[name].wait_ready(
                http_ready(function_urls[name], lambda status, body: True), timeout=120
            )
        self.say(f"[local] functions: {', '.join(FUNCTIONS)}")

        endpoints = {
            "fake-gcs-server": self.gcs.url,
            "pubsub-emulator": self.pubsub.host if self.pubsub else "(none: bucket watcher)",
            **cluster_endpoints,
            "workflows (gRPC)": f"127.0.0.1:{ports['grpc']}",
            "workflows callbacks": f"http://127.0.0.1:{ports['callback']}",
            "hub double": f"http://127.0.0.1:{ports['hub']}",
            "cloud logging": f"http://127.0.0.1:{ports['logging']}",
            CONTROL[c.cluster]: f"http://127.0.0.1:{ports['control']}",
            **{f"function {n}": u for n, u in function_urls.items()},
        }
        pids = {name: child.proc.pid for name, child in self.children.items() if child.proc}
        self.state = StackState(
            root=str(self.root),
            pids={**pids, **ready.get("pids", {})},
            endpoints=endpoints,
            env=env,
            events="pubsub" if use_pubsub else "watcher",
            events_note=note,
            cluster=c.cluster,
        )
        self.state.save(state_path(self.root))
        return self.state

    def set_faults(self, faults: list[str | dict[str, Any]]) -> dict[str, Any]:
        """Replace the simulator's faults for workloads created from now on."""
        assert self.state is not None
        url = self._control() + "/scenario"
        response = requests.put(url, json={"faults": faults}, timeout=10)
        if response.status_code != 200:
            raise ValueError(response.json().get("error", response.text))
        return dict(response.json())

    def set_timing(self, timing: str) -> None:
        """Simulated durations for workloads created from now on: ``demo``, ``fast`` or ``zero``."""
        assert self.state is not None
        url = self._control() + "/timing"
        response = requests.put(url, json={"timing": timing}, timeout=10)
        if response.status_code != 200:
            raise ValueError(response.json().get("error", response.text))

    def release(self, run_id: str) -> None:
        """Let the run's training go on past its ``hold`` fault (the simulator's ``release``)."""
        assert self.state is not None
        response = requests.post(self._control() + "/release", json={"run": run_id}, timeout=10)
        if response.status_code != 200:
            raise ValueError(response.json().get("error", response.text))

    def hub_release(self, repo: str) -> dict[str, Any]:
        """Push new weights to a repo of the Hub double (an upstream release)."""
        assert self.state is not None
        response = requests.post(self._control() + "/hub/release", json={"repo": repo}, timeout=10)
        response.raise_for_status()
        return dict(response.json())

    def workloads(self) -> list[str]:
        """The pipeline's Jobs and JobSets in the cluster, by name."""
        return list(self.placed())

    def placed(self) -> dict[str, str]:
        """The pipeline's Jobs and JobSets in the cluster, each with the namespace it is in."""
        response = requests.get(self._control() + "/workloads", timeout=30)
        response.raise_for_status()
        return dict(response.json()["namespaces"])

    def _control(self) -> str:
        assert self.state is not None
        return self.state.endpoints[CONTROL[self.state.cluster]]

    def upstream_tick(self) -> int:
        """What Cloud Scheduler does every 10 minutes: a Pub/Sub tick to ``upstream_poll``."""
        from rlpipe.local.shim import deliver, message_published

        assert self.state is not None
        event = message_published(
            f"projects/{self.config.project}/topics/rlpipe-upstream-tick",
            "projects/local/subscriptions/tick",
            b"{}",
            {},
            f"tick-{time.time_ns()}",
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        return 200 if deliver(self.state.endpoints["function upstream_poll"], event) else 500

    def stop(self) -> None:
        stop_all(list(reversed(self.children.values())))
        self.children.clear()
        state_path(self.root).unlink(missing_ok=True)

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- pieces ---------------------------------------------------------------------------------

    def _check_cluster(self) -> None:
        """Refuse what cannot work before anything starts, with what to do about it."""
        c = self.config
        if c.cluster not in CLUSTERS:
            raise ValueError(f"cluster must be one of {CLUSTERS}, not {c.cluster!r}")
        if c.cluster != "real":
            return
        from rlpipe.local.controlplane import missing_reason

        reason = missing_reason()
        if reason:
            raise RuntimeError(f"the real control plane cannot start: {reason}")
        refuse_faults(c.cluster, c.faults, c.scenario_file)

    def _cluster_endpoints(self, ready: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
        """The functions' way into the cluster, and the endpoints to show: plain HTTP to the double;
        on the real plane the pipeline's identity's kubeconfig (TLS and a client certificate)."""
        if ready.get("cluster") != "real":
            self.say(f"[local] Kubernetes API double + cluster simulator (SIMULATED TPU) on {ready['kube']}")
            return {"kubernetes-api (simulated cluster)": ready["kube"]}
        env.update(RLPIPE_KUBE_URL="", RLPIPE_KUBECONFIG=ready["kubeconfig"])
        self.say(
            f"[local] real Kubernetes control plane on {ready['kube']} (nodes, containers and MaxText PLAYED)"
        )
        return {
            "kubernetes-api (real control plane)": ready["kube"],
            "kubeconfig (pipeline identity)": ready["kubeconfig"],
            "kubeconfig (admin)": ready["admin_kubeconfig"],
        }

    def _start_cloud_logging(self, port: int) -> None:
        """Cloud Logging's ``entries.list`` over every container line both clusters keep (GKE
        ships each to Cloud Logging), so an attempt's log outlives its pods here too."""
        c = self.config
        folder = str(self.logs / CONTAINER_LOGS)
        argv = [sys.executable, "-m", "rlpipe.local.cloud_logging", "--folder", folder]
        argv += ["--port", str(port), "--project", c.project, "--location", c.location]
        child = Child(
            "cloud-logging",
            argv,
            log_path=self.logs / "cloud-logging.log",
            cwd=ROOT,
            die_with_parent=not c.detached,
        ).start()
        self.children["cloud-logging"] = child
        child.wait_ready(http_ready(f"http://127.0.0.1:{port}/", lambda status, body: True), timeout=60)
        self.say(f"[local] Cloud Logging (entries.list) on 127.0.0.1:{port}")

    def _events_mode(self) -> tuple[bool, str]:
        if self.config.events != "watcher":
            pubsub.build_pstest(self.say)
        reason = pubsub.unavailable_reason()
        if self.config.events == "watcher":
            return False, "bucket watcher (requested); GCS notifications are simulated by listing buckets"
        if reason is None:
            return True, "fake-gcs-server notifications through Pub/Sub"
        if self.config.events == "pubsub":
            raise RuntimeError(f"Pub/Sub requested but unavailable: {reason}")
        return False, f"bucket watcher, a fallback: Pub/Sub is unavailable ({reason})"

    def _create_topics(self) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import pubsub_v1

        assert self.pubsub is not None
        os.environ["PUBSUB_EMULATOR_HOST"] = self.pubsub.host
        publisher = pubsub_v1.PublisherClient()
        subscriber = pubsub_v1.SubscriberClient()
        for topic in (
            self.config.gcs_topic,
            self.config.requests_topic,
            self.config.status_topic,
            *self._team_topics(),
        ):
            with contextlib.suppress(gexc.AlreadyExists):
                publisher.create_topic(name=publisher.topic_path(self.config.project, topic))
        status_sub = subscriber.subscription_path(self.config.project, f"{self.config.status_topic}-cli")
        with contextlib.suppress(gexc.AlreadyExists):
            subscriber.create_subscription(
                name=status_sub, topic=publisher.topic_path(self.config.project, self.config.status_topic)
            )

    def _team_topics(self) -> list[str]:
        """Each declared team's requests topic (``rlpipe-requests-<team>``, or the one it names)."""
        return [t.topic_id for t in self.teams.teams] if self.teams else []

    def _create_buckets(self) -> None:
        assert self.gcs is not None
        for bucket in (self.config.requests_bucket, self.config.artifacts_bucket, self.config.state_bucket):
            response = requests.post(
                f"{self.gcs.url}/storage/v1/b",
                params={"project": self.config.project},
                json={"name": bucket},
                timeout=10,
            )
            if response.status_code not in (200, 409):
                raise RuntimeError(
                    f"could not create bucket {bucket}: {response.status_code} {response.text}"
                )

    def _function_env(self, ports: dict[str, int]) -> dict[str, str]:
        c = self.config
        assert self.gcs is not None
        env = {
            "STORAGE_EMULATOR_HOST": self.gcs.url,
            "RLPIPE_PROJECT": c.project,
            "RLPIPE_LOCATION": c.location,
            "RLPIPE_WORKFLOW": c.workflow,
            "RLPIPE_REQUESTS_BUCKET": c.requests_bucket,
            "RLPIPE_ARTIFACTS_BUCKET": c.artifacts_bucket,
            "RLPIPE_STATE_BUCKET": c.state_bucket,
            "RLPIPE_WORKFLOWS_ENDPOINT": f"127.0.0.1:{ports['grpc']}",
            "RLPIPE_LOGGING_ENDPOINT": f"http://127.0.0.1:{ports['logging']}",
            "RLPIPE_KUBE_URL": f"http://127.0.0.1:{ports['kube']}",
            "RLPIPE_KUBECONFIG": "",  # the real plane's way in (set once it is up); never inherited
            "RLPIPE_CALLBACK_TIMEOUT_SECONDS": str(c.poll_seconds),
            "RLPIPE_REQUESTS_TOPIC": c.requests_topic,
            "RLPIPE_LOCAL": "1",
            # Your own machine runs your own reward functions (docs/security.md): on, unlike a
            # deployment's default.
            "RLPIPE_ALLOW_USER_CODE": "true" if LOCAL_ALLOWS_USER_CODE else "false",
            "RLPIPE_STAGE_URL": f"http://127.0.0.1:{ports['stage']}/",
            "RLPIPE_INTAKE_MESSAGE_URL": f"http://127.0.0.1:{ports['intake_message']}/",
            "HF_ENDPOINT": f"http://127.0.0.1:{ports['hub']}",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_OFFLINE": "0",
            "PYTHONUNBUFFERED": "1",
            # where `rlpipe report` and `compare` write a page without -o (cli/output_files.py)
            "RLPIPE_PAGES_DIR": str(self.root / "pages"),
        }
        if self.pubsub:
            env["PUBSUB_EMULATOR_HOST"] = self.pubsub.host
            env["RLPIPE_STATUS_TOPIC"] = c.status_topic
        # The declaration, as Terraform hands it to the functions (infra/terraform/functions.tf);
        # always set, so a stack without teams never inherits the shell's.
        operator = f"serviceAccount:{identities.operator_account(c.project)}"  # the stack's CLI calls as it
        env["RLPIPE_TEAMS"] = self.teams.env_json_operated_by(operator) if self.teams else ""
        # the identities it plays, and the key it signs their tokens with (local/identities.py)
        key = identities.ensure_signing_key(self.root / "identity")
        certs_url = f"http://127.0.0.1:{ports['control']}{identities.CERTS_PATH}"
        return env | identities.played(c.project, key, certs_url, env["RLPIPE_STAGE_URL"])


# ---- `down` and `status` from another process --------------------------------------------------


def down(root: Path) -> list[str]:
    path = state_path(root.resolve())
    if not path.exists():
        return []
    state = StackState.load(path)
    stopped = []
    for name, pid in reversed(list(state.pids.items())):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
            stopped.append(name)
    deadline = time.monotonic() + 10
    for pid in state.pids.values():
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    return stopped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def health(state: StackState) -> dict[str, bool]:
    return {name: _alive(pid) for name, pid in state.pids.items()}
