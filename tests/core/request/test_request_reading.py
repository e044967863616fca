"""A request's MaxText arguments are checked as MaxText reads them (OmegaConf's YAML), not as text.

Each reproduction below was accepted before (the issue "check every value the way the program that
reads it will read it"): a quoted or space-led ``gs://`` value reached MaxText as another run's
path, ``vllm_maxtext_config`` carried the pipeline's own keys, and a quoted number crashed intake.
Expected readings are written from YAML 1.1 and MaxText 0.2.4's pyconfig (cited), not from the code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rlpipe.core import commands, identity
from rlpipe.core.maxtext import config_reader
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import reading, validate_request
from rlpipe.core.request.policy import Policy
from tests.conftest import ROOT, minimal_request

ARTIFACTS = "gs://rlpipe-artifacts"
OTHER_RUN = f"{ARTIFACTS}/runs/rother0000001/trained/rl/checkpoints/100/items"
MINE = "mine-1"
OWN_RUN = identity.run_id_for(identity.key_for_request_id(MINE))
OWN = f"{ARTIFACTS}/runs/{OWN_RUN}/extra/items"


def _refused(doc: dict[str, Any], policy: Policy | None = None) -> list[Problem]:
    with pytest.raises(RequestInvalid) as caught:
        validate_request(doc, policy)
    return caught.value.problems


def _at(problems: list[Problem], path: str) -> list[Problem]:
    return [p for p in problems if p.path == path]


def _place(field: str, value: Any, **extra: Any) -> dict[str, Any]:
    """A valid request (with a request_id, so its own prefix is known) but for ``value`` at ``field``."""
    section, key = field.split(".", 1)
    return minimal_request(request_id=MINE, **{section: {key: value}}, **extra)


# ---- reproduction 1: gs:// values as MaxText reads them ------------------------------------------

# The spellings that reached MaxText as OTHER_RUN: YAML drops single and double quotes and a leading
# space (pyconfig.py:439 reads every key=value with OmegaConf.from_cli).
SPELLINGS = [f"'{OTHER_RUN}'", f'"{OTHER_RUN}"', f" {OTHER_RUN}"]
FIELDS = [
    "maxtext_overrides.load_full_state_path",  # read keys
    "maxtext_overrides.lora_input_adapters_path",
    "maxtext_overrides.dump_hlo_gcs_dir",  # write keys
    "training.tokenizer_path",
    "training.data_template_path",
]


@pytest.mark.parametrize("spelling", SPELLINGS, ids=["single-quoted", "double-quoted", "leading-space"])
@pytest.mark.parametrize("field", FIELDS)
def test_a_gcs_path_is_checked_as_maxtext_reads_it(field: str, spelling: str) -> None:
    problems = _at(_refused(_place(field, spelling)), field)
    assert any("RLPIPE_READ_ONLY_GCS_PREFIXES" in p.fix and OTHER_RUN in p.message for p in problems), (
        problems
    )
    assert any("MaxText's config reader" in p.message for p in problems), "and the text is not what it reads"


def test_the_shared_conversion_cache_is_not_a_write_target_whatever_the_quotes() -> None:
    problems = _refused(_place("maxtext_overrides.jax_cache_dir", f"'{ARTIFACTS}/cache/maxtext/'"))
    assert any(
        "RLPIPE_READ_ONLY_GCS_PREFIXES" in p.fix for p in _at(problems, "maxtext_overrides.jax_cache_dir")
    )


def test_the_runs_own_prefix_written_as_maxtext_reads_it_is_kept() -> None:
    assert validate_request(_place("maxtext_overrides.load_full_state_path", OWN)).maxtext_overrides
    assert validate_request(_place("training.tokenizer_path", OWN)).training.tokenizer_path == OWN
    # the same path quoted is still refused: the text is not what MaxText reads
    (problem,) = _refused(_place("maxtext_overrides.load_full_state_path", f"'{OWN}'"))
    assert problem.path == "maxtext_overrides.load_full_state_path" and "as the text" in problem.message


def test_a_path_inside_a_mapping_literal_is_read_too() -> None:
    hf = "{architectures: [MaxTextForCausalLM], revision_path: " + OTHER_RUN + "}"
    problems = _at(
        _refused(minimal_request(training={"vllm_hf_overrides": hf})), "training.vllm_hf_overrides"
    )
    assert any(OTHER_RUN in p.message for p in problems)


@pytest.mark.parametrize("shape", ["grid", "points"])
def test_every_sweep_child_is_read_as_a_request_of_its_own(shape: str) -> None:
    key = "maxtext_overrides.load_full_state_path"
    sweep = (
        {"grid": {key: [OWN, f"'{OTHER_RUN}'"]}} if shape == "grid" else {"points": [{key: f" {OTHER_RUN}"}]}
    )
    problems = _refused(minimal_request(request_id=MINE, sweep=sweep))
    child = 1 if shape == "grid" else 0
    assert any(
        p.path.startswith(f"sweep child {child} (")
        and p.path.endswith(": maxtext_overrides.load_full_state_path")
        and "RLPIPE_READ_ONLY_GCS_PREFIXES" in p.fix
        for p in problems
    ), problems


# ---- reproduction 2: vllm_maxtext_config and the pipeline's keys --------------------------------


@pytest.mark.parametrize("key", ["load_parameters_path", "base_output_directory", "run_name"])
def test_vllm_maxtext_config_may_not_carry_the_pipelines_keys(key: str) -> None:
    """MaxText's vLLM adapter passes maxtext_config to pyconfig.initialize as keyword arguments
    (adapter.py:82-83, 160): load_parameters_path there loads another checkpoint into the rollout."""
    doc = minimal_request(training={"vllm_maxtext_config": {key: "x"}})
    (problem,) = _at(_refused(doc), f"training.vllm_maxtext_config.{key}")
    assert "set by the pipeline" in problem.message


def test_vllm_maxtext_config_keys_must_be_maxtexts() -> None:
    doc = minimal_request(training={"vllm_maxtext_config": {"weight_dtyp": "bfloat16"}})
    (typo,) = _at(_refused(doc), "training.vllm_maxtext_config.weight_dtyp")
    assert "did you mean 'weight_dtype'" in typo.fix


def test_a_vllm_maxtext_config_value_that_breaks_out_of_its_literal_is_refused() -> None:
    """The map is rendered as a Python-literal-style YAML flow map: a quote in a value ends the
    string early, so the map MaxText reads is not the request's."""
    doc = minimal_request(
        training={"vllm_maxtext_config": {"weight_dtype": "bf16', 'load_parameters_path': 'gs://x"}}
    )
    assert _at(_refused(doc), "training.vllm_maxtext_config")


