"""The train stage's done rule follows the data: a clean early end is a success.

``tests/fixtures/maxtext_facts.yaml`` (``step_arithmetic.end_rule``) states where train_rl really
ends, with MaxText, grain and Tunix file:line for each part. Two independent readings of it are
checked against the fixture and against each other: ``core/steps.py`` (arithmetic, what the
stage and ``plan`` use) and the simulator (``local/simulator/rl_eval.py``, which plays the data
pipeline and Tunix's loop batch by batch). Then the stage's ``status`` on the local stack (the
Kubernetes API double with the real client, fake-gcs-server, the simulator): a clean early end
is ``succeeded`` with the actual final step in the ledger and export loading it; a crash at that
step, a last save that did not land, and an exit 0 without the end line are failures.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cli.watch import summary
from rlpipe.control.adapters import blobstore
from rlpipe.core import layout, steps, train_log, train_verdict
from rlpipe.core.manifests import RenderContext, conversion_cache
from rlpipe.core.request import validate_request
from rlpipe.local.hub_double import HubDouble
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.simulator import ClusterSimulator, Scenario, ScenarioError
from rlpipe.local.simulator import maxtext as sim_maxtext
from rlpipe.local.simulator import train_rl as sim_train_rl
from rlpipe.local.simulator.program import Arguments, ProgramExit
from rlpipe.local.simulator.rl_eval import TrainConfig, TrainSplit
from rlpipe.local.simulator.rl_eval import final_step as simulated_final
from rlpipe.local.simulator.scenario import train_data
from rlpipe.local.simulator.timing import Timing
from tests.conftest import Buckets
from tests.control.stage.test_stage import NS, env, hub, kube  # noqa: F401
from tests.core.test_maxtext_facts import ACTOR, CONVERTED, PINNED, TRAINED, FakeContainer

FACTS: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "fixtures" / "maxtext_facts.yaml").read_text(encoding="utf-8")
)
END_RULE = FACTS["step_arithmetic"]["end_rule"]
END_LINE = "RL Training Completed Successfully!"


# ---------------------------------------------------------------- the rule, against the fixture


def _effective(example: dict[str, Any]) -> steps.TrainingSteps:
    return steps.effective_steps(
        example["num_batches"], None, example["overrides"], batch_size=example["batch_size"]
    )


def _argv(example: dict[str, Any]) -> list[str]:
    argv = [f"num_batches={example['num_batches']}", f"batch_size={example['batch_size']}"]
    if "train_micro_batch_size" in example:
        argv.append(f"train_micro_batch_size={example['train_micro_batch_size']}")
    return argv + [f"{k}={v}" for k, v in example["overrides"].items()]


def _split(example: dict[str, Any]) -> TrainSplit:
    return TrainSplit(rows=example.get("examples"), long_prompts=example.get("long_prompts", 0))


def test_the_end_rule_cites_its_sources() -> None:
    parts = {k: " ".join(str(v).split()) for k, v in END_RULE.items() if k != "examples"}
    assert set(parts) == {"max_steps", "data", "loop", "rule", "unknowable"}
    for key, text in parts.items():
        assert re.search(r"\.(py|yml):[0-9]+", text), key
    text = " ".join(parts.values())
    for source in (
        "types.py:4655-4660",
        ":375-376",
        "batch.py:300-311",
        "rl_learner.py:624-628",
        "peft_trainer.py:260",
    ):
        assert source in text, source
    cases = {
        (e["num_batches"], e["overrides"].get("rl.num_iterations"), e["overrides"].get("train_fraction"))
        for e in END_RULE["examples"]
    }
    assert (45, 2, 0.5) in cases, "the example that started it: 45 batches, 2 iterations, half the data"


@pytest.mark.parametrize("example", END_RULE["examples"], ids=str)
def test_core_steps_ends_where_the_fixture_says(example: dict[str, Any]) -> None:
    effective = _effective(example)
    rows = example.get("examples")
    survivors = None if rows is None else rows - example.get("long_prompts", 0)
    assert effective.max_steps == example["max_steps"]
    got = effective.final_with_examples(survivors, resumed_from=example.get("restored", 0))
    assert got == example["final"]
    if rows is None and "restored" not in example:
        assert effective.final_step == example["final"]


@pytest.mark.parametrize("example", END_RULE["examples"], ids=str)
def test_the_simulated_pipeline_ends_where_the_fixture_says(example: dict[str, Any]) -> None:
    args = Arguments.parse(_argv(example))
    assert sim_train_rl.train_steps(args) == example["max_steps"]
    restored = example.get("restored", 0)
    if example["final"] == 0:
        with pytest.raises(ProgramExit, match="StopIteration"):
            sim_train_rl.final_step(args, _split(example), restored)
    else:
        assert sim_train_rl.final_step(args, _split(example), restored) == example["final"]


def _grid() -> Iterator[tuple[int, int, int, float, int, int, int | None, int, int]]:
    rng = random.Random(2026)
    for _ in range(600):
        batch = rng.choice((1, 2, 3, 4, 8))
        yield (
            rng.choice((1, 3, 7, 20, 45, 50)),  # num_batches
            batch,
            rng.choice([m for m in (-1, 1, 2, 4) if m == -1 or batch % m == 0]),  # train_micro_batch_size
            rng.choice((1.0, 0.5, 0.3, 0.7, 0.9, 0.15)),  # train_fraction
            rng.choice((1, 1, 2, 3)),  # num_epoch
            rng.choice((1, 1, 2, 3)),  # rl.num_iterations
            rng.choice((None, None, 0, 1, 5, 17, 40, 400)),  # rows in the split
            rng.choice((0, 0, 0, 1, 3)),  # long prompts
            rng.choice((0, 0, 0, 1, 4, 10, 30)),  # restored step
        )


def test_core_steps_and_the_simulator_agree_everywhere_the_rule_is_exact() -> None:
    """A differential over many configurations: the arithmetic in core/steps.py and the batch by
    batch play in the simulator, both written from the sources, must give the same end (or the
    same failure: no batch at all). Where prompts are dropped from a split larger than the slice,
    the end depends on the shuffle, and the simulator must stay within core/steps.py's bounds."""
    checked = 0
    for n, batch, micro, fraction, epochs, iterations, rows, long, restored in _grid():
        overrides = {"train_fraction": fraction, "num_epoch": epochs, "rl.num_iterations": iterations}
        try:
            effective = steps.effective_steps(n, None, overrides, batch_size=batch)
        except steps.ConfigProblem:
            continue  # max_steps rounds to 0: validation refuses it
        long = min(long, rows or 0) if rows is not None else 0
        if restored >= effective.max_steps:
            restored = 0  # a retry never resumes a finished training
        argv = [f"num_batches={n}", f"batch_size={batch}", f"train_micro_batch_size={micro}"]
        config = TrainConfig.from_args(
            Arguments.parse(argv + [f"{k}={v}" for k, v in overrides.items()]), sim_train_rl.RL_DEFAULTS
        )
        split = TrainSplit(rows=rows, long_prompts=long)
        try:
            played = simulated_final(config, split, restored)
        except ProgramExit:
            played = 0
        where = (n, batch, micro, fraction, epochs, iterations, rows, long, restored)
        if rows is None or long == 0 or rows <= effective.examples_kept:
            survivors = None if rows is None else rows - long
            assert effective.final_with_examples(survivors, resumed_from=restored) == played, where
        else:
            low = effective.final_with_examples(effective.examples_kept - long, resumed_from=restored)
            high = effective.final_with_examples(rows - long, resumed_from=restored)
            assert low <= played <= high, where
        checked += 1
    assert checked > 400


