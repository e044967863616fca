"""The stage operations of a retried run, on the real servers of tests/control/stage/test_stage.py: what plan
skips and forces, the attempt numbers it hands the workflow, the round each launch records, the
resume step, and a stage deadline that starts afresh."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rlpipe.control.adapters import blobstore
from rlpipe.control.lifecycle import retry_rounds
from rlpipe.core import layout
from rlpipe.core.manifests import RenderContext, conversion_cache
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import LEDGER_TIME, Attempt, RunRecord
from tests.control.stage.test_stage import env, hub, kube  # noqa: F401


def _ago(hours: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).strftime(LEDGER_TIME)


def _round_one(env: dict[str, Any], run_id: str, *, failed: list[tuple[str, int]], done: list[str]) -> None:
    """Round 1 of ``run_id`` as it ended: ``done`` stages succeeded with their outputs in the
    bucket (convert through the cache), the ``failed`` attempts failed, the run failed."""
    env["claim"](run_id)
    env["service"].plan(run_id, f"{run_id}-exec")
    record = env["ledger"].get(run_id)
    req = validate_request(record.request)
    ctx = RenderContext(run_id=run_id, bucket=env["store"].bucket_name, hf_revision=record.lineage.hf_sha)
    cache = conversion_cache(req, ctx)
    env["store"].put(cache.attempt_dir(run_id, 1) + "0/commit_success.txt", b"ok")
    env["state"].create(cache.ready, blobstore.dumps({"attempt_dir": cache.attempt_dir(run_id, 1)}))
    run = layout.RunLayout(env["store"].bucket_name, run_id)
    if "train" in done:
        env["store"].put(run.step_commit(layout.final_step_for(req)), b"ok")

    def ended(r: RunRecord) -> str:
        for stage in ["convert", *done]:
            r.attempts.append(
                Attempt(stage=stage, attempt=1, workload=f"{run_id}-{stage}-a1", launched_at=_ago(30))
            )
            r.attempts[-1].phase = "succeeded"
        for stage, n in failed:
            a = Attempt(stage=stage, attempt=n, workload=f"{run_id}-{stage}-a{n}", launched_at=_ago(30 - n))
            a.phase, a.failure_class = "failed", "permanent"
            r.attempts.append(a)
        r.state = "failed"
        return "failed"

    env["ledger"].edit(run_id, ended)


def test_plan_of_a_retried_round_skips_what_is_done_and_continues_the_attempt_numbers(
    env: dict[str, Any],
) -> None:
    run_id = "rrplan000001"
    _round_one(env, run_id, failed=[("export", 1), ("export", 2)], done=["train"])
    assert (
        retry_rounds.start_round(env["ledger"], run_id, by="a", reason="r", from_stage=None, key="k2").round
        == 2
    )
    plan = env["service"].plan(run_id, "exec-2")  # the new execution adopts the run
    assert plan["skip"] is False and plan["stages"] == ["export"], "train is done: only export runs"
    assert plan["first_attempt"] == {"convert": 2, "train": 2, "export": 3}
    launched = env["service"].launch(run_id, "export", 3, None, "exec-2")
    record = env["ledger"].get(run_id)
    assert record.state == "exporting", "accepted → exporting: the round starts at export"
    assert (record.attempt_record("export", 3).round, launched["workload"]) == (2, f"{run_id}-export-a3")
    assert [a.round for a in record.attempts] == [1, 1, 1, 1, 2]

    env["service"].finish(run_id, "failed", {"tag": "permanent", "message": "again"})
    assert (
        retry_rounds.start_round(
            env["ledger"], run_id, by="a", reason="r", from_stage="train", key="k3"
        ).round
        == 3
    )
    plan = env["service"].plan(run_id, "exec-3")
    assert plan["stages"] == ["train", "export"], "`from train` runs train again although it is done"
    assert plan["first_attempt"]["train"] == 2 and plan["first_attempt"]["export"] == 4
    launched = env["service"].launch(run_id, "train", 2, None, "exec-3")
    final = layout.final_step_for(validate_request(record.request))
    assert launched["resume_step"] == final, "a forced train resumes from its last committed step"
    train = env["ledger"].get(run_id).attempt_record("train", 2)
    assert (train.round, train.resume_step) == (3, final)


def test_a_stage_deadline_counts_from_the_first_launch_of_the_current_round(env: dict[str, Any]) -> None:
    """Round 1 launched train 29-27 hours ago (24 h deadline); round 2's attempt 4 has just been
    launched and is queued: it is waiting, not past its deadline."""
    run_id = "rrdeadline01"
    _round_one(env, run_id, failed=[("train", 1), ("train", 2), ("train", 3)], done=[])
    retry_rounds.start_round(env["ledger"], run_id, by="a", reason="r", from_stage=None, key="k2")
    plan = env["service"].plan(run_id, "exec-2")
    assert plan["stages"] == ["train", "export"] and plan["first_attempt"]["train"] == 4
    env["service"].launch(run_id, "train", 4, None, "exec-2")
    status = env["service"].status(run_id, "train", 4, "exec-2")
    assert status["phase"] in ("queued", "running") and status["failure"] is None, status