# ---- reproduction 3: a quoted number is read as a number, and no longer crashes ------------------

HUGE_TEXT = [
    ("num_epoch", "0x" + "f" * 400),  # YAML 1.1 hexadecimal: a 1,600-bit integer
    ("rl.num_iterations", ":".join(["59"] * 300)),  # YAML 1.1 base 60
]


@pytest.mark.parametrize(("key", "text"), HUGE_TEXT, ids=["hex", "base-60"])
def test_a_quoted_huge_number_is_refused_naming_the_field(key: str, text: str) -> None:
    problems = _at(_refused(minimal_request(maxtext_overrides={key: text})), f"maxtext_overrides.{key}")
    assert any("-bit number" in p.message for p in problems), problems


@pytest.mark.parametrize(("key", "text"), HUGE_TEXT, ids=["hex", "base-60"])
def test_rlpipe_validate_answers_a_quoted_huge_number_without_a_traceback(
    tmp_path: Path, key: str, text: str
) -> None:
    request = tmp_path / "r.yaml"
    request.write_text(yaml.safe_dump(minimal_request(maxtext_overrides={key: text})))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPIPE_")}
    done = subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "validate", str(request)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"maxtext_overrides.{key}" in done.stderr


def test_intake_refuses_a_quoted_huge_number_with_an_error_record(buckets: Any, executions: Any) -> None:
    """It answered 500 (redelivered to the dead-letter topic, no error.json)."""
    from rlpipe.control.adapters.events import MessageEvent
    from tests.conftest import real_intake

    data = json.dumps(minimal_request(maxtext_overrides={"num_epoch": HUGE_TEXT[0][1]})).encode()
    event = MessageEvent(
        topic="projects/p/topics/t", message_id="m3", data=data, attributes={}, event_id="m3"
    )
    result = real_intake(buckets, executions).from_message(event)
    assert result.outcome == "rejected" and "maxtext_overrides.num_epoch" in result.detail
    assert [n for n in buckets.store("state").list("runs/") if n.endswith("/error.json")]
    assert executions.creates() == []


