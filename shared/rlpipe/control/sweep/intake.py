"""Intake of a request with a ``sweep``: one parent record and N ordinary child runs.

Why it is idempotent the same way a single run is: the parent's run id comes from the delivery's
key and each child's from the parent's key and its point index (``core.sweep.child_key``), so a
redelivered file claims nothing new; each child's claim and start is the single-run path
(``Intake.claim_run``), whose lease starts one execution per child however often it is asked.
"""

from __future__ import annotations

from collections import Counter

from rlpipe.control.lifecycle import user_files
from rlpipe.control.lifecycle.coordinator import ClaimMember, Delivery, GatherFiles
from rlpipe.control.lifecycle.intake_result import IntakeResult, RequestConflict
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import identity
from rlpipe.core import sweep as core_sweep
from rlpipe.core.request import Request
from rlpipe.core.runs.record import Lineage, RunRecord, SweepMember, SweepParent


def submit(
    ledger: Ledger, request: Request, delivery: Delivery, claim: ClaimMember, gather: GatherFiles
) -> IntakeResult:
    """Claim the parent and each child (``claim``: intake's single-run path). Raises
    ``RequestInvalid`` for a grid the policy refuses or files that cannot be read, and
    ``RequestConflict`` when the parent exists with another request; intake records either."""
    assert request.sweep is not None
    children = core_sweep.children(request, delivery.policy)
    key, source = delivery.key, delivery.source
    parent_id = identity.run_id_for(key)
    log = delivery.log.bind(run_id=parent_id)
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
    existing = ledger.get(parent_id)
    if existing is not None and existing.request != parent.request:
        raise RequestConflict(existing)
    found = None
    if user_files.files_of(request) and not (existing is not None and existing.source.same_delivery(source)):
        found = gather(request)  # read once: every child gets a copy of the same bytes under its own prefix
    claimed = ledger.claim(parent)
    if claimed:
        log.info("claimed sweep", key=key, children=len(children))
    outcomes: Counter[str] = Counter()
    for child, child_key in zip(children, child_keys, strict=True):
        member = SweepMember(parent=parent_id, index=child.index, size=len(children), point=child.point)
        result = claim(child.request, child_key, member, found)
        outcomes[result.outcome] += 1
    detail = f"sweep of {len(children)} children: " + ", ".join(
        f"{n} {o}" for o, n in sorted(outcomes.items())
    )
    log.info("sweep submitted" if claimed else "duplicate delivery of a sweep", detail=detail)
    return IntakeResult("started" if claimed else "duplicate", parent_id, detail=detail)
