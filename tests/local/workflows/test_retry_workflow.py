"""workflows/pipeline.yaml for a retried run: attempt numbers start from plan's ``first_attempt``
(on the strict local engine, against the scripted `stage` of tests/local/workflows/test_pipeline_workflow.py)."""

from __future__ import annotations

from typing import Any

from rlpipe.local.workflows import State
from tests.local.workflows.test_pipeline_workflow import failed, pipeline, plan  # noqa: F401


def test_a_retried_round_goes_on_numbering_attempts_from_first_attempt(pipeline: Any) -> None:
    p = pipeline(
        plan=plan(stages=["train", "export"], first_attempt={"convert": 2, "train": 4, "export": 1}),
        phases={("train", 4): [failed("preempted")]},
    )
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert [c.attempt for c in p.script.of("launch", "train")] == [4, 5], "then the retry's next number"
    assert [c.attempt for c in p.script.of("status", "train")] == [4, 5]
    assert [c.attempt for c in p.script.of("launch", "export")] == [1]
    assert [s["attempts"] for s in execution.result["stages"]] == [5, 1]
    assert execution.result["stages"][0]["workload"] == "r1-train-a5"
    assert p.clock.sleeps == [10.0], "one backoff: the round's own retries start afresh"


def test_a_plan_without_first_attempt_starts_at_attempt_1(pipeline: Any) -> None:
    p = pipeline(plan=plan(first_attempt={"train": 3}))  # no entry for convert or export
    execution = p.run()
    assert execution.state is State.SUCCEEDED, execution.error
    assert [(c.stage, c.attempt) for c in p.script.of("launch")] == [
        ("convert", 1),
        ("train", 3),
        ("export", 1),
    ]
