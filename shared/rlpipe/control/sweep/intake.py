"""Intake of a request with a ``sweep``: one parent record and N ordinary child runs.

Why it is idempotent the same way a single run is: the parent's run id comes from the delivery's
key and each child's from the parent's key and its point index (``core.sweep.child_key``), so a
redelivered file claims nothing new; each child's claim and start is the single-run path
(``Intake.claim_run``), whose lease starts one execution per child however often it is asked.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from rlpipe.control import user_files
from rlpipe.control.intake_result import IntakeResult
from rlpipe.control.ledger import Ledger
from rlpipe.control.logs import Logger
from rlpipe.core import identity
from rlpipe.core import sweep as core_sweep
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import Request
from rlpipe.core.request.policy import Policy
from rlpipe.core.runs.record import Lineage, RunRecord, Source, SweepMember, SweepParent


class Intake(Protocol):
    """What a sweep needs of ``control.intake.Intake``: the single-run claim and its answers."""

    ledger: Ledger

    def gather_files(self, request: Request, source: Source) -> dict[str, bytes]: ...
    def claim_run(
        self,
        request: Request,
        key: str,
        source: Source,
        source_key: str,
        log: Logger,
        *,
        member: SweepMember | None = None,
        found: dict[str, bytes] | None = None,
    ) -> IntakeResult: ...
    def _reject(
        self, source_key: str, source: Source, problems: list[Problem], log: Logger
    ) -> IntakeResult: ...
    def _conflict(
        self, existing: RunRecord, source_key: str, source: Source, log: Logger
    ) -> IntakeResult: ...


def submit(
    intake: Intake,
    request: Request,
    source: Source,
    source_key: str,
    key: str,
    policy: Policy,
    log: Logger,
) -> IntakeResult:
    assert request.sweep is not None
    try:
        children = core_sweep.children(request, policy)
    except RequestInvalid as exc:
        return intake._reject(source_key, source, exc.problems, log)
    parent_id = identity.run_id_for(key)
    log = log.bind(run_id=parent_id)
    child_keys = [core_sweep.child_key(key, c.index) for c in children]
    parent = RunRecord(
        run_id=parent_id,
        key=key,
        source=source,
        request=request.model_dump(mode="json"),
        lineage=Lineage(hf_repo=request.hf_repo, hf_revision=request.hf_revision, image=request.image),
        sweep=SweepParent(
            children=[identity.run_id_for(k) for k in child_keys],
            points=[c.point for c in children],
            max_parallel=core_sweep.parallelism(request.sweep, len(children)),
        ),
    )
    existing = intake.ledger.get(parent_id)
    if existing is not None and existing.request != parent.request:
        return intake._conflict(existing, source_key, source, log)
    found = None
    if user_files.files_of(request) and not (existing is not None and existing.source == source):
        try:  # read once: every child gets a copy of the same bytes under its own prefix
            found = intake.gather_files(request, source)
        except RequestInvalid as exc:
            return intake._reject(source_key, source, exc.problems, log)
    claimed = intake.ledger.claim(parent)
    if claimed:
        log.info("claimed sweep", key=key, children=len(children))
    outcomes: Counter[str] = Counter()
    for child, child_key in zip(children, child_keys, strict=True):
        member = SweepMember(parent=parent_id, index=child.index, size=len(children), point=child.point)
        result = intake.claim_run(
            child.request, child_key, source, source_key, log, member=member, found=found
        )
        outcomes[result.outcome] += 1
    detail = f"sweep of {len(children)} children: " + ", ".join(
        f"{n} {o}" for o, n in sorted(outcomes.items())
    )
    log.info("sweep submitted" if claimed else "duplicate delivery of a sweep", detail=detail)
    return IntakeResult("started" if claimed else "duplicate", parent_id, detail=detail)
