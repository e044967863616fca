"""What plan changes in its run's record: which execution drives the run (one adopted when intake
crashed before recording it), then the commits, data and conversion cache the run is pinned to.

Kept apart from ``control.stage.service`` for the reason ``phase_record`` and ``launch_record`` are: the ledger's
compare-and-swap may apply a change again on a newer record, so each is one function of the record
being replaced. Ownership and the terminal check are decided there, so after a lease lapse two
executions cannot both be told to go on: the first to write owns the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlpipe.core import layout
from rlpipe.core.runs.ownership import owns
from rlpipe.core.runs.record import RunRecord


def take_ownership(
    r: RunRecord, execution_id: str | None, workflow_path: str
) -> tuple[str | None, str | None]:
    """Take (or confirm) the run for ``execution_id``; → (the event to record or None for no
    change, why this execution does not drive the run, if it does not)."""
    if r.terminal:
        return None, f"run is already {r.state}"
    if execution_id and not r.execution.name:
        # Intake crashed between starting this execution and recording it: adopt it here.
        r.execution.name = f"{workflow_path}/executions/{execution_id}"
        return "execution-adopted", None
    if not owns(r, execution_id):
        return None, f"run is owned by execution {r.execution.name}"
    return None, None


@dataclass(frozen=True)
class Pins:
    """What plan pinned the run to."""

    sha: str  # the model repo's commit
    data: dict[str, Any]  # the datasets at their commits (control/lifecycle/data_pins.py)
    cache: layout.ConversionCache
    ready: str | None  # the cache's finished conversion attempt, if any


def pin_commits(r: RunRecord, execution_id: str | None, sha: str, data: dict[str, Any]) -> str | None:
    """The commits the run trains on, kept as soon as they are resolved, before the run is
    admitted: a run that waits (for a team's place, a slot) re-plans every poll, and must not ask
    the Hub again each time (a queue of waiting runs would be rate-limited, 429, and a plan that
    fails ends its execution). Its first resolution stands, as a retried plan's does."""
    if r.terminal or not owns(r, execution_id) or (r.lineage.hf_sha and r.lineage.data):
        return None
    r.lineage.hf_sha = r.lineage.hf_sha or sha
    r.lineage.data = r.lineage.data or data
    return "commits-pinned"


def record_pins(r: RunRecord, execution_id: str | None, pins: Pins) -> tuple[str | None, str | None]:
    """Pin the run by ``pins`` unless it ended or changed hands meanwhile; → (the event to record
    or None for no change, why this execution no longer drives the run, if it does not)."""
    if r.terminal or not owns(r, execution_id):
        return None, (f"run is {r.state}" if r.terminal else f"run is owned by {r.execution.name}")
    ready = pins.ready
    if (
        r.lineage.hf_sha == pins.sha
        and r.lineage.conversion_key == pins.cache.key
        and r.lineage.conversion_cache_hit == bool(ready)
        and r.lineage.data == pins.data
    ):
        return None, None
    r.lineage.hf_sha = pins.sha
    r.lineage.data = pins.data
    r.lineage.conversion_key = pins.cache.key
    r.lineage.conversion_cache_hit = bool(ready)
    if ready:
        r.lineage.converted_uri = layout.gs(pins.cache.bucket, ready)
    return "planned", None