@pytest.mark.parametrize(
    ("value", "reads_as"),
    [("2", "the number 2"), ("yes", "the boolean true"), ("none", "no value"), ("1e-3", "the number 0.001")],
)
def test_a_value_maxtext_reads_as_another_type_is_refused_with_the_fix(value: str, reads_as: str) -> None:
    (problem,) = _at(
        _refused(minimal_request(maxtext_overrides={"grpo_epsilon": value})), "maxtext_overrides.grpo_epsilon"
    )
    assert reads_as in problem.message


def test_an_interpolation_is_refused_and_never_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyconfig.py:517 resolves interpolations: ${oc.env:HF_TOKEN} would put the token in a value."""
    monkeypatch.setenv("RLPIPE_TEST_SECRET", "s3cr3t-value")
    for value in ("${oc.env:RLPIPE_TEST_SECRET}", "a${run_name}b"):
        (problem,) = _refused(minimal_request(maxtext_overrides={"rl.system_prompt": value}))
        assert "interpolation" in problem.message and "s3cr3t-value" not in json.dumps(problem.__dict__)


def test_a_value_with_shell_characters_reaches_maxtext_as_one_unchanged_argument() -> None:
    """No value reaches a shell (the scripts pass "$@"), so what matters is what MaxText reads."""
    prompt = "Answer; then `explain` $(why) | done & <ok>"
    req = validate_request(minimal_request(maxtext_overrides={"rl.system_prompt": prompt}))
    args = commands.train_args(req, "gs://b/out", "gs://b/params")
    assert f"rl.system_prompt={prompt}" in args


# ---- keys, as MaxText reads and resolves them ----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("rl.num_iteratons", "did you mean 'rl.num_iterations'"),  # MaxText drops it silently
        ("num_iteratons", "did you mean 'num_iterations'"),  # MaxText stops at start
        ("rl.grpo_bta", "did you mean 'rl.grpo_beta'"),
        ("dataset.train_fractoin", "did you mean 'dataset.train_fraction'"),
    ],
)
def test_a_typod_key_is_refused_with_a_did_you_mean(key: str, expected: str) -> None:
    (problem,) = _at(_refused(minimal_request(maxtext_overrides={key: 2})), f"maxtext_overrides.{key}")
    assert expected in problem.fix


def test_keys_maxtext_defines_are_accepted_nested_flat_and_in_free_form_maps() -> None:
    # rl.yml at maxtext-v0.2.4 sets these (rl: grpo_beta, loss_algo; generation_configs.greedy)
    overrides = {
        "rl.grpo_beta": 0.04,
        "rl.loss_algo": "gspo-token",
        "grpo_epsilon": 0.3,
        "generation_configs.greedy.eval_temperature": 0.02,
        "reward_exact_answer": 2.0,
    }
    assert validate_request(minimal_request(maxtext_overrides=overrides)).maxtext_overrides == overrides


def test_a_typed_field_is_refused_under_the_flat_spelling_maxtext_routes_into_its_section() -> None:
    """RLConfig's map_flat_fields_to_nested_models copies a flat num_generations over rl's."""
    (problem,) = _at(
        _refused(minimal_request(maxtext_overrides={"num_generations": 8})),
        "maxtext_overrides.num_generations",
    )
    assert "training.num_generations" in problem.fix


def test_a_key_carrying_its_own_value_is_read_as_maxtext_reads_it() -> None:
    """``load_parameters_path=gs://x`` as a key renders ``load_parameters_path=gs://x=1``."""
    problems = _refused(minimal_request(maxtext_overrides={"load_parameters_path=gs://x/y": 1}))
    assert _at(problems, "maxtext_overrides.load_parameters_path=gs://x/y")


