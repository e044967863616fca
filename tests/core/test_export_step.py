"""``export.step``: which committed step export loads (last, best by a metric, or a named step),
what the request alone can refuse, the retention train_rl is given so the step survives Orbax's
newest-N, and what is deleted once export ended. The evaluations are written here by hand, as
train_rl's ``Intermediate Eval`` and ``Post RL Training`` lines leave them in a record."""

from __future__ import annotations

from typing import Any

import pytest

from rlpipe.core import commands, export_step
from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import ExportSpec, validate_request
from tests.conftest import minimal_request


def _results(intermediate: dict[int, float], post: float | None, pre: float = 0.2) -> dict[str, Any]:
    return {
        "pre": {"mean_reward": pre, "accuracy": 10.0},
        "intermediate": [{"step": s, "mean_reward": v, "accuracy": v * 100} for s, v in intermediate.items()],
        "post": None if post is None else {"mean_reward": post, "accuracy": post * 100},
    }


BEST = ExportSpec.model_validate({"step": "best", "select": None})
CURVE = _results({10: 0.30, 20: 0.45, 30: 0.40, 40: 0.38}, post=0.38)


def test_best_is_the_highest_evaluated_committed_step_and_says_why_with_the_numbers() -> None:
    choice = export_step.choose(BEST, CURVE, committed=[10, 20, 30, 40], final=40)
    assert choice.step == 20
    assert "step 20 of 40" in choice.reason and "post_mean_reward" in choice.reason
    assert "20: 0.4500" in choice.reason and "40: 0.3800" in choice.reason


def test_best_reads_the_final_step_from_the_post_evaluation_and_may_choose_it() -> None:
    rising = _results({10: 0.30, 20: 0.35}, post=0.50)  # no intermediate line at the final step
    choice = export_step.choose(BEST, rising, committed=[10, 20, 30], final=30)
    assert choice.step == 30 and choice.reason.startswith("the last step")


def test_best_chooses_only_among_steps_still_in_the_bucket() -> None:
    assert export_step.choose(BEST, CURVE, committed=[10, 30, 40], final=40).step == 30


def test_best_by_the_lowest_of_another_metric() -> None:
    spec = ExportSpec.model_validate(
        {"step": "best", "select": {"metric": "post_accuracy", "direction": "min"}}
    )
    assert export_step.choose(spec, CURVE, committed=[10, 20, 30, 40], final=40).step == 10


def test_a_resumed_attempts_evaluation_of_a_step_replaces_the_first_ones() -> None:
    results = _results({10: 0.30, 30: 0.40}, post=0.38)
    results["intermediate"] += [
        {"step": 20, "mean_reward": 0.90, "attempt": 1},
        {"step": 20, "mean_reward": 0.10, "attempt": 2},
    ]
    assert export_step.choose(BEST, results, committed=[10, 20, 30, 40], final=40).step == 30


def test_a_tie_goes_to_the_later_step() -> None:
    tied = _results({10: 0.4, 20: 0.4}, post=0.3)
    assert export_step.choose(BEST, tied, committed=[10, 20, 30], final=30).step == 20


def test_a_named_step_the_bucket_does_not_hold_is_refused_naming_what_it_holds() -> None:
    spec = ExportSpec.model_validate({"step": 40, "select": None})
    with pytest.raises(
        export_step.NoSuchStep, match=r"export\.step 40 .* ended at step 30 .* holds 10, 20, 30"
    ):
        export_step.choose(spec, CURVE, committed=[10, 20, 30], final=30)
    assert export_step.choose(spec, CURVE, committed=[20, 40], final=40).step == 40


def test_best_with_no_evaluation_in_the_bucket_is_refused() -> None:
    with pytest.raises(export_step.NoSuchStep, match="no evaluated step"):
        export_step.choose(BEST, _results({}, post=None), committed=[10, 20], final=20)


def test_last_is_the_final_step_whatever_the_evaluations_say() -> None:
    assert export_step.choose(None, CURVE, committed=[10, 20, 30, 40], final=40).step == 40