def test_the_float_rounding_of_max_steps_is_checked_after_a_whole_batch() -> None:
    """30 × 3 × 0.7 is 62.99999999999999 in floats: max_steps 62, and Tunix checks it only after
    each batch of 3 updates, so a run with enough data ends at 63, past max_steps."""
    effective = steps.effective_steps(30, None, {"rl.num_iterations": 3, "train_fraction": 0.7})
    assert (effective.max_steps, effective.final_step) == (62, 63)
    assert "step 63 (max_steps 62, checked only after each batch" in effective.explain()


def test_plan_words_say_where_training_ends_and_that_the_data_can_end_it_earlier() -> None:
    effective = steps.effective_steps(45, None, {"num_iterations": 2, "train_fraction": 0.5}, batch_size=1)
    text = effective.explain()
    assert text.startswith(
        "step 44 (of max_steps 45: 22 examples × 1 epoch ÷ batch 1 = 22 batches × 2 iterations)"
    ), text
    assert "fewer if prompts longer than max_prefill_predict_length (256 tokens) are dropped" in text
    assert effective.data_bound and effective.rule_known
    plenty = steps.effective_steps(50, None, {})
    assert not plenty.data_bound and plenty.explain().startswith("step 50 (= max_steps;")
    agentic = steps.effective_steps(50, None, {"rl.use_agentic_rollout": True})
    assert not agentic.rule_known and "not derived" in agentic.explain()
    with pytest.raises(steps.ConfigProblem, match="given twice"):
        steps.effective_steps(50, None, {"rl.use_agentic_rollout": True, "use_agentic_rollout": "true"})


