"""The pipeline's only door to Kubernetes: idempotent launch, status as (phase, failure class), cleanup.

* :mod:`~rlpipe.cluster.client`: :class:`ClusterClient` (idempotent apply, reads, status, log tail,
  delete by run label) with the API retry loop, and the Google auth/CA plumbing for GKE;
* :mod:`~rlpipe.cluster.api_errors`: which API answers are retried, ``Retry-After``, and the
  classified failure a person reads for the rest;
* :mod:`~rlpipe.cluster.status`: Job/JobSet/pod/Kueue evidence (read as facts by
  :mod:`~rlpipe.cluster.evidence`) → one :class:`WorkloadStatus`, by the rules of
  ``rlpipe.core.failure_rules.workload`` (where the precedence is documented);
* :mod:`~rlpipe.cluster.rbac`: every API call the package makes (:data:`RBAC_RULES`), from which
  infra's Role is checked;
* :mod:`~rlpipe.cluster.kinds`: the shared vocabulary (kinds, API groups, controller labels).

``kubernetes`` and ``google.auth`` are imported on first use: importing this package (e.g. for
:class:`WorkloadStatus` in a Cloud Function that never talks to the cluster) costs nothing.
"""

from __future__ import annotations

from rlpipe.cluster.client import ClusterClient
from rlpipe.cluster.rbac import RBAC_RULES, RbacRule, role_rules
from rlpipe.cluster.status import RunObject, WorkloadStatus

__all__ = ["RBAC_RULES", "ClusterClient", "RbacRule", "RunObject", "WorkloadStatus", "role_rules"]