def test_what_stays_after_export_is_the_exported_step_and_what_the_runs_own_retention_keeps() -> None:
    committed = list(range(2, 41, 2))  # 20 steps
    assert export_step.kept_after_export(committed, exported=8, keep=10) == {8, *range(22, 41, 2)}
    assert export_step.kept_after_export(committed, exported=40, keep=10) == set(range(22, 41, 2))


def _train_args(**fields: Any) -> list[str]:
    return commands.train_args(validate_request(minimal_request(**fields)), "gs://a/o", "gs://a/p")


def test_train_rl_keeps_every_checkpoint_from_the_first_that_best_may_choose() -> None:
    # 40 steps, a checkpoint every 2 and an evaluation every 10: best may choose step 10, and the
    # checkpoints from 10 to 40 are 16, more than rl.yml's 10.
    args = _train_args(export={"step": "best"}, training={"num_batches": 40, "checkpoint_period": 2})
    assert "max_num_checkpoints_to_keep=16" in args
    args = _train_args(export={"step": 34}, training={"num_batches": 40, "checkpoint_period": 2})
    assert "max_num_checkpoints_to_keep" not in " ".join(args)  # 34..40: 4 checkpoints, kept anyway
    args = _train_args(export={"step": 4}, training={"num_batches": 40, "checkpoint_period": 2})
    assert "max_num_checkpoints_to_keep=19" in args
    assert "max_num_checkpoints_to_keep" not in " ".join(_train_args(training={"num_batches": 40}))


def _problems(**fields: Any) -> list[str]:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(minimal_request(**fields))
    return [str(p) for p in caught.value.problems]


def test_a_request_whose_step_can_never_be_exported_is_refused_naming_the_field_and_the_fix() -> None:
    (p,) = _problems(export={"step": 25}, training={"num_batches": 40, "checkpoint_period": 10})
    assert p.startswith("export.step: step 25 is not a checkpoint step") and "10, 20, 30, 40" in p
    # evaluations at 10 and 20, checkpoints at 15 and 20: only the last is both
    (p,) = _problems(export={"step": "best"}, training={"num_batches": 20, "checkpoint_period": 15})
    assert (
        p.startswith("export.step: no evaluation falls on a checkpoint step")
        and "divisor of eval_interval" in p
    )
    (p,) = _problems(
        export={"step": "best"},
        training={"num_batches": 40, "checkpoint_period": 2},
        maxtext_overrides={"max_num_checkpoints_to_keep": 5},
    )
    assert p.startswith("maxtext_overrides.max_num_checkpoints_to_keep: 5 keeps only") and "at least 16" in p
    (p,) = _problems(export={"step": "best"}, maxtext_overrides={"rl.num_iterations": 2})
    assert p.startswith("export.step: with rl.num_iterations 2")
    (p,) = _problems(export={"step": "last", "select": {"metric": "post_accuracy"}})
    assert p.startswith("export.select:")
    for wrong in (True, "20", 0, "worst"):
        (p,) = _problems(export={"step": wrong}, training={"num_batches": 40, "checkpoint_period": 10})
        assert p.startswith("export.step: ") and "is not a step" in p, wrong


def test_export_loads_the_chosen_step() -> None:
    req = validate_request(
        minimal_request(export={"step": "best"}, training={"num_batches": 40, "checkpoint_period": 10})
    )
    ctx = RenderContext(run_id="rexport0001", bucket="art", final_step=40, export_step=20)
    args = render(req, "export", 1, ctx)["spec"]["template"]["spec"]["containers"][0]["args"]
    load = [a for a in args if a.startswith("load_parameters_path=")]
    assert load == [
        "load_parameters_path=gs://art/runs/rexport0001/trained/rl/checkpoints/actor/20/model_params/"
    ]