def test_final_step_of_a_request_reads_its_batch_size() -> None:
    """45 batches of 4, 2 iterations, half the data: 90 examples, 22 batches, step 44 (not 45)."""
    fields = {"num_batches": 45, "batch_size": 4}
    req = validate_request(
        {
            "model": "gemma4-26b",
            "hf_repo": "google/gemma-4-26b-a4b-it",
            "training": fields,
            "maxtext_overrides": {"rl.num_iterations": 2, "train_fraction": 0.5},
        }
    )
    assert steps.final_step(req) == layout.final_step_for(req) == 44
    assert steps.training_steps(req).max_steps == 45


# ---------------------------------------------------------------- the verdict


EFFECTIVE = steps.effective_steps(45, None, {"rl.num_iterations": 2, "train_fraction": 0.5}, batch_size=4)


def test_a_clean_end_below_the_final_step_is_done_with_its_reason() -> None:
    short = train_verdict.train_outcome("succeeded", 30, EFFECTIVE, reported=30, end_line=True)
    assert short.verdict == train_verdict.TrainVerdict.DONE and short.final == 30 and short.short
    assert short.expected == 44
    assert short.explanation and short.explanation.startswith("trained to step 30 of 45: the data ran out")
    full = train_verdict.train_outcome("succeeded", 44, EFFECTIVE, reported=44, end_line=True)
    assert full.verdict == train_verdict.TrainVerdict.DONE and not full.short
    assert full.explanation and "22 batches × 2 iterations" in full.explanation
    exact = train_verdict.train_outcome(
        "succeeded", 50, steps.effective_steps(50, None, {}), reported=50, end_line=True
    )
    assert exact.verdict == train_verdict.TrainVerdict.DONE and exact.explanation is None


@pytest.mark.parametrize(
    ("head", "committed", "reported", "end_line", "verdict", "words"),
    [
        ("failed", 30, 30, False, train_verdict.TrainVerdict.NOT_DONE, "the head is failed"),
        ("succeeded", None, 30, True, train_verdict.TrainVerdict.NO_CHECKPOINT, "committed no checkpoint"),
        ("succeeded", 20, 30, True, train_verdict.TrainVerdict.STEP_MISMATCH, "newest committed step is 20"),
        ("succeeded", 30, 30, False, train_verdict.TrainVerdict.NO_END_LINE, END_LINE),
        ("succeeded", 30, None, True, train_verdict.TrainVerdict.STEP_MISMATCH, "reported no training step"),
        (
            "succeeded",
            46,
            46,
            True,
            train_verdict.TrainVerdict.STEP_MISMATCH,
            "beyond the expected final step 44",
        ),
    ],
)
def test_an_end_without_all_its_evidence_is_not_done(
    head: str,
    committed: int | None,
    reported: int | None,
    end_line: bool,
    verdict: train_verdict.TrainVerdict,
    words: str,
) -> None:
    outcome = train_verdict.train_outcome(head, committed, EFFECTIVE, reported=reported, end_line=end_line)
    assert outcome.verdict == verdict and outcome.final is None
    assert words in outcome.reason, outcome.reason


