"""A simulated GKE cluster for the local stack: everything here is simulated, and says so.

No TPU or Kubernetes cluster exists on a laptop or in CI, so :class:`ClusterSimulator` runs in
the same process as the Kubernetes API double (:mod:`rlpipe.local.kube_api`), watches the Jobs
and JobSets the pipeline creates through it, and plays what GKE, Kueue, the Job and JobSet
controllers, the scheduler, the kubelet and the MaxText programs would do:

* Kueue: a workload labelled ``kueue.x-k8s.io/queue-name`` is suspended at creation, gets a
  ``Workload`` object, is admitted after ``Timing.admission_delay``, and may be evicted;
* the controllers: real Pod objects (names, labels, ownerReferences, phases, conditions,
  container and native-sidecar statuses, node names), JobSet child Jobs, ``v1`` Events, Job
  and JobSet conditions, ``podFailurePolicy``/``backoffLimit``, the JobSet failure policy, TTL;
* the programs (identified from each container's command and arguments, never from labels):
  the files MaxText writes to GCS, with real names and order and tiny contents, through the
  real storage client (fake-gcs-server locally); see :mod:`.maxtext`.

Everything the simulator writes is labelled: pod log lines start with ``[simulated]``, its
logger's messages with ``simulated:``, pods and events carry the annotation
``simulator.rlpipe.dev/simulated``, JSON files say so in ``_simulated``.

Scenario files (JSON or YAML)
-----------------------------
::

    {"faults": [
        {"stage": "train", "attempt": 1, "fault": "preempt@30"},
        {"stage": "convert", "fault": "oom"},
        "export:2:exit:3",
        {"fault": "drop-events:train"}
    ]}

Each entry is a mapping (``stage``: convert | train | export; ``attempt``: a whole number, or
omitted for every attempt, matched against the workload's ``rlpipe.dev/attempt`` label;
``fault``; ``run``: a run id, or omitted for every run, matched against the workload's
``rlpipe.dev/run`` label so that concurrent runs on one stack each get their own fault) or a
CLI-style string ``<stage>[:<attempt>]:<fault>``. Faults:

``preempt@<step>[:head|:worker][:kubelet|:scheduler|:taint|:eviction-api|:podgc][:head-first]``
    A pod gets ``DisruptionTarget`` with the reason of who disrupts it (``TerminationByKubelet`` on
    node shutdown, the default; ``PreemptionByScheduler``, ``DeletionByTaintManager``,
    ``EvictionByEvictionAPI``: the pod is deleted and lingers with a deletionTimestamp until its
    containers exit 143; ``DeletionByPodGC``: its node is gone, Failed at once) and fails.
    Training: at the start of step N, or during step N's save when N is a checkpoint step
    (leaving a step directory without its commit file); ``@0`` and convert/export: at start. On
    the JobSet the victim is a TPU worker (default) or the head; a worker's Job replaces the pod
    unless its ``podFailurePolicy`` fails the Job, and the head gives up after the Pathways pipe
    timeout. ``head-first``: the pods use their whole grace period, so the head's Job fails
    before the worker's Job is ``Failed`` (the preemption race; see :mod:`.disruption`).
    Strikes once per workload.
``evict@<step>[:preempted|:pods-ready-timeout|:node-failures|:deactivated|:local-queue-stopped|:cluster-queue-stopped]``
    Kueue evicts the running workload (see :mod:`.kueue`): the Workload's ``Evicted`` (and
    ``Preempted``) conditions and ``EvictedDueTo<reason>`` (and ``Preempted``) events, the job
    suspended with Kueue's ``Stopped`` event, its pods deleted (exit 143); then it waits in its
    queue until deleted.
``provision-fail``
    flex-start's queued provisioning gets no capacity: Kueue's ProvisioningRequest admission check
    is Rejected and the Workload deactivated (Evicted ``DeactivatedDueToAdmissionCheck``, events
    ``EvictedDueToDeactivatedDueToAdmissionCheck`` and ``AdmissionCheckRejected``); the workload
    is never admitted and stays suspended (Kueue provisioning/controller.go:617-679,
    core/workload_controller.go:905-936).
``no-quota``
    The ClusterQueue's quota is all in use by other workloads: Kueue never admits this one. Its
    Workload's ``QuotaReserved`` is False ``Pending`` with the flavor assigner's message, also the
    Workload event ``Pending``; the job stays suspended until deleted (the real Kueue, holding the
    same state, in tests/cluster/real_plane/test_real_conformance_capacity.py).
``unschedulable:<seconds>``
    Pods (a JobSet's TPU pods) stay Pending, ``PodScheduled`` False ``Unschedulable``, with a
    ``FailedScheduling`` event, for that many simulated seconds.
``oom``
    The main container is ``OOMKilled`` (exit 137) at the program's peak: mid-write for
    convert and export (partial objects are left), at the first training step.
``exit:<code>``
    The program logs an error and exits with that code at start.
``image-pull``
    Containers using the program's image wait in ``ErrImagePull`` then ``ImagePullBackOff``;
    the workload never ends by itself, as in Kubernetes.
``api-5xx:<n>``
    When the workload is created, the next n HTTP requests to the API double answer 503.
``drop-events`` (or ``drop-events:<stage>`` alone)
    The GCS notifications of that stage's objects should never arrive. fake-gcs-server sends
    them, so the event shim asks :meth:`Scenario.drops_events_for` or
    :meth:`ClusterSimulator.drops_event`.
``stall``
    The program logs one line and then runs forever.
``hold@<step>`` (train)
    Training pauses after that step until the test releases the run (``ClusterSimulator.release``;
    the local stack's ``POST /release``): a test orders its events around a running head instead of
    racing it.

Time is simulated (:class:`Timing`, ``scale`` real seconds per simulated second);
``Timing.zero()`` waits for nothing, ``Timing.fast()`` suits tests.
"""

from rlpipe.local.simulator.cluster import ClusterSimulator
from rlpipe.local.simulator.env import HistoryEntry
from rlpipe.local.simulator.maxtext import stage_of_object
from rlpipe.local.simulator.scenario import Fault, Scenario, ScenarioError, parse_fault
from rlpipe.local.simulator.timing import Timing
from rlpipe.local.simulator.train_rl import mean_reward

__all__ = [
    "ClusterSimulator",
    "Fault",
    "HistoryEntry",
    "Scenario",
    "ScenarioError",
    "Timing",
    "mean_reward",
    "parse_fault",
    "stage_of_object",
]