def test_the_plan_shows_the_checkpoints_kept_for_best_and_the_steps_it_may_choose() -> None:
    from rlpipe.core.plan import build_plan

    req = validate_request(
        minimal_request(export={"step": "best"}, training={"num_batches": 40, "checkpoint_period": 2})
    )
    training = build_plan(req, run_id="rexport0002", bucket="b")["training"]
    assert training["max_num_checkpoints_to_keep"] == 16
    assert training["checkpoints_kept"] == list(range(10, 41, 2))
    assert training["export"] == {
        "step": "best",
        "max_num_checkpoints_to_keep_passed": 16,
        "select": {"metric": "post_mean_reward", "direction": "max"},
        "candidates": [10, 20, 30, 40],
    }
    plain = build_plan(validate_request(minimal_request()), run_id="rexport0003", bucket="b")["training"]
    assert plain["export"] == {"step": "last", "max_num_checkpoints_to_keep_passed": None}


class _Bucket:
    """The artifacts store as prune uses it: a listing and a delete, in order, that may fail after
    ``fail_after`` deletes (a status call cut short)."""

    def __init__(self, names: list[str], fail_after: int | None = None) -> None:
        self.names, self.deleted, self.fail_after = list(names), [], fail_after

    def list(self, prefix: str) -> list[str]:
        return sorted(n for n in self.names if n.startswith(prefix))

    def delete(self, name: str) -> None:
        if self.fail_after is not None and len(self.deleted) >= self.fail_after:
            raise ConnectionError("cut short")
        self.names.remove(name)
        self.deleted.append(name)


def test_prune_deletes_the_steps_kept_only_for_the_choice_markers_first_and_finishes_after_a_cut() -> None:
    from rlpipe.control.stage.exported_step import prune

    req = validate_request(
        minimal_request(export={"step": "best"}, training={"num_batches": 40, "checkpoint_period": 2})
    )
    ctx = RenderContext(run_id="rexport0004", bucket="art", final_step=40, export_step=14)
    run = ctx.run
    names = [
        run.step_dir(s) + leaf
        for s in range(10, 41, 2)
        for leaf in ("model_params/d/0", "model_params/commit_success.txt", "commit_success.txt")
    ]
    bucket = _Bucket(names, fail_after=2)  # step 10: its marker and one file, then cut
    with pytest.raises(ConnectionError):
        prune(bucket, req, ctx, 14)  # type: ignore[arg-type]
    assert bucket.deleted[0] == run.step_commit(10), "a step's own marker goes first"
    again = _Bucket(bucket.names)
    assert prune(again, req, ctx, 14) == [10, 12, 16, 18, 20]  # type: ignore[arg-type]
    left = {int(n[len(run.checkpoints) :].split("/")[0]) for n in again.names}
    assert left == {14, *range(22, 41, 2)}
    assert prune(_Bucket(again.names), req, ctx, 14) == []  # type: ignore[arg-type]


def _record(**lineage: Any) -> Any:
    from rlpipe.core.runs.record import RunRecord

    return RunRecord.model_validate(
        {
            "run_id": "rexport0005",
            "key": "k",
            "source": {"kind": "cli"},
            "state": "training",
            "request": {},
            "results": CURVE,
            "lineage": lineage,
        }
    )


def test_the_exported_model_is_judged_by_its_own_steps_evaluation_never_the_last_ones() -> None:
    from rlpipe.core.runs.results import as_exported

    assert as_exported(CURVE, 20, 40)["post"] == {"mean_reward": 0.45, "accuracy": 45.0}
    assert "post" not in as_exported(CURVE, 34, 40), "no evaluation at 34: none, not the last step's"
    assert as_exported(CURVE, 40, 40) == CURVE and as_exported(CURVE, None, 40) == CURVE


def test_the_gate_judges_the_exported_step() -> None:
    from rlpipe.core.runs.verdict_record import evaluate_gate

    req = validate_request(minimal_request(gate={"min_post_mean_reward": 0.42}))
    passed, _ = evaluate_gate(_record(exported_step=20, final_step=40), req)
    assert passed.passed is True and "0.4500" in " ".join(passed.reasons)
    held, _ = evaluate_gate(_record(exported_step=40, final_step=40), req)
    assert held.passed is False and "0.3800" in " ".join(held.reasons)
    unjudged, _ = evaluate_gate(_record(exported_step=34, final_step=40), req)
    assert unjudged.passed is None, "no number for the exported step: never passes silently"