def test_a_resumed_run_that_runs_out_early_says_why() -> None:
    """Tunix skips one batch per restored optimizer step: with 2 iterations per batch a resume at
    step 30 of 100 skips 30 batches though it trained on 15, and ends at 70."""
    effective = steps.effective_steps(50, None, {"rl.num_iterations": 2})
    assert effective.final_with_examples(None, resumed_from=30) == 70
    outcome = train_verdict.train_outcome(
        "succeeded", 70, effective, reported=70, end_line=True, resumed_from=30
    )
    assert outcome.verdict == train_verdict.TrainVerdict.DONE and outcome.explanation
    assert (
        "resumed at step 30" in outcome.explanation and "skips one batch per restored" in outcome.explanation
    )


# ---------------------------------------------------------------- the log and the scenario


def _line(level: str, source: str, message: str) -> str:
    return f"[simulated] {level}0102 15:04:05.123456 140318812 {source}] {message}"


def test_the_log_reader_sees_the_restore_and_the_end_and_folds_them_per_attempt() -> None:
    first = train_log.parse(
        "\n".join(
            [
                _line("I", "checkpoint_manager.py:292", "Restored params from step: 20 in 1.250 seconds"),
                _line(
                    "I", "peft_trainer.py:735", "Train step 21 training loss: 0.2  - training perplexity: 1.2"
                ),
            ]
        )
    )
    assert (first.restored_step, first.latest_step, first.completed) == (20, 21, False)
    evidence = train_log.fold_attempt(None, 2, first)
    second = train_log.parse(_line("W", "train_rl.py:810", END_LINE))
    assert second.completed and second.latest_step is None
    evidence = train_log.fold_attempt(evidence, 2, second)
    assert evidence == {"attempt": 2, "last_step": 21, "restored_step": 20, "end_line": True}
    assert train_log.reported_step(evidence) == 21
    # Attempt 3 is another run of train_rl: attempt 2's end line counts for nothing.
    third = train_log.fold_attempt(evidence, 3, train_log.parse(""))
    assert third == {"attempt": 3, "last_step": None, "restored_step": None, "end_line": False}
    restored_only = train_log.fold_attempt(
        None,
        4,
        train_log.parse(
            _line("I", "checkpoint_manager.py:292", "Restored params from step: 40 in 1.0 seconds")
        ),
    )
    assert train_log.reported_step(restored_only) == 40
    assert not train_log.parse(f"[simulated] {END_LINE}").completed, (
        "only train_rl's own line, with absl's prefix"
    )


def test_the_scenario_describes_the_train_split() -> None:
    scenario = Scenario.from_strings(["train:train-examples:60", "train:2:long-prompts:5", "convert:oom"])
    assert scenario.train_data(1) == TrainSplit(rows=60, long_prompts=0)
    assert scenario.train_data(2) == TrainSplit(rows=60, long_prompts=5)
    assert Scenario.from_document(scenario.to_document()) == scenario
    assert Scenario().train_data() == TrainSplit() and train_data([]) == TrainSplit()
    with pytest.raises(ScenarioError, match="describes the train split"):
        Scenario.from_strings(["export:train-examples:3"])
    with pytest.raises(ScenarioError, match="did you mean 'train-examples'"):
        Scenario.from_strings(["train:train-example:3"])


class _Workload:
    def __init__(self, *entries: str) -> None:
        self.faults = Scenario.from_strings(entries).faults


def _simulated_train(extra: list[str], *entries: str, files: dict[str, bytes] | None = None) -> FakeContainer:
    from dataclasses import replace

    ctx = FakeContainer(
        {CONVERTED + "0/items/_METADATA": b"{}", PINNED + "rlpipe-pinned.json": b"{}", **(files or {})}
    )
    ctx.workload = _Workload(*entries)  # type: ignore[attr-defined]  # what runtime.ProgramRun has
    argv = [
        "run_name=rl",
        f"base_output_directory={TRAINED}",
        f"load_parameters_path={CONVERTED}0/items/",
        *extra,
    ]
    args = replace(Arguments.parse(argv), env={"RLPIPE_PINNED_URI": PINNED}, steps=("fetch",))
    assert sim_maxtext.PROGRAMS["train"](ctx, args) == 0
    return ctx


