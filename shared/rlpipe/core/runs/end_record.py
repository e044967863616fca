"""What the end of a run changes in its record, and what an operator's promote or retry round does.

Kept apart from the control plane for the reason ``plan_record``, ``launch_record`` and
``phase_record`` are: the ledger's compare-and-swap may apply a change again on a newer record, so
each is one function of the record being replaced, and what it decides (whether this call ended
the run, whether a promote or a round still applies) is decided there, on that record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlpipe.core.failure_rules import reported
from rlpipe.core.identity import Stage
from rlpipe.core.runs.record import Execution, Failure, GateOverride, GateRecord, Round, RunRecord, now

# An attempt's phases while its workload may still run (a status read records the others).
LIVE_PHASES = frozenset({"launched", "queued", "running"})


def end(
    r: RunRecord, outcome: str, failure: dict[str, Any] | None, caller: str | None
) -> tuple[str | None, bool]:
    """End the run with ``outcome`` (a workflow's or a person's ``failure``, ``caller`` the verified
    identity of a person who ended it); → (the event, whether this call ended the run: a run that
    had ended keeps its end)."""
    if r.terminal:
        return None, False
    r.set_state(outcome)  # type: ignore[arg-type]
    r.admission = None  # an ended run waits for nothing; a retry's round waits afresh
    if outcome == "cancelled":  # its workloads were deleted: no attempt of it runs on
        for a in r.attempts:
            if a.phase in LIVE_PHASES:
                a.phase, a.finished_at = "cancelled", a.finished_at or now()
    if failure:
        tag, message = str(failure.get("tag", "permanent")), str(failure.get("message", ""))
        stage, attempt = failure.get("stage"), failure.get("attempt")
        # The workflow's report names no rule: the attempt it names had it recorded.
        named = r.attempt_record(stage, attempt) if stage and attempt else None
        rule = failure.get("rule") or reported.reported_rule(
            tag, message, named, otherwise=reported.WORKFLOW_REPORTED
        )
        r.failure = Failure(tag=tag, message=message, stage=stage, attempt=attempt, caller=caller, rule=rule)
    return outcome, True


def promote(r: RunRecord, override: GateOverride) -> tuple[str | None, str | None]:
    """A person's override of the run's gate; → (the event, why the run cannot be promoted). A run
    promoted already (a lost write response, or a start that never happened) changes nothing and
    is started again by the caller."""
    if r.state == "training" and not r.execution.name and r.gate is not None and r.gate.override is not None:
        return None, None
    if r.state != "gated":
        return None, f"run {r.run_id} is {r.state}; only a gated run can be promoted"
    r.gate = (r.gate or GateRecord()).model_copy(update={"override": override})
    r.lineage.promoted = override
    r.set_state("training")  # after train: the next execution skips it by its done rule
    r.failure = None
    r.execution = Execution()
    return "promoted", None


@dataclass(frozen=True)
class RoundAsked:
    """An operator's retry: who, why, from which stage, under which caller-made key."""

    by: str
    caller: str | None
    from_stage: Stage | None
    reason: str
    key: str


def open_round(
    r: RunRecord, asked: RoundAsked, refused: str | None
) -> tuple[str | None, int | None, str | None]:
    """The run's next round, once per key (``refused``: why the run cannot be retried, decided on
    this very record); → (the event, the round that exists for the key, why it was refused). A
    round with the same key is a repeated call: nothing changes."""
    same = next((x for x in r.rounds if x.key == asked.key), None)
    if same is not None:
        return None, same.round, None
    if refused is not None:
        return None, None, refused
    r.rounds.append(
        Round(
            round=r.round + 1,
            by=asked.by,
            caller=asked.caller,
            at=now(),
            from_stage=asked.from_stage,
            reason=asked.reason.strip(),
            key=asked.key,
            previous_state=r.state,
            previous_failure=r.failure.model_dump() if r.failure else None,
        )
    )
    r.round += 1
    r.reopen()
    r.failure = None
    r.execution = Execution()  # fresh: intake's exactly-once start takes a lease on it
    return "retried", r.round, None
