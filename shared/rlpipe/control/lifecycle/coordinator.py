"""What intake and the stage operations ask of whatever coordinates a run with other runs.

Why a coordinator and not ``if record is in a sweep`` inside the stage operations: a sweep's
children share their pins, their TPU slots, one conversion and one selection, and a sweep's parent
ends with its children. That is one concern; the stage operations and intake call it at named
points (the hooks below) and know nothing else of it. The services are handed the coordinator
when they are wired (``control.services``): a deployment's is the sweep's
(``control.sweep.coordinator``), which coordinates the runs of a sweep and leaves every other run
to this class's behaviour.

This class is a run on its own: it pins its own commits, never waits for a slot, is never
selected, and its end concerns no other run. What only a sweep can ask for (a grid at intake, a
selection, a parent's end) it refuses, naming what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.intake_result import IntakeResult
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import Request
from rlpipe.core.request.policy import Policy
from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.record import EarlyStopRecord, RunRecord, Source, SweepMember

# The run's commits: (model repo sha, datasets at their commits as ``lineage.data`` holds them).
Pins = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Delivery:
    """One delivery of a request, as intake hands it on: where it came from and the run's key."""

    source: Source
    source_key: str  # the delivery's own key (a rejection is recorded under it)
    key: str  # the run's idempotency key (the request's ``request_id``, else the delivery's)
    policy: Policy  # the deployment's allowlists for the request's namespace
    log: Logger


# Intake's single-run path for one member of a group: (request, key, membership, the files
# gathered once for the group) → the answer of that run's claim and start.
ClaimMember = Callable[[Request, str, SweepMember, dict[str, bytes] | None], IntakeResult]
# The request's own files, read once (``Intake.gather_files``); raises ``RequestInvalid``.
GatherFiles = Callable[[Request], dict[str, bytes]]
# End a run the coordinated group ends with it: (run id, the failure to record).
EndMember = Callable[[str, dict[str, Any]], None]


class RunCoordinator:
    """The hooks, with a run on its own's answers (see the module's docstring)."""

    # ---- intake -------------------------------------------------------------------------------

    def admit(
        self, request: Request, delivery: Delivery, claim: ClaimMember, gather: GatherFiles
    ) -> IntakeResult:
        """Intake of a request that names a group of runs (``sweep``). Raises ``RequestInvalid``
        (intake records the rejection) or ``RequestConflict``."""
        raise RequestInvalid(
            [
                Problem(
                    "sweep",
                    "this deployment's intake coordinates no sweeps",
                    "submit the request without sweep",
                )
            ]
        )

    # ---- plan ---------------------------------------------------------------------------------

    def pins(self, record: RunRecord, resolve: Callable[[], Pins]) -> Pins:
        """The commits the run trains on; ``resolve`` pins them for this run alone."""
        return resolve()

    def slot(self, record: RunRecord, *, conversion_ready: bool) -> Queued | None:
        """None: the run goes on now; else why it is queued (its workflow plans again later)."""
        return None

    def with_selection(self, record: RunRecord, stages: list[str]) -> list[str]:
        """The plan's steps, with any step the run must wait at for its group."""
        return stages

    # ---- select -------------------------------------------------------------------------------

    def select(self, record: RunRecord) -> dict[str, Any]:
        """The ``select`` step: whether this run goes on to publish, or waits for its group."""
        raise PermanentFailure(f"run {record.run_id} is not part of a sweep; there is nothing to select")

    # ---- train ---------------------------------------------------------------------------------

    def evaluated(self, record: RunRecord) -> EarlyStopRecord | None:
        """A status read of the run's training recorded evaluations: None, it goes on; else why its
        group stops it now (the caller deletes its workloads and finishes it ``stopped``)."""
        return None

    # ---- the end --------------------------------------------------------------------------------

    def end_group(
        self, record: RunRecord, outcome: str, *, caller: str | None, end_member: EndMember
    ) -> RunRecord:
        """A person ends a run that stands for a group (a sweep's parent): its members that have
        not ended are ended by ``end_member``; → the run's record after."""
        raise PermanentFailure(f"run {record.run_id} is a sweep, and this deployment coordinates no sweeps")

    def member_ended(self, record: RunRecord) -> RunRecord | None:
        """After a run ended: what it held goes back to its group. → the group's run when this
        call ended it (exactly one call does), for its status message; else None."""
        return None
