"""A sweep's records as intake claims them (a parent and a child per point), without intake.

Why a helper: tests of the sweep's coordination, its early stopping and a team's limits on sweep
children each need the same records; building them by hand in each would let one drift from what
``control.sweep.intake`` writes.
"""

from __future__ import annotations

from typing import Any

from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import identity
from rlpipe.core import sweep as core_sweep
from rlpipe.core.request import Request
from rlpipe.core.runs.record import Lineage, RunRecord, Source, SweepMember, SweepParent


def claim_sweep(
    ledger: Ledger,
    request: Request,
    request_id: str,
    source: Source,
    *,
    max_parallel: int = 2,
    executions: bool = False,
) -> tuple[RunRecord, list[RunRecord]]:
    """The parent and its children, claimed in ``ledger``; ``executions``: each child's execution
    named, as once intake started it."""
    key = identity.key_for_request_id(request_id)
    kids = core_sweep.children(request)
    ids = [identity.run_id_for(core_sweep.child_key(key, c.index)) for c in kids]
    parent = RunRecord(
        run_id=identity.run_id_for(key),
        key=key,
        source=source,
        request=request.model_dump(mode="json"),
        sweep=SweepParent(children=ids, points=[c.point for c in kids], max_parallel=max_parallel),
    )
    assert ledger.claim(parent)
    children: list[RunRecord] = []
    for child, run_id in zip(kids, ids, strict=True):
        member = SweepMember(parent=parent.run_id, index=child.index, size=len(kids), point=child.point)
        record = RunRecord(
            run_id=run_id,
            key=core_sweep.child_key(key, child.index),
            source=source,
            request=child.request.model_dump(mode="json"),
            lineage=Lineage(sweep=member),
        )
        if executions:
            record.execution.name = f"projects/p/locations/l/workflows/w/executions/{run_id}-exec"
        assert ledger.claim(record)
        children.append(record)
    return parent, children


def sweep_request(**sweep: Any) -> Request:
    """A minimal request with this ``sweep`` section, validated."""
    from rlpipe.core.request import validate_request
    from tests.conftest import minimal_request

    return validate_request(minimal_request(request_id=sweep.pop("request_id", "lr-sweep"), sweep=sweep))