# ---- the reader: MaxText 0.2.4's pyconfig facts --------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "tree"),
    [
        ("k='gs://a/b'", {"k": "gs://a/b"}),
        ("k= gs://a/b", {"k": "gs://a/b"}),
        ("k=gs://a/b #x", {"k": "gs://a/b"}),
        ("rl.num_iterations=2", {"rl": {"num_iterations": 2}}),
        ("k=0x1f", {"k": 31}),
        ("k=59:59", {"k": 3599}),
        ("k=yes", {"k": True}),
        ("k=NONE", {"k": None}),  # pyconfig.py:274-275, a top-level key
        ("rl.system_prompt=none", {"rl": {"system_prompt": "none"}}),  # not for a nested one
        ("tokenizer_path=''", {"tokenizer_path": None}),  # pyconfig.py:290-302
        ("train_data_columns=text", {"train_data_columns": ["text"]}),  # pyconfig.py:286-287
    ],
)
def test_the_reader_reads_as_maxtexts_pyconfig(argument: str, tree: dict[str, Any]) -> None:
    assert reading.same(config_reader.read(argument).tree, tree)


@pytest.mark.parametrize(
    "argument",
    [
        "k=${oc.env:HOME}",
        "k=\\${x}",  # an escaped one reads as "${x}": OmegaConf still parses it as one, so it is refused
        "k=???",
        "k=" + "9" * 5000,
        "k=" + "[" * 200 + "]" * 200,
        "k=\x00",
        "k=*alias",
    ],
    ids=["interpolation", "escaped-interpolation", "missing", "4300-digit-limit", "deep", "nul", "alias"],
)
def test_what_maxtexts_reader_fails_on_or_would_resolve_is_unreadable(argument: str) -> None:
    with pytest.raises(config_reader.Unreadable):
        config_reader.read(argument)


def test_omegaconfs_missing_marker_is_named_for_what_it_does() -> None:
    """A merge keeps the default a ``???`` would replace (pyconfig.py:446-453, 514): the value is lost."""
    with pytest.raises(config_reader.Unreadable, match="missing-value marker"):
        config_reader.read("rl.system_prompt=???")


def test_a_key_path_keeps_case_and_follows_omegaconfs_escapes() -> None:
    assert config_reader.key_path("Load_Parameters_Path") == ("Load_Parameters_Path",)
    assert config_reader.key_path("rl.run_name") == ("rl", "run_name")
    assert config_reader.key_path("a\\.b") == ("a.b",)


# ---- what is read is what is rendered --------------------------------------------------------------

# train_args' keys whose values the pipeline renders itself (paths it chose), not the request.
PIPELINE_KEYS = {
    "run_name",
    "base_output_directory",
    "load_parameters_path",
    "hf_train_files",
    "hf_eval_files",
    "dataset_processor_path",
    "reward_functions_path",
}


