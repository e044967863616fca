"""One cluster client over several namespaces: the deployment's and each team's (core.teams).

Why reconcile needs it: a team's workloads live in its own namespace, and a pass must see every
run's workloads to find orphans and stuck ones, wherever they are. Every other operation acts on
one run, whose namespace its record names (``control.stage.service``); only the pass looks
across all of them. Each object keeps the namespace it was listed in, so a delete goes where the
object is, never to a namespace where another object happens to share its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.kinds import Kind
from rlpipe.cluster.status import RunObject


@dataclass
class AcrossNamespaces:
    """``list_run_objects``, ``delete`` and ``delete_run`` of a ClusterClient, over ``namespaces``."""

    client: ClusterClient
    namespaces: tuple[str, ...]
    _where: dict[tuple[Kind, str], str] = field(default_factory=dict)  # (kind, name) → its namespace
    unlisted: dict[str, str] = field(default_factory=dict)  # the last listing's failures, by namespace

    def _in(self, namespace: str) -> ClusterClient:
        return self.client if namespace == self.client.namespace else self.client.in_namespace(namespace)

    def list_run_objects(self, run_id: str | None = None) -> list[RunObject]:
        """Every namespace's run objects. A namespace that cannot be listed (not created yet: the
        declaration and the cluster's objects are applied separately) is named in ``unlisted``
        and skipped; the others are still reconciled. All of them failing raises the first error."""
        found: list[RunObject] = []
        self.unlisted = {}
        for namespace in self.namespaces:
            try:
                objects = self._in(namespace).list_run_objects(run_id)
            except Exception as exc:  # a missing namespace, a forbidden one: report, go on
                self.unlisted[namespace] = f"{type(exc).__name__}: {exc}"
                continue
            self._where.update({(o.kind, o.name): namespace for o in objects})
            found += objects
        if len(self.unlisted) == len(self.namespaces):
            raise RuntimeError(f"no namespace could be listed: {self.unlisted}")
        return found

    def delete(self, kind: Kind, name: str) -> bool:
        """Delete where the object was listed. One never listed is deleted in the first namespace
        that has it, and only there (workload names carry their run's id: no two runs share one)."""
        namespace = self._where.get((kind, name))
        if namespace is not None:
            return self._in(namespace).delete(kind, name)
        return any(self._in(ns).delete(kind, name) for ns in self.namespaces)

    def delete_run(self, run_id: str) -> list[str]:
        """A run's workloads by its label, in every namespace (names carry the run id: no clash)."""
        deleted: list[str] = []
        for namespace in self.namespaces:
            deleted += self._in(namespace).delete_run(run_id)
        return deleted


def across_teams(client: ClusterClient, team_namespaces: Any) -> ClusterClient | AcrossNamespaces:
    """The client a reconcile pass uses: the deployment's own, or one over its namespace and every
    team's when the deployment declares teams."""
    extra = tuple(ns for ns in team_namespaces if ns != client.namespace)
    return AcrossNamespaces(client, (client.namespace, *extra)) if extra else client
