"""A pod of a training JobSet disrupted: who fails first, the worker's Job or the head's.

The head (the Pathways proxy and the program) loses a TPU worker the moment that worker stops
serving, and gives up after ``--pathways_pipe_unreachable_timeout`` (60 s in the tutorials' flags).
The worker's Job meanwhile goes through the Job controller's steps, each after real time:

1. the victim gets ``DisruptionTarget`` and SIGTERM (deleted, except on node shutdown), and is
   judged by the ``podFailurePolicy`` only once it is in phase Failed (k8s job_controller.go
   ``isPodFailed``: with a podFailurePolicy a terminating pod is not failed yet);
2. ``FailureTarget`` (rule "FailJob"), and the Job's other pods are deleted (they terminate too);
3. ``Failed`` only when none is terminating any more (job_controller.go ``enactJobFinished``).

The JobSet controller acts on the first child Job that is ``Failed``: with ``maxRestarts: 0`` it
fails the JobSet and deletes every Job still active (JobSet v0.10.1 failure_policy.go:220-226,
jobset_controller.go:162-176, 589-612), the worker's Job at ``FailureTarget`` included. So when the
victim and the other workers take their grace periods (``preempt@N:head-first``: 30 s each, then
SIGKILL) the head's pipe timeout fires first; had the head's container exited then, its Job would
fail first and the worker's Job, its pods and the preemption evidence would be deleted. The head's
script holds a failed exit (core/commands.held_exit, ``hold_seconds`` read from the script) for
longer than the worker's Job can take, so the worker's Job fails first and, failed, is kept with the
evidence; a script without the hold replays the lost-evidence order. With prompt exits (the
default) the worker's Job fails first either way.
"""

from __future__ import annotations

from typing import Protocol

from rlpipe.core.commands import HOLD_MARK
from rlpipe.local.simulator.env import SimEnv
from rlpipe.local.simulator.jobs import JobSim
from rlpipe.local.simulator.pods import SIGKILL_EXIT, SIGTERM_EXIT, PodSim
from rlpipe.local.simulator.program import Program
from rlpipe.local.simulator.runtime import Outcome
from rlpipe.local.simulator.scenario import Fault
from rlpipe.local.simulator.timing import Pacer
from rlpipe.local.simulator.workload import pipe_timeout


class JobSetWorkload(Protocol):
    """What this module uses of the JobSet's simulation (which imports this module)."""

    env: SimEnv
    pacer: Pacer
    program: Program | None
    children: dict[str, list[JobSim]]
    leader_rjob: str | None

    def record(self, kind: str, detail: str) -> None: ...
    def exit_after(self, pod: PodSim, *, slow: bool = False) -> float: ...
    def stop_pods(self, pods: list[PodSim], *, slow: bool = False, waited: float = 0.0) -> None: ...
    def bring_up(self, job: JobSim, pods: list[PodSim]) -> None: ...


class JobFailed(Exception):
    """A child Job reached ``Failed``: the JobSet's failure policy decides next."""

    def __init__(self, child: JobSim) -> None:
        super().__init__(child.name)
        self.child = child


def disrupt(js: JobSetWorkload, fault: Fault, head: PodSim) -> Outcome:
    """Play a disruption of the head pod or of a TPU worker: returns the head's outcome when the
    head's Job is the first to fail (its pod exited), or raises :class:`JobFailed` with the
    worker's Job when that one is ``Failed`` first."""
    workers = [job for name, jobs in js.children.items() if name != js.leader_rjob for job in jobs]
    reason = fault.disruption_reason
    if fault.target == "head" or not workers:
        head.disrupt(reason)
        if reason != "DeletionByPodGC":
            js.stop_pods([head], slow=fault.head_first)
        return Outcome(SIGTERM_EXIT, "Error", disruption=fault)
    worker_job = workers[0]
    victim = worker_job.active[min(worker_job.active)]
    victim.disrupt(reason)
    js.record("pod", f"{victim.name} disrupted ({reason})")
    slow = fault.head_first
    code = SIGKILL_EXIT if slow else SIGTERM_EXIT
    give_up = pipe_timeout(_program_container(js, head), js.env.timing.pipe_timeout)
    victim_exit = 0.0 if reason == "DeletionByPodGC" else js.exit_after(victim, slow=slow)
    hold = js.program.exit_hold if js.program else 0.0  # the script's hold of a failed exit
    if give_up < victim_exit:  # the head gives up while the victim still terminates
        js.pacer.pause(give_up)
        return _head_gives_up(head, victim, hold=hold, pacer=js.pacer)
    js.pacer.pause(victim_exit)
    victim.finish_termination(code)
    decision = worker_job.pod_failed(victim.index or 0, victim)
    if decision.action != "fail":  # replaced (Ignore/Count): the head still loses the worker
        if decision.counted:
            js.pacer.pause(worker_job.backoff_seconds())
        js.bring_up(worker_job, worker_job.create_pods([victim.index or 0]))
        js.pacer.pause(max(0.0, give_up - victim_exit))
        return _head_gives_up(head, victim, hold=hold, pacer=js.pacer)
    others = worker_job.fail_target(decision.reason, decision.message)
    others_exit = max((js.exit_after(p, slow=slow) for p in others), default=0.0)
    # The race. At equal times the head wins: the worker's Job is Failed only after its pods'
    # removal has been observed (finalizers removed, then another Job sync), one step more.
    worker_failed_at = victim_exit + others_exit
    if give_up + hold <= worker_failed_at:
        js.pacer.pause(give_up - victim_exit)
        js.record("phase", f"{head.name} gives up before {worker_job.name} is Failed (head first)")
        return _head_gives_up(head, victim, hold=hold, pacer=js.pacer)
    if give_up <= worker_failed_at:  # the program gives up; its container holds the exit
        js.pacer.pause(give_up - victim_exit)
        _program_gives_up(head, victim)
        hold_exit(head, 1, hold)
        js.record("phase", f"{head.name}'s program gave up; its exit is held while {worker_job.name} fails")
        js.stop_pods(others, slow=slow, waited=give_up - victim_exit)
    else:
        js.stop_pods(others, slow=slow)
    worker_job.terminated(others)
    worker_job.fail_final()
    raise JobFailed(worker_job)


def _program_container(js: JobSetWorkload, head: PodSim) -> dict[str, object] | None:
    name = js.program.container if js.program else ""
    return next((c for c in head.main if c["name"] == name), None)


def _program_gives_up(head: PodSim, victim: PodSim) -> None:
    head.log(
        f"ERROR: Pathways worker {victim.name} unreachable for longer than the pipe timeout; "
        "the training program cannot continue"
    )


def hold_exit(pod: PodSim, code: int, hold: float) -> None:
    """The script's held exit begins (core/commands.held_exit): SIGTERM now ends it with ``code``."""
    if hold > 0 and code != 0:
        pod.log(
            f"{HOLD_MARK} the program exited {code}; holding this exit {hold:g}s so that a disrupted "
            "TPU worker's Job, if any, fails the JobSet first"
        )
        pod.held_exit = code


def _head_gives_up(head: PodSim, victim: PodSim, *, hold: float, pacer: Pacer) -> Outcome:
    """The head's program exits 1 on the unreachable worker; after the script's hold, so does the
    container (its Job then decides)."""
    _program_gives_up(head, victim)
    hold_exit(head, 1, hold)
    pacer.pause(hold)
    head.terminate(1, "Error")
    return Outcome(1, "Error", "Pathways worker unreachable")
