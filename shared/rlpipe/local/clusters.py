"""The two clusters the local stack runs on, behind the few calls its core and control API make,
and the programs their convert and export pods run.

``double`` (the default): the Kubernetes API double and the cluster simulator, in the core's own
process; it plays the controllers, Kueue, the nodes and the programs, and injects faults.
``real``: the real control plane (``rlpipe.local.controlplane.local_cluster``): the real API
server, controllers, scheduler, JobSet and Kueue; only nodes, containers and programs are played,
and it injects no faults.

Programs (``--programs``): ``played`` (the default), or ``real`` on the double: convert and export
run MaxText's real converters from the programs venv on the tiny Gemma 4 fixture
(``rlpipe.local.simulator.real_programs``), train stays played. They need a Python >= 3.12 (the
programs tier's, ``programs/venv.sh``) and that venv built; both are checked before anything starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Protocol

from rlpipe.core.teams import Team, Teams, parse_teams
from rlpipe.local.simulator.real_programs import RealPrograms
from rlpipe.local.simulator.timing import Timing

CLUSTERS = ("double", "real")
PROGRAMS = ("played", "real")
ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny_gemma4"  # programs/make_tiny_gemma4.py writes it
VENV_SCRIPT = ROOT / "programs" / "venv.sh"
TIMINGS = ("demo", "fast", "zero")
# The Secrets an operator creates before the first run (docs/deploy.md): the read token every stage
# uses, and the publish stage's own write token. The Hub double accepts any token it has not
# revoked or marked read-only.
LOCAL_HUB_SECRETS = {"hf-token": "local-read-token", "hf-write-token": "local-write-token"}


def timing(name: str) -> Timing:
    """Durations by name: ``demo`` (a run in seconds), ``fast`` (tests), ``zero`` (benchmarks)."""
    if name not in TIMINGS:
        raise ValueError(f"timing must be one of {sorted(TIMINGS)}, not {name!r}")
    return {"zero": Timing.zero, "fast": Timing.fast}.get(name, Timing)()


class NoFaults(ValueError):
    """Faults are the simulator's: the real control plane plays none."""


def refuse_faults(cluster: str, faults: Any, scenario_file: Any) -> None:
    """The one rule, checked by the demo, the stack and the core alike: faults need the double."""
    if cluster == "real" and (faults or scenario_file):
        raise NoFaults(NO_FAULTS)


class NoRealPrograms(ValueError):
    """The real programs cannot run here (or not on this cluster); the message names the fix."""


def programs_cache() -> Path:
    """Where ``make programs`` keeps the programs venv (``PROGRAMS_CACHE``, as the tier reads it)."""
    return Path(os.environ.get("PROGRAMS_CACHE", ROOT / ".cache" / "programs"))