def _rich_request() -> Any:
    return validate_request(
        minimal_request(
            training={"tokenizer_path": "google/gemma-4-26b-a4b-it", "learning_rate": 1e-6},
            dataset={"repo": "acme/math", "subset": "main", "eval_repo": "acme/math-eval"},
            rewards={
                "file": {"inline": "def r(prompts, completions, **kw):\n    return [0.0]\n"},
                "functions": ["r"],
            },
            maxtext_overrides={"rl.grpo_beta": 0.04, "eval_interval": 5, "rl.loss_algo": "gspo-token"},
        ),
        Policy(allow_user_code=True),
    )


@pytest.mark.parametrize("source", ["rich", *sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))])
def test_every_argument_read_is_one_core_commands_renders_and_every_request_argument_is_read(
    source: str,
) -> None:
    req = (
        _rich_request()
        if source == "rich"
        else validate_request(
            yaml.safe_load((ROOT / "examples" / source).read_text()), Policy(allow_user_code=True)
        )
    )
    rendered = [
        *commands.train_args(req, "gs://b/out", "gs://b/params", ("gs://b/train-*", "gs://b/eval-*")),
        *commands.convert_args(req, "main", "gs://b/convert"),
        *commands.export_args(req, "gs://b/params"),
    ]
    read = {a.text for a in reading.arguments(req)}
    assert read <= set(rendered), read - set(rendered)
    fixed = set(commands.convert_args(req, "main", "") + commands.export_args(req, ""))  # no request data

    def carries_request_data(a: str) -> bool:
        if a.startswith(("model_name=", "scan_layers=")):
            return True
        return (
            "=" in a
            and not a.startswith("--")
            and a.split("=", 1)[0] not in PIPELINE_KEYS
            and not a.startswith(("tokenizer_path=/", "data_template_path=/"))  # the pinned and staged files
            and a not in fixed
        )

    carried = {a for a in rendered if carries_request_data(a)}
    assert carried <= read, carried - read


# ---- property: any path-typed string is judged on what OmegaConf reads ----------------------------


def _omegaconf_reads(key: str, text: str) -> Any:
    """What MaxText 0.2.4's pyconfig makes of ``key=text``, with OmegaConf itself (not rlpipe's
    reader): from_cli, to_container(resolve=True), and the top-level "none" rule."""
    try:
        value = OmegaConf.to_container(OmegaConf.from_cli([f"{key}={text}"]), resolve=True)
    except Exception:  # MaxText fails on whatever OmegaConf raises
        return "<unreadable>"
    node: Any = value
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return "<elsewhere>"
        node = node[part]
    if "." not in key and isinstance(node, str) and node.lower() == "none":
        return None
    return node


_paths = st.one_of(
    st.builds(
        lambda pre, body, post: pre + body + post,
        st.sampled_from(
            ["", "", "", "", " ", "'", '"', "\t", "!!str ", "? ", "- ", "&a ", "{", "[", "${", "\\"]
        ),
        st.sampled_from(
            [OTHER_RUN, OWN, "gs://team-data/gsm8k/", "GS://rlpipe-artifacts/runs/x/y", "plain/path"]
        ),
        st.sampled_from(["", "", "", "", " ", "'", '"', " #c", "\n", "}", "]", ": x", "?", "/more"]),
    ),
    st.text(max_size=40),
)
_FIELDS_UNDER_TEST = [
    ("training.tokenizer_path", "tokenizer_path"),
    ("training.data_template_path", "data_template_path"),
    ("maxtext_overrides.load_full_state_path", "load_full_state_path"),
]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_FIELDS_UNDER_TEST), _paths)
def test_whatever_validate_accepts_is_what_omegaconf_reads_and_its_gcs_paths_are_allowed(
    field: tuple[str, str], text: str
) -> None:
    path, key = field
    policy = Policy(read_only_gcs=("gs://team-data/",))
    try:
        validate_request(_place(path, text), policy)
    except RequestInvalid:
        return
    read = _omegaconf_reads(key, text)
    assert read == text and isinstance(read, str), (text, read)
    if read.lower().startswith("gs://"):
        assert read.startswith((f"{ARTIFACTS}/runs/{OWN_RUN}/", "gs://team-data/")), read


