"""What a request names that belongs to the deployment, not to the run: where it publishes, and the
Kueue queue, reservation and node pools its workloads use.

Why allowlists: a request could name ``publish.repo`` in any organisation the deployment's shared
write token can push to, a LocalQueue whose ClusterQueue's quota belongs to another team, a
reservation someone else pays for, or a node pool sized and secured for another workload. Each is
checked against what the deployment lists; the default is what the presets name (``user-queue``,
flex-start's ``flex-queue``, the ``cpu-np`` pool, no reservation) and, for publishing, the
organisation the examples publish to; nothing else.

Entries are compared exactly: a Kubernetes name is case-sensitive, and a Hub organisation's
spelling is what the token's permissions are granted on. A publish entry is ``org/`` (any
repository of that organisation) or ``org/name`` (that one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from rlpipe.core import presets
from rlpipe.core.problems import Problem
from rlpipe.core.request.base import HF_REPO_PATTERN
from rlpipe.core.request.model import Request

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PUBLISH_ENTRY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/([A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$")

SETTINGS = {
    "publish": "RLPIPE_ALLOWED_PUBLISH_REPOS",
    "queues": "RLPIPE_ALLOWED_QUEUES",
    "reservations": "RLPIPE_ALLOWED_RESERVATIONS",
    "node_pools": "RLPIPE_ALLOWED_NODE_POOLS",
}


def _named_by_presets() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The queues, reservations and node pools the presets (and their provisioning defaults) name."""
    queues, reservations, pools = [presets.FLEX_START_QUEUE], [], []
    for name in presets.PRESET_NAMES:
        preset = presets.preset_defaults(name)
        queues.append(preset["tpu"]["queue"])
        if preset["tpu"]["reservation"]:
            reservations.append(preset["tpu"]["reservation"])
        pools += [preset["cpu_job"]["node_pool"], preset["pathways"]["head_node_pool"]]
    return tuple(sorted(set(queues))), tuple(sorted(set(reservations))), tuple(sorted(set(pools)))


DEFAULT_QUEUES, DEFAULT_RESERVATIONS, DEFAULT_NODE_POOLS = _named_by_presets()
# The organisation examples/ publish to; a deployment lists its own (terraform allowed_publish_repos).
DEFAULT_PUBLISH_REPOS = ("rlpipe-demo/",)


@dataclass(frozen=True)
class Targets:
    """A deployment's lists of what requests may name outside the run."""

    publish_repos: tuple[str, ...] = DEFAULT_PUBLISH_REPOS
    queues: tuple[str, ...] = DEFAULT_QUEUES
    reservations: tuple[str, ...] = DEFAULT_RESERVATIONS
    node_pools: tuple[str, ...] = DEFAULT_NODE_POOLS
    # Whose lists these are, as a problem names them: the deployment's settings, or a team's
    # (core.teams: ``teams.<name>.queues``...).
    names: Mapping[str, str] = field(default_factory=lambda: dict(SETTINGS))
    holder: str = "this deployment"

    def setting_problems(self) -> list[Problem]:
        """Entries that are not names of their kind (``*`` included), checked when the deployment loads."""
        found = []
        for setting, entries, pattern, shape in (
            ("publish", self.publish_repos, _PUBLISH_ENTRY, "org/ or org/name"),
            ("queues", self.queues, _DNS_LABEL, "a LocalQueue name"),
            ("reservations", self.reservations, _DNS_LABEL, "a reservation name"),
            ("node_pools", self.node_pools, _DNS_LABEL, "a node pool name"),
        ):
            for entry in entries:
                if not pattern.match(entry):
                    found.append(
                        Problem(
                            self.names[setting],
                            f"{entry!r} is not {shape}" + (" (no wildcard is read)" if "*" in entry else ""),
                            f"list each allowed one as {shape}",
                        )
                    )
        return found

    def problems(self, request: Request) -> Iterator[Problem]:
        """Everything ``request`` names outside the run that this deployment does not list."""
        if request.publish is not None and not self._publishes_to(request.publish.repo):
            yield Problem(
                "publish.repo",
                f"{request.publish.repo} is not a repository {self.holder} publishes to",
                f"publish under {' or '.join(self.publish_repos) or '(no repository is allowed)'}, or ask the "
                f"operator to list it in {self.names['publish']}",
            )
        yield from self._listed("tpu.queue", request.tpu.queue, self.queues, "queues", "Kueue LocalQueue")
        if request.tpu.reservation is not None:
            yield from self._listed(
                "tpu.reservation", request.tpu.reservation, self.reservations, "reservations", "reservation"
            )
        yield from self._listed(
            "cpu_job.node_pool", request.cpu_job.node_pool, self.node_pools, "node_pools", "node pool"
        )
        yield from self._listed(
            "pathways.head_node_pool",
            request.pathways.head_node_pool,
            self.node_pools,
            "node_pools",
            "node pool",
        )

    def _publishes_to(self, repo: str) -> bool:
        if not HF_REPO_PATTERN.match(repo):
            return False  # the schema says why
        org = repo.split("/", 1)[0] + "/"
        return any(entry in (repo, org) for entry in self.publish_repos)

    def _listed(
        self, path: str, value: str, allowed: tuple[str, ...], setting: str, kind: str
    ) -> Iterator[Problem]:
        if value not in allowed:
            yield Problem(
                path,
                f"{value} is not a {kind} {self.holder} lets requests use",
                f"use one of: {', '.join(allowed) or '(none)'}, or ask the operator to list it in "
                f"{self.names[setting]}",
            )