def refuse_real_programs(cluster: str, programs: str) -> None:
    """What ``--programs real`` needs before anything is built: a known setting, the double, and a
    Python >= 3.12 to build the programs venv with (``programs/venv.sh --find-python``)."""
    if programs not in PROGRAMS:
        raise NoRealPrograms(f"programs must be one of {', '.join(PROGRAMS)}, not {programs!r}")
    if programs != "real":
        return
    if cluster == "real":
        raise NoRealPrograms(REAL_PROGRAMS_ON_THE_DOUBLE)
    found = subprocess.run([str(VENV_SCRIPT), "--find-python"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise NoRealPrograms(
            "the real MaxText programs need Python 3.12 or 3.13 and none is installed: install one "
            "(pyenv install 3.12) or name one with PROGRAMS_PYTHON, or run with played programs "
            "(PROGRAMS=played, the default)"
        )


def real_programs(cluster: str, programs: str) -> RealPrograms | None:
    """The real programs' setting for a stack that starts now (None: played), checked: the venv
    must be built (``make programs`` builds it; ``make demo PROGRAMS=real`` builds it first)."""
    refuse_real_programs(cluster, programs)
    if programs != "real":
        return None
    venv = programs_cache() / "venv"
    if not (venv / ".stamp").exists() or not (venv / "bin" / "python").exists():
        raise NoRealPrograms(
            f"the programs venv is not built at {venv}: run `make programs` (or programs/venv.sh)"
        )
    return RealPrograms(venv / "bin" / "python", FIXTURE)


REAL_PROGRAMS_ON_THE_DOUBLE = (
    "the real MaxText programs run in the cluster simulator's pods, on the double only; the real "
    "control plane's pod player plays them (use --cluster double with --programs real)"
)


class StackCluster(Protocol):
    """What the core and its control API need of a cluster."""

    name: str

    def ready(self) -> dict[str, Any]: ...
    def placed(self) -> dict[str, str]: ...
    def set_timing(self, timing: Timing) -> None: ...
    def set_scenario(self, document: dict[str, Any], source: str) -> dict[str, Any]: ...
    def scenario(self) -> dict[str, Any]: ...
    def release(self, run: str) -> None: ...
    def drops_event(self, bucket: str, name: str) -> bool: ...
    def stop(self) -> None: ...


class DoubleCluster:
    """The Kubernetes API double and the cluster simulator (everything simulated, and labelled so)."""

    name = "double"

    def __init__(self, config: dict[str, Any], storage: Any, hub_url: str) -> None:
        from rlpipe.local.controlplane.deploy import secret_documents
        from rlpipe.local.kube_api import KubeApiServer
        from rlpipe.local.pod_logs import CONTAINER_LOGS, ContainerLogFolder
        from rlpipe.local.simulator import ClusterSimulator
        from rlpipe.local.teams_declaration import secret_documents as team_secret_documents

        self.kube = KubeApiServer(port=config["kube_port"])
        self.kube.start()
        secrets = secret_documents(LOCAL_HUB_SECRETS, config.get("namespace", "rlpipe"))
        for team in declared_teams(config):  # the double needs no Namespace: any name is one
            secrets += team_secret_documents(team)
        for secret in secrets:
            self.kube.create("secrets", secret, namespace=secret["metadata"]["namespace"])
        real = config.get("real_programs")
        self.simulator = ClusterSimulator(
            self.kube,
            storage,
            scenario=_scenario(config),
            timing=timing(config.get("timing", "demo")),
            hub_url=hub_url,
            real_programs=RealPrograms(Path(real["python"]), Path(real["fixture"])) if real else None,
            # where the real plane's played containers write theirs: the local Cloud Logging's source
            container_logs=ContainerLogFolder(Path(config["logs"]) / CONTAINER_LOGS)
            if config.get("logs")
            else None,
        )
        self.simulator.start()

    def ready(self) -> dict[str, Any]:
        return {"cluster": self.name, "kube": self.kube.url}

    def placed(self) -> dict[str, str]:
        """The pipeline's Jobs and JobSets in every namespace (the simulator watches them all)."""
        return {
            o["metadata"]["name"]: o["metadata"]["namespace"]
            for r in ("jobs", "jobsets")
            for o in self.kube.list(r)
            if "rlpipe.dev/run" in (o["metadata"].get("labels") or {})
        }

    def set_timing(self, value: Timing) -> None:
        self.simulator.env.timing = value

    def set_scenario(self, document: dict[str, Any], source: str) -> dict[str, Any]:
        from rlpipe.local.simulator import Scenario

        self.simulator.set_scenario(Scenario.from_document(document, source=source))
        return self.scenario()

    def scenario(self) -> dict[str, Any]:
        return dict(self.simulator.scenario.to_document())

    def release(self, run: str) -> None:
        self.simulator.release(run)

    def drops_event(self, bucket: str, name: str) -> bool:
        return bool(self.simulator.drops_event(name, bucket))

    def stop(self) -> None:
        self.simulator.stop()
        self.kube.stop()


class RealStackCluster:
    """The real control plane, deployed, with played nodes and programs (no faults)."""

    name = "real"

    def __init__(self, config: dict[str, Any], storage: Any, hub_url: str) -> None:
        from rlpipe.local.controlplane.local_cluster import RealCluster

        refuse_faults(self.name, config.get("faults"), config.get("scenario_file"))
        if config.get("real_programs"):
            raise NoRealPrograms(REAL_PROGRAMS_ON_THE_DOUBLE)
        self.cluster = RealCluster(
            Path(config["cluster_root"]),
            Path(config["logs"]),
            storage_client=storage,
            timing=timing(config.get("timing", "demo")),
            hub_url=hub_url,
            secrets=LOCAL_HUB_SECRETS,
            teams=Teams(teams=tuple(declared_teams(config))),
            say=lambda text: print(text, flush=True),
        ).start()

    def ready(self) -> dict[str, Any]:
        plane = self.cluster.plane
        assert plane is not None
        pids = {f"controlplane {n}": c.proc.pid for n, c in plane.children.items() if c.proc is not None}
        return {
            "cluster": self.name,
            "kube": self.cluster.url,
            "kubeconfig": str(self.cluster.stage_kubeconfig),
            "admin_kubeconfig": str(plane.kubeconfig()),
            "pids": pids,
        }

    def placed(self) -> dict[str, str]:
        return self.cluster.placed()

    def set_timing(self, value: Timing) -> None:
        self.cluster.set_timing(value)

    def set_scenario(self, document: dict[str, Any], source: str) -> dict[str, Any]:
        if document.get("faults"):
            raise NoFaults(NO_FAULTS)
        return self.scenario()

    def scenario(self) -> dict[str, Any]:
        return {"faults": []}

    def release(self, run: str) -> None:
        raise NoFaults(NO_FAULTS)  # nothing is held where no fault is played

    def drops_event(self, bucket: str, name: str) -> bool:
        return False

    def stop(self) -> None:
        for error in self.cluster.errors[-20:]:  # what the pod player could not do, for the core's log
            print(f"[controlplane] pod player: {error}", flush=True)
        self.cluster.stop()


NO_FAULTS = (
    "faults are played by the cluster simulator, on the double only; the real control plane "
    "injects none (use --cluster double)"
)


def start(config: dict[str, Any], storage: Any, hub_url: str) -> StackCluster:
    kind = config.get("cluster", "double")
    if kind == "real":
        return RealStackCluster(config, storage, hub_url)
    if kind == "double":
        return DoubleCluster(config, storage, hub_url)
    raise ValueError(f"cluster must be one of {CLUSTERS}, not {kind!r}")


def declared_teams(config: dict[str, Any]) -> list[Team]:
    """The teams of the stack's declaration (``rlpipe local up --teams``; none by default)."""
    return list(parse_teams(config.get("teams") or {}, source="--teams"))


def _scenario(config: dict[str, Any]) -> Any:
    from rlpipe.local.simulator import Scenario

    scenario = Scenario.load(config["scenario_file"]) if config.get("scenario_file") else Scenario()
    if config.get("faults"):
        extra = Scenario.from_strings(config["faults"])
        scenario = Scenario.from_document(
            {"faults": [*scenario.to_document()["faults"], *extra.to_document()["faults"]]}
        )
    return scenario
