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

Scenario files (JSON or YAML) name the faults it plays, per stage, attempt and run: their syntax
and what each fault does are in docs/simulator.md (*Faults*), parsed by :mod:`.scenario`.

Time is simulated (:class:`Timing`, ``scale`` real seconds per simulated second);
``Timing.zero()`` waits for nothing, ``Timing.fast()`` suits tests.
"""

from rlpipe.local.simulator.cluster import ClusterSimulator
from rlpipe.local.simulator.scenario import Fault, Scenario, ScenarioError, parse_fault
from rlpipe.local.simulator.timing import Timing

__all__ = ["ClusterSimulator", "Fault", "Scenario", "ScenarioError", "Timing", "parse_fault"]
