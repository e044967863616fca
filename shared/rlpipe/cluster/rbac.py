"""Every Kubernetes API call the package makes, as (apiGroup, resource, verb) rules.

infra's Role (``infra/cluster/k8s/rbac.yaml``) is checked against :data:`RBAC_RULES`, and
:func:`role_rules` renders them as a Role's ``rules``.
"""

from __future__ import annotations

from typing import NamedTuple

from rlpipe.cluster.kinds import (
    JOB_GROUP,
    JOB_PLURAL,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    KUEUE_GROUP,
    KUEUE_WORKLOAD_PLURAL,
    Obj,
)


class RbacRule(NamedTuple):
    api_group: str
    resource: str
    verb: str


# Every (apiGroup, resource, verb) this package calls; infra's Role is checked against it, and a
# test records every request the client makes and asserts it is covered.
RBAC_RULES: frozenset[RbacRule] = frozenset(
    RbacRule(group, resource, verb)
    for group, resource, verbs in (
        (JOB_GROUP, JOB_PLURAL, ("create", "get", "list", "delete")),
        (JOBSET_GROUP, JOBSET_PLURAL, ("create", "get", "list", "delete")),
        ("", "pods", ("list",)),
        ("", "events", ("list",)),
        ("", "pods/log", ("get",)),
        # what Kueue reserved for a finished job (core.chip_hours.reserved_by_kueue)
        (KUEUE_GROUP, KUEUE_WORKLOAD_PLURAL, ("list",)),
    )
    for verb in verbs
)


def role_rules() -> list[Obj]:
    """``RBAC_RULES`` as the ``rules`` of a Kubernetes Role (one rule per group and resource)."""
    grouped: dict[tuple[str, str], set[str]] = {}
    for rule in RBAC_RULES:
        grouped.setdefault((rule.api_group, rule.resource), set()).add(rule.verb)
    return [{"apiGroups": [g], "resources": [r], "verbs": sorted(v)} for (g, r), v in sorted(grouped.items())]
