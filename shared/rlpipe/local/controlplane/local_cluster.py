"""The real control plane as the local stack's cluster (``rlpipe local up --cluster real``,
``make demo CLUSTER=real``).

The stack's core process starts it in place of the Kubernetes API double and the simulator: the
plane with what a deploy installs (``deploy.py``) and the Secrets the workloads reference,
GKE-shaped nodes (the ``cpu-np`` pool and one v6e slice of the demo's topology), the kubelet's log
endpoint, and the pod player with the program script. From then on the pipeline's functions reach
it as the pipeline's identity (``STAGE_GSA``, a client certificate, through ``RLPIPE_KUBECONFIG``)
and the real controllers run every workload; only the nodes, the containers and what runs in them
are played (``programs.py``). Everything lives under ``root``; the logs go to the stack's folder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlpipe.core.teams import Teams
from rlpipe.local.controlplane.cluster import ControlPlane
from rlpipe.local.controlplane.deploy import deploy
from rlpipe.local.controlplane.kubelet import PodPlayer
from rlpipe.local.controlplane.log_endpoint import LogEndpoint, node_endpoint
from rlpipe.local.controlplane.nodes import cpu_pool, tpu_chips, tpu_slice
from rlpipe.local.controlplane.programs import PodLogs, ProgramScript, SecretReader, Services
from rlpipe.local.simulator.gcs_io import GcsIO
from rlpipe.local.simulator.timing import Timing

# The topology of the demo's request (examples/gemma4-26b-v6e-32.yaml, preset v6e-32): one slice
# of eight hosts. A request for another topology stays queued, as on a cluster without that pool.
TOPOLOGY = "4x8"
RUN_LABEL = "rlpipe.dev/run"


class RealCluster:
    """Start with :meth:`start`, stop with :meth:`stop`; ``stage_kubeconfig`` is the pipeline's way in."""

    def __init__(
        self,
        root: Path,
        logs: Path,
        *,
        storage_client: Any,
        timing: Timing,
        hub_url: str = "",
        secrets: Mapping[str, str] | None = None,
        topology: str = TOPOLOGY,
        teams: Teams | None = None,
        say: Any = None,
    ) -> None:
        self.root = root
        self.logs = logs
        self.storage_client = storage_client
        self.initial_timing = timing
        self.hub_url = hub_url
        self.secrets = dict(secrets or {})
        self.topology = topology
        self.teams = teams or Teams()
        self.say = say or (lambda text: None)
        self.plane: ControlPlane | None = None
        self.endpoint: LogEndpoint | None = None
        self.player: PodPlayer | None = None
        self.script: ProgramScript | None = None
        self.stage_kubeconfig: Path | None = None

    def start(self) -> RealCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        from kubernetes import client

        shutil.rmtree(self.root, ignore_errors=True)  # a previous stack's etcd and CA are not this one's
        self.root.mkdir(parents=True)
        plane = self.plane = ControlPlane(self.root, say=self.say)
        plane.logs = self.logs  # one log folder for the whole stack
        plane.start()
        self.stage_kubeconfig = deploy(plane, secrets=self.secrets)
        specs = [*cpu_pool(), *tpu_slice(self.topology)]
        if self.teams.declared:  # each team's namespace and queue, as a deploy renders them
            from rlpipe.local.controlplane.team_namespaces import team_documents

            chips = tpu_chips(specs)
            plane.apply(team_documents(self.teams, chips))
            self.say(
                f"[controlplane] team namespaces and ClusterQueues (cohort rlpipe-teams, {chips} chips): "
                + ", ".join(f"{t.k8s_namespace} {t.quota.chips if t.quota else 0}" for t in self.teams)
            )
        nodes = plane.add_nodes(specs)
        assert plane.ca is not None
        pod_logs = PodLogs(self.logs / "pods")
        certificate = plane.ca.issue("kubelet", "kubelet", server=True, hosts=("127.0.0.1", "localhost"))
        self.endpoint = LogEndpoint(pod_logs, certificate).start()
        core = client.CoreV1Api(plane.api_client())
        for name in sorted(nodes):
            core.patch_node_status(name, node_endpoint(self.endpoint.port))
        services = Services(GcsIO(self.storage_client), pod_logs, self.hub_url, SecretReader(core))
        self.script = ProgramScript(services, self.initial_timing)
        self.player = PodPlayer(plane.kubeconfig(), nodes, self.script).start()
        self.say(f"[controlplane] {len(nodes)} nodes (cpu-np, v6e {self.topology}); pods played")

    def stop(self) -> None:
        if self.player is not None:
            self.player.stop()
            self.player = None
        if self.endpoint is not None:
            self.endpoint.stop()
            self.endpoint = None
        if self.plane is not None:
            self.plane.stop()
            self.plane = None

    @property
    def url(self) -> str:
        assert self.plane is not None
        return self.plane.url

    def set_timing(self, timing: Timing) -> None:
        """Durations of the programs in pods started from now on."""
        assert self.script is not None
        self.script.timing = timing

    @property
    def timing(self) -> Timing:
        return self.script.timing if self.script is not None else self.initial_timing

    def placed(self) -> dict[str, str]:
        """The pipeline's Jobs and JobSets, each with its namespace (the deployment's or a team's)."""
        assert self.plane is not None
        out = self.plane.kubectl(
            "get", "jobs.batch,jobsets.jobset.x-k8s.io", "--all-namespaces", "-l", RUN_LABEL, "-o", "json"
        )
        return {
            item["metadata"]["name"]: item["metadata"]["namespace"]
            for item in json.loads(out).get("items") or []
        }

    @property
    def errors(self) -> list[str]:
        """What the pod player could not do (an API call that failed under it)."""
        return list(self.player.errors) if self.player is not None else []
