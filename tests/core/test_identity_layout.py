"""Deterministic names and the GCS layout's completion rules (docs/design.md#stages-and-what-done-means, docs/design.md#the-gcs-layout, docs/design.md#names-and-labels)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlpipe.core import identity, layout, steps, train_verdict


@given(st.text(min_size=1, max_size=300))
def test_run_id_is_short_dns_safe_and_starts_with_a_letter(key: str) -> None:
    run_id = identity.run_id_for(key)
    assert re.fullmatch(r"[a-z][a-z0-9]{11}", run_id)
    assert identity.run_id_for(key) == run_id  # deterministic


def test_different_keys_give_different_run_ids() -> None:
    ids = {identity.run_id_for(identity.key_for_object("b", "requests/x.yaml", g)) for g in range(2000)}
    assert len(ids) == 2000


def test_keys_from_each_source_are_distinct() -> None:
    keys = {
        identity.key_for_request_id("abc"),
        identity.key_for_object("abc", "requests/a.yaml", 1),
        identity.key_for_message("projects/p/topics/abc", "1"),
    }
    assert len({identity.run_id_for(k) for k in keys}) == 3


@pytest.mark.parametrize("stage", identity.STAGES)
def test_workload_names_fit_28_characters_for_any_reachable_attempt(stage: str) -> None:
    run_id = identity.run_id_for("k")
    for attempt in (1, 9, 10, 61):
        name = identity.workload_name(run_id, stage, attempt)  # type: ignore[arg-type]
        assert len(name) <= 28 and name == f"{run_id}-{stage}-a{attempt}"


def test_workload_name_rejects_overflow_and_attempt_zero() -> None:
    with pytest.raises(ValueError, match="longer than 28"):
        identity.workload_name("r" * 12, "convert", 10**6)
    with pytest.raises(ValueError):
        identity.workload_name("r" * 12, "train", 0)


def test_run_paths_follow_the_design_layout() -> None:
    run = layout.RunLayout("art", "rabc")
    assert run.ledger == "runs/rabc/run.json"
    assert run.event(3, "accepted") == "runs/rabc/events/000003-accepted.json"
    assert run.error == "runs/rabc/error.json"
    assert run.step_commit(50) == "runs/rabc/trained/rl/checkpoints/actor/50/commit_success.txt"
    assert run.model_params(50) == "runs/rabc/trained/rl/checkpoints/actor/50/model_params/"
    assert run.uri(run.hf_dir) == "gs://art/runs/rabc/hf/"
    cache = layout.ConversionCache("art", "ckey")
    assert cache.ready == "cache/maxtext/ckey/READY.json"
    assert cache.attempt_dir("rabc", 2) == "cache/maxtext/ckey/rabc-a2/"
    assert layout.converted_items(cache.attempt_dir("rabc", 2)) == "cache/maxtext/ckey/rabc-a2/0/items/"


def test_each_object_lives_under_its_buckets_prefixes() -> None:
    """The state bucket's names under STATE_PREFIXES, the workloads' under WORKLOAD_PREFIXES
    (Terraform's IAM conditions grant exactly these; tests/repo/test_infra.py checks that side)."""
    run, cache = layout.RunLayout("b", "rabc"), layout.ConversionCache("b", "k")
    state = [run.ledger, run.event(1, "x"), run.error, cache.ready, layout.upstream_state("org/m")]
    state += [layout.RECONCILE_CURSOR, layout.team_usage("vision")]
    workloads = [
        run.step_commit(50),
        run.hf_dir + layout.HF_INDEX,
        layout.converted_step_commit(cache.attempt_dir("rabc", 1)),
        layout.pinned_manifest(cache.attempt_dir("rabc", 1)),
        layout.PATHWAYS_PREFIX + "tmp/x",
    ]
    assert all(name.startswith(layout.STATE_PREFIXES) for name in state)
    assert all(name.startswith(layout.WORKLOAD_PREFIXES) for name in workloads)
    assert layout.upstream_state("org/m") == "upstream/org/m/state.json"
    assert layout.RECONCILE_CURSOR == "reconcile/cursor.json"
    assert layout.team_usage("vision") == "teams/vision/usage.json"


def test_nothing_the_pipeline_writes_triggers_intake() -> None:
    run, cache = layout.RunLayout("b", "rabc"), layout.ConversionCache("b", "k")
    written = [
        run.ledger,
        run.event(1, "x"),
        run.error,
        run.step_commit(50),
        run.hf_dir + "config.json",
        cache.ready,
        layout.converted_step_commit(cache.attempt_dir("rabc", 1)),
    ]
    assert not any(layout.is_request_object(n) for n in written)
    assert layout.is_request_object("requests/team/run.yaml")
    assert not layout.is_request_object("requests/notes.txt")
    assert not layout.is_request_object("requests/.hidden/x.json")


@pytest.mark.parametrize(
    ("num_batches", "steps"),
    [(50, [50]), (120, [50, 100, 120]), (30, [30]), (100, [50, 100]), (1, [1])],
)
def test_checkpoint_steps_include_every_period_and_the_forced_final_save(
    num_batches: int, steps: list[int]
) -> None:
    assert layout.checkpoint_steps(num_batches) == steps
    assert layout.final_step(num_batches) == steps[-1]


def test_train_is_complete_only_when_the_final_step_commits() -> None:
    run = layout.RunLayout("b", "r1")
    in_flight = [run.step_commit(50), run.step_commit(100), run.step_dir(120) + "model_params/x"]
    assert not layout.train_complete(in_flight, run, 120).complete
    assert layout.train_complete([*in_flight, run.step_commit(120)], run, 120).complete
    assert layout.latest_committed_step(in_flight, run) == 100


def test_convert_is_complete_only_with_the_step_commit_marker() -> None:
    d = "cache/maxtext/k/r1-a1/"
    partial = [d + "0/items/_METADATA", d + "0/items/commit_success.txt", d + "0/_CHECKPOINT_METADATA"]
    assert not layout.convert_complete(partial, d).complete  # items/ committed, step not yet
    assert layout.convert_complete([*partial, d + "0/commit_success.txt"], d).complete


def _listed(*names: str, size: int = 10) -> dict[str, Any]:
    """A manifest listing ``names`` (what the export Job's step writes: tests/core/test_export_manifest.py)."""
    return {"files": [{"path": n, "size": size, "sha256": "ab" * 32} for n in names]}


SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX = {"weight_map": {"a": SHARDS[0], "b": SHARDS[1]}}


def test_export_is_not_complete_without_its_manifest_whatever_else_is_there() -> None:
    d = "runs/r1/hf/"
    sizes = {d + n: 10 for n in ("config.json", layout.HF_INDEX, *SHARDS)}
    result = layout.export_complete(sizes, d, None, INDEX)
    assert not result.complete and result.missing == (d + layout.EXPORT_MANIFEST,)
    listed = _listed("config.json", layout.HF_INDEX, *SHARDS)
    assert layout.export_complete({**sizes, d + layout.EXPORT_MANIFEST: 300}, d, listed, INDEX).complete


def test_export_needs_every_listed_file_in_the_bucket_at_its_size() -> None:
    d = "runs/r1/hf/"
    listed = _listed("config.json", layout.HF_INDEX, *SHARDS)
    sizes = {d + n: 10 for n in ("config.json", layout.HF_INDEX, SHARDS[0])}
    result = layout.export_complete(sizes, d, listed, INDEX)
    assert not result.complete and result.missing == (d + SHARDS[1],)
    result = layout.export_complete({**sizes, d + SHARDS[1]: 11}, d, listed, INDEX)
    assert not result.complete and result.missing == (d + SHARDS[1],), "another size is another file"


def test_export_needs_every_shard_named_in_the_index_among_the_listed_files() -> None:
    d = "runs/r1/hf/"
    everything = {d + n: 10 for n in ("config.json", layout.HF_INDEX, *SHARDS)}
    listed = _listed("config.json", layout.HF_INDEX, SHARDS[0])  # shard 2 in the bucket, not listed
    result = layout.export_complete(everything, d, listed, INDEX)
    assert not result.complete and result.missing == (d + SHARDS[1],)
    assert not layout.export_complete(everything, d, _listed("config.json", layout.HF_INDEX), {}).complete


def test_export_single_file_needs_the_config_too() -> None:
    d = "runs/r1/hf/"
    sizes = {d + layout.HF_SINGLE: 10, d + layout.HF_CONFIG: 10}
    assert not layout.export_complete(sizes, d, _listed(layout.HF_SINGLE), None).complete
    assert layout.export_complete(sizes, d, _listed(layout.HF_SINGLE, layout.HF_CONFIG), None).complete


@pytest.mark.parametrize(
    "entries",
    [
        [],
        [{"path": "../run2/hf/config.json", "size": 10, "sha256": "ab" * 32}],
        [{"path": "/etc/passwd", "size": 10, "sha256": "ab" * 32}],
        [{"path": "a b.json", "size": 10, "sha256": "ab" * 32}],
        [{"path": layout.EXPORT_MANIFEST, "size": 10, "sha256": "ab" * 32}],
        [{"path": "model.safetensors", "size": -1, "sha256": "ab" * 32}],
        [{"path": "model.safetensors", "size": True, "sha256": "ab" * 32}],
        [{"path": "model.safetensors", "size": 10, "sha256": "AB" * 32}],
        [{"path": "model.safetensors", "size": 10}],
        [{"path": "config.json", "size": 10, "sha256": "ab" * 32}] * 2,
        ["config.json"],
    ],
    ids=[
        "empty",
        "dotdot",
        "absolute",
        "space",
        "itself",
        "negative",
        "bool",
        "upper-hex",
        "no-sha",
        "twice",
        "not-object",
    ],
)
def test_a_manifest_export_did_not_write_is_not_a_finished_export(entries: list[Any]) -> None:
    d = "runs/r1/hf/"
    sizes = {d + n: 10 for n in ("config.json", layout.HF_SINGLE)}
    result = layout.export_complete(sizes, d, {"files": entries}, None)
    assert not result.complete and result.missing == (d + layout.EXPORT_MANIFEST,)
    assert result.reason.startswith(f"{layout.EXPORT_MANIFEST} is not an export manifest")


def test_conversion_cache_key_changes_with_each_input() -> None:
    base = ("google/m", "a" * 40, ["model_name=m", "scan_layers=false"], "img:1")
    key = layout.conversion_cache_key(*base)
    variants = [
        ("google/n", *base[1:]),
        (base[0], "b" * 40, *base[2:]),
        (*base[:2], ["model_name=m", "scan_layers=true"], base[3]),
        (*base[:3], "img:2"),
    ]
    assert all(layout.conversion_cache_key(*v) != key for v in variants)
    assert layout.conversion_cache_key(*base) == key


def test_an_item_level_marker_alone_is_not_a_committed_step() -> None:
    """Orbax commits model_params/ (and optimizer_state/) before the step itself."""
    run = layout.RunLayout("b", "r1")
    names = [
        run.step_commit(50),
        run.step_dir(100) + "model_params/commit_success.txt",
        run.step_dir(100) + "optimizer_state/commit_success.txt",
        run.step_dir(100) + "_CHECKPOINT_METADATA",
    ]
    assert layout.latest_committed_step(names, run) == 50
    assert layout.committed_steps(names, run) == [50]
    assert layout.committed_steps([run.checkpoints + "050/commit_success.txt"], run) == []


def _req(**fields: Any) -> Any:
    from rlpipe.core.request import validate_request

    return validate_request({"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it", **fields})


def test_the_done_rule_uses_the_final_step_of_the_effective_config() -> None:
    """num_epoch 2 runs 100 steps: step 50 is only a periodic save, not the end."""
    req = _req(maxtext_overrides={"num_epoch": 2})
    run = layout.RunLayout("b", "r1")
    assert layout.final_step_for(req) == 100
    assert not layout.train_complete_for([run.step_commit(50)], run, req).complete
    assert layout.train_complete_for([run.step_commit(50), run.step_commit(100)], run, req).complete
    quarter = _req(maxtext_overrides={"train_fraction": 0.5})
    assert layout.train_complete_for([run.step_commit(25)], run, quarter).complete
    from rlpipe.core.manifests import RenderContext, stage_paths

    paths = stage_paths(req, RenderContext(run_id="r1", bucket="b"), "export", 1)
    assert paths.inputs == "gs://b/runs/r1/trained/rl/checkpoints/actor/100/model_params/"


@pytest.mark.parametrize(
    ("head", "committed", "reported", "end_line", "verdict"),
    [
        ("running", 50, 50, False, train_verdict.TrainVerdict.NOT_DONE),
        ("failed", 100, 100, False, train_verdict.TrainVerdict.NOT_DONE),
        ("succeeded", 100, 100, True, train_verdict.TrainVerdict.DONE),
        ("succeeded", 75, 75, True, train_verdict.TrainVerdict.DONE),  # the data ran out: a clean end
        ("succeeded", None, 100, True, train_verdict.TrainVerdict.NO_CHECKPOINT),
        ("succeeded", 75, 100, True, train_verdict.TrainVerdict.STEP_MISMATCH),
        ("succeeded", 100, 100, False, train_verdict.TrainVerdict.NO_END_LINE),
        ("succeeded", 150, 150, True, train_verdict.TrainVerdict.STEP_MISMATCH),
    ],
)
def test_a_finished_head_is_done_when_its_log_and_its_last_commit_agree(
    head: str, committed: int | None, reported: int, end_line: bool, verdict: train_verdict.TrainVerdict
) -> None:
    """Done is exit 0, the end line, and the newest commit being the last step reported; a clean
    end below the config's final step (100 here) is done, with the reason (tests/core/test_train_done_rule.py)."""
    effective = steps.effective_steps(100, None, {})
    outcome = train_verdict.train_outcome(head, committed, effective, reported=reported, end_line=end_line)
    assert outcome.verdict == verdict
    if verdict == train_verdict.TrainVerdict.DONE:
        assert outcome.final == committed
    if committed == 75 and verdict == train_verdict.TrainVerdict.DONE:
        assert outcome.short and "step 75 of 100" in outcome.reason and "ran out" in outcome.reason


def test_request_namespaces_are_the_first_folder_and_keep_the_default_key() -> None:
    assert layout.request_namespace("requests/team-a/x.yaml") == "team-a"
    assert layout.request_namespace("requests/team-a/deeper/x.yaml") == "team-a"
    assert layout.request_namespace("requests/x.yaml") == ""
    assert layout.request_namespace("elsewhere/team-a/x.yaml") == ""
    # Runs submitted before namespaces keep their ids; namespaced ones differ per team.
    assert identity.key_for_request_id("nightly") == "request:nightly"
    keys = {identity.key_for_request_id("nightly", ns) for ns in ("", "team-a", "team-b")}
    assert len({identity.run_id_for(k) for k in keys}) == 3
    # Upstream releases have keys of their own that no request_id can spell.
    from rlpipe.upstream.release import release_key

    assert not release_key("org/m", "a" * 40, "h").startswith("request:")


def test_a_runs_own_prefix_follows_its_namespace() -> None:
    """gs:// values under the run's own prefix pass only for the namespace that makes that run."""
    from rlpipe.core.request import validate_request
    from rlpipe.core.request.policy import Policy
    from tests.conftest import minimal_request

    run_id = identity.run_id_for(identity.key_for_request_id("nightly", "team-a"))
    doc = minimal_request(
        request_id="nightly",
        maxtext_overrides={"dump_hlo_gcs_dir": f"gs://rlpipe-artifacts/runs/{run_id}/hlo/"},
    )
    assert (
        Policy().for_namespace("team-a").problems(validate_request(doc, Policy().for_namespace("team-a")))
        == []
    )
    refused = Policy().problems(validate_request(doc, Policy().for_namespace("team-a")))
    assert [p.path for p in refused] == ["maxtext_overrides.dump_hlo_gcs_dir"]


def test_a_teams_conversion_key_depends_on_where_its_attempts_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """A READY.json written when a team's conversions lived under cache/maxtext/ names a directory
    outside the team's prefix, which is never read: the key must change with the prefix, or no
    conversion of that key could ever be published again."""
    key = layout.conversion_cache_key("google/gemma", "a" * 40, ["--x"], "img", scope="vision")
    monkeypatch.setattr(layout, "team_prefix", lambda scope: f"elsewhere/{scope}/")
    assert layout.conversion_cache_key("google/gemma", "a" * 40, ["--x"], "img", scope="vision") != key
    assert layout.conversion_cache_key(
        "google/gemma", "a" * 40, ["--x"], "img"
    ) == layout.conversion_cache_key("google/gemma", "a" * 40, ["--x"], "img")