# ---- what an independent probe found after the first pass ----------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [("[num_epoch]", 1000000000), ("rl[num_iterations]", 1000000), ("[enable_checkpointing]", False)],
)
def test_a_key_spelling_omegaconf_reads_away_is_refused_before_the_step_rules_read_it(
    key: str, value: Any
) -> None:
    """OmegaConf reads `[num_epoch]` as num_epoch (from_cli(['[num_epoch]=1']) == {'num_epoch': 1}),
    while the step arithmetic reads keys as written: the bracket spelling trained 50,000,000,000
    steps past a plan that said 50."""
    [problem] = _at(_refused(minimal_request(maxtext_overrides={key: value})), f"maxtext_overrides.{key}")
    assert "MaxText reads the key" in problem.message and problem.fix.startswith("write it as ")


@pytest.mark.parametrize("value", [0, "off"])
def test_a_value_for_a_whole_section_is_refused(value: Any) -> None:
    """`rl=0` after the pipeline's `rl.num_generations=4` replaces the section: MaxText then held
    rl.num_generations=2 (from_cli(['rl.num_generations=4', 'rl=0']) == {'rl': 0})."""
    problems = _at(_refused(minimal_request(maxtext_overrides={"rl": value})), "maxtext_overrides.rl")
    assert any("is a section" in p.message for p in problems), problems


def test_a_nested_key_maxtext_overwrites_with_its_flat_config_key_is_refused() -> None:
    """rl.yml sets num_test_batches flat, and RLConfig copies flat keys over its sections' fields
    (types.py:4571-4585): `dataset.num_test_batches` was dropped and MaxText held 5."""
    [problem] = _at(
        _refused(minimal_request(maxtext_overrides={"dataset.num_test_batches": 100})),
        "maxtext_overrides.dataset.num_test_batches",
    )
    assert "would drop this value" in problem.message and "num_test_batches" in problem.fix
    validate_request(minimal_request(maxtext_overrides={"num_test_batches": 100}))  # the flat key works
    validate_request(minimal_request(maxtext_overrides={"rl.num_iterations": 2}))  # rl.yml sets no flat one


def test_two_spellings_of_one_field_are_refused() -> None:
    doc = minimal_request(maxtext_overrides={"num_iterations": 2, "rl.num_iterations": 3})
    assert _at(_refused(doc), "maxtext_overrides.rl.num_iterations")


def test_vllm_maxtext_config_may_not_name_a_config_file() -> None:
    """The vLLM adapter passes this map to pyconfig.initialize as keywords (adapter.py:160), and a
    `base_config` keyword makes pyconfig load that file instead of vllm.yml."""
    doc = _place("training.vllm_maxtext_config", {"base_config": "/tmp/rlpipe/inputs/rewards.py"})
    assert _at(_refused(doc), "training.vllm_maxtext_config.base_config")


def test_one_name_for_a_list_key_is_what_pyconfig_coerces_it_into() -> None:
    """pyconfig turns `train_data_columns=messages` into ['messages'] (pyconfig.py:216-236)."""
    validate_request(minimal_request(maxtext_overrides={"train_data_columns": "messages"}))


def test_rlpipe_validate_reads_the_artifacts_bucket_setting_alone(tmp_path: Path) -> None:
    """With only RLPIPE_ARTIFACTS_BUCKET set, validate checked against the built-in bucket."""
    path = tmp_path / "r.yaml"
    path.write_text(
        yaml.safe_dump(minimal_request(request_id=MINE, maxtext_overrides={"load_full_state_path": OWN}))
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPIPE_")}
    done = subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "validate", str(path)],
        capture_output=True,
        text=True,
        env={**env, "RLPIPE_ARTIFACTS_BUCKET": "prod-art"},
        check=False,
        timeout=60,
    )
    assert done.returncode == 1 and "load_full_state_path" in done.stderr, done.stdout + done.stderr
