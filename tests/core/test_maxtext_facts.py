"""The parser, the step arithmetic and the simulated programs, each against the upstream facts.

``tests/fixtures/maxtext_facts.yaml`` was written from MaxText 0.2.4, Tunix and Orbax with file
and line for every fact. The pipeline's reader of the head's log (``core.train_log``), its step
rules (``core.steps``, ``core.layout``) and the simulator (``local.simulator.maxtext``) are each
checked against it, so none of them can agree with another by copying it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.core import layout, steps, train_log
from rlpipe.local.simulator.maxtext import PROGRAMS
from rlpipe.local.simulator.program import Arguments
from rlpipe.local.simulator.train_rl import train_steps as simulated_train_steps

FACTS: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "fixtures" / "maxtext_facts.yaml").read_text(encoding="utf-8")
)
PREFIX = re.compile(FACTS["log_prefix"]["regex"])
# A program with a log format of its own (to_maxtext: Python logging's default one) instead of absl's.
FORMATS = {
    stage: re.compile(spec["log_format"]["regex"])
    for stage, spec in FACTS["programs"].items()
    if "log_format" in spec
}
LINES = {
    stage: [(entry, re.compile(entry["regex"])) for entry in spec["lines"]]
    for stage, spec in FACTS["programs"].items()
}
SCRIPT_LINES = [re.compile(entry["regex"]) for entry in FACTS["rlpipe_script_lines"]]
ALL_ENTRIES = [entry for spec in FACTS["programs"].values() for entry in spec["lines"]]


class FakeContainer:
    """An in-memory ProgramContext: files by URI in write order, log lines, a clock."""

    export_shards = 3

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.clock = 1_767_323_045.25
        self.lines: list[str] = []
        self.files: dict[str, bytes] = dict(files or {})
        self.order: list[str] = []

    def now(self) -> float:
        return self.clock

    def log(self, line: str) -> None:
        self.lines.extend(line.splitlines())

    def pause(self, simulated_seconds: float) -> None:
        self.clock += simulated_seconds

    def duration(self, name: str) -> float:
        return 2.0

    def write(self, uri: str, data: bytes | str) -> None:
        self.files[uri] = data if isinstance(data, bytes) else data.encode()
        self.order.append(uri)

    def local_path(self, path: str) -> Path:
        raise AssertionError(f"no step here reads the pod's disk ({path})")

    def claim(self, uri: str) -> None:
        pass

    def list(self, prefix_uri: str) -> list[str]:
        return sorted(u for u in self.files if u.startswith(prefix_uri))

    def exists_under(self, prefix_uri: str) -> bool:
        return any(u.startswith(prefix_uri.rstrip("/") + "/") for u in self.files)

    def exists(self, uri: str) -> bool:
        return uri in self.files

    def read(self, uri: str) -> bytes | None:
        return self.files.get(uri)

    def delete(self, uri: str) -> None:
        self.files.pop(uri, None)

    def note(self, kind: str, detail: str) -> None:
        pass

    def hook(self, point: str, step: int = 0, *, saving: bool = False) -> None:
        pass


CONVERTED = "gs://b/cache/maxtext/ck/rrun00000001-a1/"
PINNED = CONVERTED + "hf-source/"
TRAINED = "gs://b/runs/rrun00000001/trained/"
ACTOR = TRAINED + "rl/checkpoints/actor/"


def _train(extra: list[str], files: dict[str, bytes] | None = None) -> FakeContainer:
    ctx = FakeContainer(
        {CONVERTED + "0/items/_METADATA": b"{}", PINNED + "rlpipe-pinned.json": b"{}", **(files or {})}
    )
    argv = [
        "run_name=rl",
        f"base_output_directory={TRAINED}",
        f"load_parameters_path={CONVERTED}0/items/",
        "batch_size=4",
        *extra,
    ]
    args = replace(
        Arguments.parse(argv),
        env={"RLPIPE_PINNED_URI": PINNED, "RLPIPE_PINNED_DIR": "/tmp/rlpipe/hf-source"},
        steps=("fetch",),
    )
    assert PROGRAMS["train"](ctx, args) == 0
    return ctx


def _described(stage: str, line: str) -> str | None:
    """The fixture id describing a printed line, or None."""
    if any(rx.match(line) for rx in SCRIPT_LINES):
        return "rlpipe-script"
    own = FORMATS.get(stage)
    head = (own or PREFIX).match(line)
    if head is None:
        return None
    message = line[head.end() :]
    for entry, rx in LINES[stage]:
        where = own is not None or f" {entry['file']}:" in line[: head.end()]  # absl's names file:line
        if rx.match(message) and line[0] == entry["level"] and where:
            return str(entry["id"])
    return None


# ---------------------------------------------------------------- the fixture itself


def test_every_fact_cites_its_source() -> None:
    for entry in ALL_ENTRIES:
        assert entry["source"] and re.search(r"\.(py|yml):[0-9]+", entry["source"]), entry["id"]
    for section in ("write_order", "step_arithmetic", "checkpointing", "secrets_and_pinning"):
        assert re.search(r":[0-9]+", yaml.safe_dump(FACTS[section])), section


@pytest.mark.parametrize("entry", ALL_ENTRIES, ids=lambda e: str(e["id"]))
def test_each_format_matches_its_own_example(entry: dict[str, Any]) -> None:
    line = f"{entry['level']}0102 15:04:05.123456 140318812 {entry['file']}:1] {entry['example']}"
    assert PREFIX.match(line) and re.match(entry["regex"], entry["example"])


# ---------------------------------------------------------------- the parser


@pytest.mark.parametrize("entry", [e for e in ALL_ENTRIES if "parsed" in e], ids=lambda e: str(e["id"]))
def test_the_parser_reads_every_real_format(entry: dict[str, Any]) -> None:
    line = f"{entry['level']}0102 15:04:05.123456 140318812 {entry['file']}:785] {entry['example']}"
    parsed = train_log.parse(line)
    want = entry["parsed"]
    if entry["id"] == "train_step":
        assert parsed.latest_step == want["step"] and parsed.latest_mean_reward is None
        return
    got = {"pre_eval": parsed.pre, "post_eval": parsed.post}.get(entry["id"])
    if entry["id"] == "intermediate_eval":
        (last,) = parsed.intermediate
        assert last.step == want["step"]
        got = last.eval
    assert got is not None
    for field in ("corr", "total", "accuracy", "partial_accuracy", "format_accuracy", "mean_reward"):
        assert getattr(got, field) == pytest.approx(want[field]), field


def test_formats_that_do_not_exist_carry_no_reward() -> None:
    lines = FACTS["programs"]["train"]["not_printed"]
    prefixed = [f"W0102 15:04:05.123456 1 train_rl.py:785] {line}" for line in lines]
    assert train_log.parse("\n".join(lines + prefixed)).progress() is None


def test_only_the_three_reward_lines_carry_a_reward() -> None:
    reward_ids = {e["id"] for e in ALL_ENTRIES if e.get("reward")}
    assert reward_ids == {"pre_eval", "intermediate_eval", "post_eval"}
    for entry in ALL_ENTRIES:
        line = f"{entry['level']}0102 15:04:05.123456 1 {entry['file']}:1] {entry['example']}"
        assert (train_log.parse(line).latest_mean_reward is not None) == (entry["id"] in reward_ids)


# ---------------------------------------------------------------- step arithmetic


@pytest.mark.parametrize("example", FACTS["step_arithmetic"]["examples"], ids=str)
def test_final_step_from_the_effective_config(example: dict[str, Any]) -> None:
    got = steps.effective_steps(example["num_batches"], None, example["overrides"]).final_step
    assert got == example["final"]
    argv = [f"num_batches={example['num_batches']}", *(f"{k}={v}" for k, v in example["overrides"].items())]
    assert simulated_train_steps(Arguments.parse(argv)) == example["final"]


@pytest.mark.parametrize("example", FACTS["checkpointing"]["examples"], ids=str)
def test_checkpoint_schedule(example: dict[str, Any]) -> None:
    assert steps.checkpoint_schedule(example["final"], example["period"]) == example["steps"]


@pytest.mark.parametrize("example", FACTS["checkpointing"]["retention"]["examples"], ids=str)
def test_what_orbax_keeps_is_what_export_step_counts_on(example: dict[str, Any]) -> None:
    """Orbax's LatestN: what stays is the newest max_to_keep, so a step export.step may choose
    survives when the retention rlpipe passes counts from it to the end (export_checks.kept_for),
    and what stays after export (export_step.kept_after_export) is at least what Orbax kept."""
    from rlpipe.core import export_step
    from rlpipe.core.request.export_checks import kept_for

    committed, keep, kept = example["committed"], example["max_to_keep"], example["kept"]
    period = committed[1] - committed[0]
    s = steps.effective_steps(committed[-1], period, {"max_num_checkpoints_to_keep": keep})
    assert s.kept_steps() == kept
    for step in committed:  # the retention rlpipe would pass for this step keeps it, and no more
        n = kept_for(s, step)
        assert committed[-n:][0] == step
    assert export_step.kept_after_export(committed, committed[0], keep) == {committed[0], *kept}


def test_defaults_are_rl_yml() -> None:
    defaults = {k: v["value"] for k, v in FACTS["step_arithmetic"]["defaults"].items()}
    for key in ("rl.num_iterations", "train_fraction", "num_epoch", "eval_interval", "num_test_batches"):
        assert steps.RL_YML_DEFAULTS[key] == defaults[key], key
    assert steps.RL_YML_DEFAULTS["checkpoint_period"] == FACTS["checkpointing"]["period"]["value"]
    assert (
        steps.RL_YML_DEFAULTS["max_num_checkpoints_to_keep"] == FACTS["checkpointing"]["max_to_keep"]["value"]
    )
    # The simulator's reward pace is 1.0 at MaxText's KL weight (local/simulator/train_rl.py).
    from rlpipe.local.simulator.train_rl import DEFAULT_KL_WEIGHT

    assert defaults["rl.grpo_beta"] == DEFAULT_KL_WEIGHT


# ---------------------------------------------------------------- the simulated programs


@pytest.mark.parametrize(
    "extra",
    [["num_batches=25", "num_epoch=2"], ["num_batches=12", "checkpoint_period=5", "eval_interval=4"]],
    ids=["two-epochs", "short-period"],
)
def test_simulated_train_prints_only_what_train_rl_prints(extra: list[str]) -> None:
    ctx = _train(extra)
    ids = [_described("train", line) for line in ctx.lines]
    assert None not in ids, [line for line, i in zip(ctx.lines, ids, strict=True) if i is None]
    assert ids.index("pre_eval") < ids.index("start") < ids.index("train_step")
    assert ids[-2:] == ["completed", "post_eval"]


def test_simulated_train_reports_rewards_only_where_train_rl_does() -> None:
    ctx = _train(["num_batches=25", "num_epoch=2"])
    parsed = train_log.parse("\n".join(f"[simulated] {line}" for line in ctx.lines))
    effective = steps.effective_steps(25, None, {"num_epoch": 2})
    assert parsed.pre is not None and parsed.post is not None
    assert parsed.latest_step == effective.final_step == 50
    assert [e.step for e in parsed.intermediate] == effective.eval_steps() == [10, 20, 30, 40, 50]
    assert parsed.post.mean_reward > parsed.pre.mean_reward
    assert parsed.post.total == 5 * 4  # rl.yml num_test_batches x batch_size


def test_simulated_resume_restores_and_evaluates_again() -> None:
    first = _train(["num_batches=120"])
    committed = {u: d for u, d in first.files.items() if u.startswith(ACTOR + "50/")}
    ctx = _train(["num_batches=120"], files=committed)
    ids = [_described("train", line) for line in ctx.lines]
    assert None not in ids and ids.count("restored") == 1
    parsed = train_log.parse("\n".join(ctx.lines))
    assert parsed.pre is not None and parsed.latest_step == 120
    assert "Train step 51 " in "\n".join(ctx.lines) and "Train step 50 " not in "\n".join(ctx.lines)


def test_simulated_checkpoints_commit_items_before_the_step() -> None:
    ctx = _train(["num_batches=120"])
    markers = FACTS["write_order"]["rl_step"]["markers"]
    for step in (50, 100, 120):
        order = [ctx.order.index(f"{ACTOR}{step}/{m}") for m in markers]
        assert order == sorted(order), step
        step_files = [u for u in ctx.order if u.startswith(f"{ACTOR}{step}/")]
        assert step_files[-1] == f"{ACTOR}{step}/{FACTS['write_order']['rl_step']['committed_by']}"
    names = [u[len("gs://b/") :] for u in ctx.files]
    run = layout.RunLayout("b", "rrun00000001")
    assert layout.committed_steps(names, run) == steps.checkpoint_schedule(120, 50)


def test_simulated_train_without_checkpointing_saves_nothing() -> None:
    ctx = _train(["num_batches=20", "enable_checkpointing=false"])
    assert not [u for u in ctx.files if u.startswith(ACTOR)]


def test_simulated_convert_and_export_print_only_what_the_tools_print() -> None:
    convert = FakeContainer()
    base = "gs://b/cache/maxtext/ck/rrun00000001-a1/"
    env = {
        "RLPIPE_HF_REPO": "google/gemma-4-26b-a4b-it",
        "RLPIPE_HF_REVISION": "a" * 40,
        "RLPIPE_PINNED_URI": base + "hf-source/",
        "RLPIPE_SNAPSHOT_DIR": "/scratch/hf-snapshot",
    }
    argv = ["model_name=gemma4-26b", "--hf_model_path=/scratch/hf-snapshot", f"base_output_directory={base}"]
    assert PROGRAMS["convert"](convert, replace(Arguments.parse(argv), env=env, steps=("pin",))) == 0
    assert all(_described("convert", line) for line in convert.lines), convert.lines
    assert convert.order[-1] == base + "0/commit_success.txt"
    pinned = [u for u in convert.order if u.startswith(base + "hf-source/")]
    assert pinned[-1].endswith("rlpipe-pinned.json") and convert.order.index(
        pinned[-1]
    ) < convert.order.index(base + "0/items/commit_success.txt")

    export = FakeContainer({**convert.files, ACTOR + "50/model_params/_METADATA": b"{}"})
    argv = [
        "model_name=gemma4-26b",
        "--hf_model_path=/scratch/hf-source",
        f"load_parameters_path={ACTOR}50/model_params/",
        "base_output_directory=gs://b/runs/rrun00000001/hf/",
    ]
    env = {
        "RLPIPE_PINNED_URI": base + "hf-source/",
        "RLPIPE_PINNED_DIR": "/scratch/hf-source",
        "TMPDIR": "/scratch/tmp",
    }
    assert PROGRAMS["export"](export, replace(Arguments.parse(argv), env=env, steps=("fetch",))) == 0
    assert all(_described("export", line) for line in export.lines), export.lines
    assert "staging" in {_described("export", line) for line in export.lines}

    # What the pipeline passes: a directory on the pod's volume, written directly, in the same order.
    local = FakeContainer({**convert.files, ACTOR + "50/model_params/_METADATA": b"{}"})
    argv = [*argv[:-1], "base_output_directory=/scratch/hf-export"]
    assert PROGRAMS["export"](local, replace(Arguments.parse(argv), env=env, steps=("fetch",))) == 0
    assert all(_described("export", line) for line in local.lines), local.lines
    assert "local" in {_described("export", line) for line in local.lines}
    assert [u.removeprefix("/scratch/hf-export/") for u in local.order if u.startswith("/scratch/")] == [
        u.removeprefix("gs://b/runs/rrun00000001/hf/") for u in export.order if "/hf/" in u
    ]


def test_simulated_fetch_fails_without_the_pinned_files() -> None:
    ctx = FakeContainer({CONVERTED + "0/items/_METADATA": b"{}"})
    args = replace(
        Arguments.parse(
            ["run_name=rl", f"base_output_directory={TRAINED}", f"load_parameters_path={CONVERTED}0/items/"]
        ),
        env={"RLPIPE_PINNED_URI": PINNED},
        steps=("fetch",),
    )
    with pytest.raises(Exception, match=r"rlpipe-pinned\.json is missing"):
        PROGRAMS["train"](ctx, args)