def _committed(ctx: FakeContainer) -> list[int]:
    return sim_train_rl.committed_steps(ctx, ACTOR)


def test_the_simulated_train_rl_ends_where_its_data_ends() -> None:
    args = [
        "num_batches=45",
        "batch_size=4",
        "rl.num_iterations=2",
        "train_fraction=0.5",
        "checkpoint_period=10",
    ]
    plenty = _simulated_train(args)
    parsed = train_log.parse("\n".join(plenty.lines))
    assert parsed.latest_step == 44 and parsed.completed and _committed(plenty) == [10, 20, 30, 40, 44]
    short = _simulated_train(args, "train:train-examples:60")
    parsed = train_log.parse("\n".join(short.lines))
    assert parsed.latest_step == 30 and parsed.completed and _committed(short) == [10, 20, 30]
    assert parsed.post is not None, "train_rl still evaluates after a short training"


def test_the_simulated_train_rl_fails_without_a_single_batch() -> None:
    from dataclasses import replace

    ctx = FakeContainer({CONVERTED + "0/items/_METADATA": b"{}", PINNED + "rlpipe-pinned.json": b"{}"})
    ctx.workload = _Workload("train:train-examples:3")  # type: ignore[attr-defined]
    argv = [
        "run_name=rl",
        f"base_output_directory={TRAINED}",
        f"load_parameters_path={CONVERTED}0/items/",
        "batch_size=4",
    ]
    args = replace(Arguments.parse(argv), env={"RLPIPE_PINNED_URI": PINNED}, steps=("fetch",))
    with pytest.raises(ProgramExit, match="StopIteration"):
        sim_maxtext.PROGRAMS["train"](ctx, args)
    assert not [u for u in ctx.files if u.startswith(ACTOR)]
    assert not train_log.parse("\n".join(ctx.lines)).completed


def test_a_resumed_simulated_run_skips_a_batch_per_restored_step() -> None:
    args = ["num_batches=50", "batch_size=1", "rl.num_iterations=2", "checkpoint_period=30"]
    first = _simulated_train(args)
    assert _committed(first) == [30, 60, 90, 100]
    at_30 = {u: d for u, d in first.files.items() if u.startswith(ACTOR + "30/")}
    resumed = _simulated_train(args, files=at_30)
    parsed = train_log.parse("\n".join(resumed.lines))
    assert (parsed.restored_step, parsed.latest_step, parsed.completed) == (30, 70, True)


# ---------------------------------------------------------------- the stage, on the local stack

# 45 batches of 4 (the preset's), 2 iterations per batch, half the data: max_steps 45, 22 batches
# when the data is plentiful (step 44); the scenario's 60 examples give 15 batches (step 30).
TRAINING = {"num_batches": 45, "checkpoint_period": 10}
OVERRIDES = {"rl.num_iterations": 2, "train_fraction": 0.5}
SHORT = "train:train-examples:60"


@pytest.fixture
def simulate(
    kube: KubeApiServer, buckets: Buckets, hub: HubDouble
) -> Iterator[Callable[..., ClusterSimulator]]:
    started: list[ClusterSimulator] = []

    def make(*entries: str) -> ClusterSimulator:
        sim = ClusterSimulator(
            kube,
            buckets.client,
            scenario=Scenario.from_strings(entries),
            timing=Timing.zero(),
            seed=7,
            hub_url=hub.url,  # the head stages the pinned data from it
        )
        started.append(sim.start())
        return sim

    yield make
    for sim in started:
        sim.stop()


def _ready_to_train(env: dict[str, Any], run_id: str) -> None:
    """A run planned with its conversion in the cache (as an earlier run left it)."""
    env["claim"](run_id, training=TRAINING, maxtext_overrides=OVERRIDES)
    env["service"].plan(run_id)
    record = env["ledger"].get(run_id)
    req = validate_request(record.request)
    ctx = RenderContext(run_id=run_id, bucket=env["store"].bucket_name, hf_revision=record.lineage.hf_sha)
    cache = conversion_cache(req, ctx)
    directory = cache.attempt_dir(run_id, 1)
    env["store"].put(directory + "0/items/_METADATA", b"{}")
    env["store"].put(directory + "0/commit_success.txt", b"ok")
    env["store"].put(layout.pinned_manifest(directory), b"{}")
    env["state"].create(cache.ready, blobstore.dumps({"attempt_dir": directory}))
    assert env["service"].plan(run_id)["stages"] == ["train", "export"]


