"""What intake and the reconciler ask of whatever coordinates a run with other runs.

Why a coordinator and not ``if request is a sweep`` inside intake: a request that names a group of
runs is claimed as its group (a sweep's parent and children), and a member that ends gives back
what it held to its group. Intake and the reconciler call these hooks and know nothing else of
groups; the stage operations reach the same concern through the run policies
(``control.lifecycle.policies``), of which the sweep's coordinator is one. The services are
handed the coordinator when they are wired (``control.services``): a deployment's is the sweep's
(``control.sweep.coordinator``).

This class is a run on its own: its end concerns no other run, and a grid at intake it refuses,
naming what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.intake_result import IntakeResult
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import Request
from rlpipe.core.request.policy import Policy
from rlpipe.core.runs.record import RunRecord, Source, SweepMember


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

    def member_ended(self, record: RunRecord) -> RunRecord | None:
        """After a run ended: what it held goes back to its group. → the group's run when this
        call ended it (exactly one call does), for its status message; else None."""
        return None
