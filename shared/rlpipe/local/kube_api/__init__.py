"""A Kubernetes API double: a real HTTP server speaking the Kubernetes REST protocol.

No kube-apiserver can run on a laptop or in CI here, and the mocks on PyPI either ignore
label selectors, return 200 where the client expects 201, or never end a watch (see
reference/emulators.md §4). The pipeline must be tested with the *real* ``kubernetes``
client, so this package serves the few resources rlpipe touches over plain HTTP/1.1:

* ``batch/v1`` Jobs and ``jobset.x-k8s.io/v1alpha2`` JobSets: create, get, list, replace,
  patch (merge, strategic-merge, JSON patch), ``/status``, delete, delete-collection, watch;
* ``v1`` Pods and Events: read-only over HTTP (get, list, watch); a cluster simulator in the
  same process writes them through the Python API of :class:`KubeApiServer`.

Server behaviour that callers depend on is real: uid/resourceVersion/creationTimestamp/
generation, 201/409/404/422 with proper ``Status`` bodies, optimistic concurrency, label and
field selectors, watch with resourceVersion/timeoutSeconds/410 Expired, cascading deletion,
finalizers. Approximations are named where they are made (search for "Approximation").

Modules: :mod:`.resources` (the kinds served, label constants), :mod:`.errors` (``Status``
failures), :mod:`.selectors`, :mod:`.patch`, :mod:`.objects` (metadata, defaulting,
ownership), :mod:`.watch` (events), :mod:`.store` (objects, resourceVersions, garbage
collection, watch history), :mod:`.http` (routing, handlers, request records), :mod:`.server`
(:class:`KubeApiServer`, the Python API), :mod:`.validation` (the offline schema checks a real
API server and JobSet's webhook make). It serves no discovery documents (``/version``, ``/apis``):
the ``kubernetes`` client rlpipe uses never asks for them, and kubectl is pointed only at the real
control plane.
"""

from __future__ import annotations

from .errors import KubeApiError
from .http import RequestRecord
from .patch import json_patch, merge_patch
from .resources import JOB_NAME_LABELS, JOB_UID_LABELS, JOBSET_NAME_LABEL, JOBSET_UID_LABEL
from .selectors import LabelSelector
from .server import KubeApiServer
from .store import no_validation
from .watch import WatchEvent

__all__ = [
    "JOBSET_NAME_LABEL",
    "JOBSET_UID_LABEL",
    "JOB_NAME_LABELS",
    "JOB_UID_LABELS",
    "KubeApiError",
    "KubeApiServer",
    "LabelSelector",
    "RequestRecord",
    "WatchEvent",
    "json_patch",
    "merge_patch",
    "no_validation",
]