def _finished(env: dict[str, Any], name: str, kind: str = "jobsets", timeout: float = 60) -> None:
    """Waits until the workload is terminal, reading the cluster only (no status call yet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = env["kube"].get(kind, name, namespace=NS).get("status") or {}
        conditions = {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"}
        if conditions & {"Completed", "Complete", "Failed"}:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} did not finish in {timeout}s")


def _status(env: dict[str, Any], run_id: str, stage: str, attempt: int = 1) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = env["service"].status(run_id, stage, attempt)
        if status["phase"] in ("succeeded", "failed"):
            return status
        time.sleep(0.05)
    raise AssertionError(f"{run_id} {stage} did not end: {status}")


def _head_pod(env: dict[str, Any], name: str) -> str:
    selector = f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=pathways-head"
    pods = env["kube"].list("pods", namespace=NS, label_selector=selector)
    assert pods, f"no head pod of {name}"
    return str(pods[-1]["metadata"]["name"])


def _drop_lines(env: dict[str, Any], pod: str, *drop: str) -> None:
    kept = [
        line.text
        for line in env["kube"].pod_log_lines(pod, namespace=NS)
        if not any(d in line.text for d in drop)
    ]
    env["kube"].set_pod_log(pod, "\n".join(kept), namespace=NS)


def test_a_clean_early_end_succeeds_at_its_actual_step_and_export_loads_it(
    env: dict[str, Any],
    simulate: Callable[..., ClusterSimulator],
) -> None:
    run_id = "rshortdata01"
    simulate(SHORT)
    _ready_to_train(env, run_id)
    assert env["ledger"].get(run_id).lineage.final_step is None
    env["service"].launch(run_id, "train", 1)
    assert env["ledger"].get(run_id).lineage.final_step == 44, "at launch: the config's (plentiful data)"
    status = _status(env, run_id, "train")  # polled while it runs: the log is read in pieces
    assert status["phase"] == "succeeded", status
    assert status["artifact"] == "final step 30 committed"
    record = env["ledger"].get(run_id)
    assert record.lineage.final_step == 30
    end = record.results["training_end"]
    assert (end["final_step"], end["expected_final_step"], end["attempt"]) == (30, 44, 1)
    assert end["explanation"].startswith("trained to step 30 of 45: the data ran out (expected step 44")
    assert record.results["final_step"] == 30 and record.progress["step"] == 30
    assert f"  training    {end['explanation']}" in summary(record)
    assert "(final step 30)" in summary(record)

    launched = env["service"].launch(run_id, "export", 1)
    job = env["kube"].get("jobs", launched["workload"], namespace=NS)
    argv = " ".join(
        str(a) for c in job["spec"]["template"]["spec"]["containers"] for a in c.get("args") or []
    )
    assert "/rl/checkpoints/actor/30/model_params/" in argv and "/actor/44/" not in argv
    exported = _status(env, run_id, "export")
    assert exported["phase"] == "succeeded", exported  # the simulated export found step 30's files
    record = env["ledger"].get(run_id)
    assert record.lineage.final_step == 30 and record.attempt_record("export", 1).phase == "succeeded"
    from rlpipe.control.lifecycle import stored_outputs

    ctx = RenderContext(run_id=run_id, bucket=env["store"].bucket_name, final_step=30)
    req = validate_request(record.request)
    assert stored_outputs.stage_complete(env["store"], req, ctx, "train", 1).complete
    assert stored_outputs.done_stages(env["store"], record, req, ctx) == {"train", "export"}


def test_a_crash_at_that_step_is_still_a_failure(
    env: dict[str, Any],
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """The same checkpoints and log as a clean end at step 30, but the program exits 1 after its
    last save (before train_rl's end line): a failure, classified by the cluster as before."""
    run_id = "rshortcrash1"
    simulate(SHORT)
    _ready_to_train(env, run_id)
    name = env["service"].launch(run_id, "train", 1)["workload"]
    _finished(env, name)
    pod = _head_pod(env, name)
    _drop_lines(env, pod, END_LINE, "Post RL Training")
    env["kube"].patch_status(
        "pods",
        pod,
        {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "workload-container",
                    "ready": False,
                    "restartCount": 0,
                    "image": "i",
                    "imageID": "",
                    "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
                }
            ],
        },
        namespace=NS,
    )
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "FailedJobs",
        "message": "jobset failed due to reaching max number of restarts (first failed job: head)",
        "lastTransitionTime": "2026-12-04T00:00:00Z",
    }
    env["kube"].patch_status(
        "jobsets", name, {"conditions": [failed], "terminalState": "Failed"}, namespace=NS
    )
    status = env["service"].status(run_id, "train", 1)
    assert status["phase"] == "failed", status
    record = env["ledger"].get(run_id)
    assert record.attempt_record("train", 1).phase == "failed"
    assert record.lineage.final_step == 44, "no clean end: the ledger keeps the config's step"
    assert "training_end" not in record.results


