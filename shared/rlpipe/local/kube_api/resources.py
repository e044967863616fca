"""The resource types the API double serves (the kinds table) and the labels it relies on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

# Labels by which cascading deletion finds a workload's pods (besides ownerReferences):
# the Job controller sets both job-name labels and the controller-uid labels on its pods;
# the JobSet controller sets jobset-name (and jobset-uid) on its child Jobs and their pods.
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"


@dataclass(frozen=True)
class Resource:
    """One served resource type; everything path- and message-shaped derives from it."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    singular: str
    http_writable: bool  # pods/events are written only by the in-process simulator
    validated: bool  # run the injected validator on every write
    has_status: bool  # has a /status subresource
    field_labels: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})
    # Paths under spec that may not change after create (approximation of the real rules):
    immutable: tuple[str, ...] = ()
    # ...except these, which may change while the object is suspended.
    mutable_when_suspended: tuple[str, ...] = ()
    strategic_merge: bool = True  # custom resources reject strategic-merge patches

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``jobs.batch``: the name the apiserver uses in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


JOBS = Resource(
    "batch",
    "v1",
    "jobs",
    "Job",
    "job",
    http_writable=True,
    validated=True,
    has_status=True,
    field_labels=frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
    immutable=("selector", "completionMode", "podFailurePolicy", "template"),
    mutable_when_suspended=("template",),
)
JOBSETS = Resource(
    "jobset.x-k8s.io",
    "v1alpha2",
    "jobsets",
    "JobSet",
    "jobset",
    http_writable=True,
    validated=True,
    has_status=True,
    immutable=("replicatedJobs",),
    mutable_when_suspended=("replicatedJobs",),
    strategic_merge=False,
)
PODS = Resource(
    "",
    "v1",
    "pods",
    "Pod",
    "pod",
    http_writable=False,
    validated=False,
    has_status=True,
    field_labels=frozenset(
        {
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
)
EVENTS = Resource(
    "",
    "v1",
    "events",
    "Event",
    "event",
    http_writable=False,
    validated=False,
    has_status=False,
    field_labels=frozenset(
        {
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
        }
    ),
)
# Kueue's Workload (one per queued Job/JobSet, owned by it): written only by the simulator, which
# plays Kueue. v1beta2 is what the deployed Kueue serves (infra/cluster/k8s/kueue.yaml); the
# condition types and reasons are the same as v1beta1's (Kueue v0.17.8 apis/kueue/v1beta2/
# workload_types.go:1020-1038, v0.14.8 apis/kueue/v1beta1/workload_types.go:608-729).
WORKLOADS = Resource(
    "kueue.x-k8s.io",
    "v1beta2",
    "workloads",
    "Workload",
    "workload",
    http_writable=False,
    validated=False,
    has_status=True,
    strategic_merge=False,
)
# Secrets: created by the operator (here the local stack), read by the kubelet (the simulator)
# for secretKeyRef env values; the pipeline never writes or reads one over HTTP.
SECRETS = Resource(
    "", "v1", "secrets", "Secret", "secret", http_writable=False, validated=False, has_status=False
)
RESOURCES: tuple[Resource, ...] = (JOBS, JOBSETS, PODS, EVENTS, WORKLOADS, SECRETS)
# The finalizer the garbage collector holds an owner with while its dependents are deleted first
# (propagationPolicy Foreground).
FOREGROUND_FINALIZER = "foregroundDeletion"


def resolve_resource(name: str | Resource) -> Resource:
    """Accept ``"jobs"``, ``"Job"``, ``"job"`` or a :class:`Resource` (for the Python API)."""
    if isinstance(name, Resource):
        return name
    wanted = name.lower()
    for res in RESOURCES:
        if wanted in (res.plural, res.singular, res.kind.lower()):
            return res
    raise ValueError(f"unknown resource {name!r}; served: {[r.plural for r in RESOURCES]}")