def test_exit_0_with_the_last_save_missing_is_a_failure(
    env: dict[str, Any],
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """The log says step 30 and the end line, but the newest committed step is 20."""
    run_id = "rshortsave01"
    simulate(SHORT)
    _ready_to_train(env, run_id)
    name = env["service"].launch(run_id, "train", 1)["workload"]
    _finished(env, name)
    run = layout.RunLayout(env["store"].bucket_name, run_id)
    env["store"].delete(run.step_commit(30))
    status = env["service"].status(run_id, "train", 1)
    assert status["phase"] == "failed" and status["failure"]["tag"] == "permanent", status
    message = status["failure"]["message"]
    assert "newest committed step is 20" in message and "last step is 30" in message, message
    assert env["ledger"].get(run_id).lineage.final_step == 44


def test_exit_0_without_the_end_line_is_a_failure(
    env: dict[str, Any],
    simulate: Callable[..., ClusterSimulator],
) -> None:
    run_id = "rshortnoend1"
    simulate(SHORT)
    _ready_to_train(env, run_id)
    name = env["service"].launch(run_id, "train", 1)["workload"]
    _finished(env, name)
    _drop_lines(env, _head_pod(env, name), END_LINE)
    status = env["service"].status(run_id, "train", 1)
    assert status["phase"] == "failed" and status["failure"]["tag"] == "permanent", status
    assert END_LINE in status["failure"]["message"] and "step 30 committed" in status["failure"]["message"]
    assert env["ledger"].get(run_id).lineage.final_step == 44


def test_plentiful_data_still_ends_below_max_steps_when_the_config_says_so(
    env: dict[str, Any],
    simulate: Callable[..., ClusterSimulator],
) -> None:
    """No scenario entry: 22 batches × 2 iterations end at step 44 of max_steps 45, a success
    (before, the stage called this the data running out, and failed the run)."""
    run_id = "rplentiful01"
    simulate()
    _ready_to_train(env, run_id)
    env["service"].launch(run_id, "train", 1)
    assert _status(env, run_id, "train")["phase"] == "succeeded"
    record = env["ledger"].get(run_id)
    assert record.lineage.final_step == 44
    assert record.results["training_end"]["explanation"].startswith(
        "trained to step 44 of 45: the data ran out"
    )


def test_a_hub_that_fails_the_staging_step_is_a_transient_failure_of_the_attempt(
    env: dict[str, Any], kube: KubeApiServer, buckets: Buckets
) -> None:
    """The head's staging step exits 75 when the Hub or GCS fails on the way (core.staging); the
    stage classes that transient (retried under its budget), not a permanent end of the run."""
    sim = ClusterSimulator(kube, buckets.client, timing=Timing.zero(), seed=7).start()  # no Hub
    try:
        run_id = "rstagefail01"
        _ready_to_train(env, run_id)
        env["service"].launch(run_id, "train", 1)
        status = _status(env, run_id, "train")
    finally:
        sim.stop()
    assert status["phase"] == "failed", status
    assert status["failure"]["tag"] == "transient", status
    assert "exited with code 75" in status["failure"]["message"]
