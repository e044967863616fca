"""Every variable a request may set has a rule for its values, read as its tool reads them.

Gap 8 of the adversarial review: the names a deployment adds (``RLPIPE_ALLOWED_ENV``, a team's
``extra_env``) were judged by their words and took any literal value, so ``GRPC_TRACE=http``
(gRPC's http2 transport tracer, which logs every call's headers) reached the head. The values
below are taken from each tool's documentation, not from rlpipe: gRPC's
``doc/environment_variables.md`` and ``TROUBLESHOOTING.md`` (GRPC_TRACE is a comma-separated list
of tracer names, ``all`` or a glob enabling many; GRPC_VERBOSITY one of DEBUG, INFO, ERROR, NONE in
any case), JAX's boolean flags (``strtobool``: y/yes/t/true/on/1 and n/no/f/false/off/0), vLLM's
``envs.py`` (``VLLM_LOG_STATS_INTERVAL`` is a float of seconds), XLA's ``parse_flags_from_env``
(flags separated by spaces, tabs or newlines; a value not starting with ``-`` names a file to
read flags from).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.control.adapters.settings import Settings
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy, SettingsInvalid
from tests.conftest import minimal_request


def _env(env: dict[str, str], where: str = "command_env") -> dict[str, Any]:
    return minimal_request(training={where: env})


def _refused(doc: dict[str, Any], policy: Policy | None = None) -> dict[str, Problem]:
    try:
        validate_request(doc, policy)
    except RequestInvalid as exc:
        return {p.path: p for p in exc.problems}
    return {}


def _refusal(entries: tuple[str, ...]) -> list[Problem]:
    with pytest.raises(SettingsInvalid) as caught:
        Policy(extra_env=entries)
    return caught.value.problems


# Tracers that log call data: headers and metadata (http, api, channel, call), the bytes on the
# wire (tcp, secure_endpoint), or every tracer at once (all, a glob); in any case gRPC may read.
PRINTING_TRACES = [
    "http",
    "HTTP",
    "Http",
    "api",
    "channel",
    "tcp",
    "secure_endpoint",
    "all",
    "*",
    "http*",
    "connectivity_state,http",
    "connectivity_state, http",
    " http ",
    "connectivity_state,,api",
]


@pytest.mark.parametrize("family", [("GRPC_TRACE",), ("GRPC_*",)])
@pytest.mark.parametrize("value", PRINTING_TRACES)
def test_grpc_trace_refuses_every_tracer_that_prints_call_data(family: tuple[str, ...], value: str) -> None:
    problems = _refused(_env({"GRPC_TRACE": value}), Policy(extra_env=family))
    assert "training.command_env.GRPC_TRACE" in problems, value


@pytest.mark.parametrize("value", ["connectivity_state", "connectivity_state,bdp_estimator", "flowctl"])
def test_grpc_trace_takes_tracers_that_print_only_state(value: str) -> None:
    request = validate_request(_env({"GRPC_TRACE": value}), Policy(extra_env=("GRPC_TRACE",)))
    assert request.training.command_env["GRPC_TRACE"] == value


@pytest.mark.parametrize("value", ["DEBUG", "debug", "Debug"])
def test_grpc_verbosity_debug_is_refused_in_every_case_grpc_reads(value: str) -> None:
    assert "training.command_env.GRPC_VERBOSITY" in _refused(_env({"GRPC_VERBOSITY": value}))


@pytest.mark.parametrize("value", ["ERROR", "error", "NONE", "info"])
def test_grpc_verbosity_takes_the_quieter_levels_in_any_case(value: str) -> None:
    assert validate_request(_env({"GRPC_VERBOSITY": value})).training.command_env["GRPC_VERBOSITY"] == value


def test_a_name_a_deployment_adds_without_a_value_rule_is_refused_when_it_loads() -> None:
    (problem,) = _refusal(("OMP_NUM_THREADS",))
    assert problem.path == "RLPIPE_ALLOWED_ENV" and "OMP_NUM_THREADS" in problem.message
    assert "OMP_NUM_THREADS=int:" in problem.fix and "extra_env" in problem.fix


def test_the_deployment_setting_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLPIPE_ALLOWED_ENV", "OMP_NUM_THREADS")
    with pytest.raises(SettingsInvalid) as caught:
        Settings.from_env().policy()
    assert "RLPIPE_ALLOWED_ENV" in caught.value.render() and "OMP_NUM_THREADS" in caught.value.render()


def test_a_teams_extra_env_without_a_value_rule_is_refused_when_the_teams_load() -> None:
    settings = Settings(teams_json=json.dumps({"vision": {"extra_env": ["OMP_NUM_THREADS"]}}))
    with pytest.raises(SettingsInvalid) as caught:
        settings.teams()
    (problem,) = caught.value.problems
    assert problem.path == "RLPIPE_TEAMS.vision" and "OMP_NUM_THREADS" in problem.message
    assert "extra_env" in problem.fix


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("8", True),
        ("1", True),
        ("64", True),
        ("0", False),
        ("65", False),
        ("08", False),  # strtol reads 8, int() refuses: not one reading
        ("+8", False),
        (" 8", False),
        ("8.0", False),
        ("1e1", False),
        ("", False),
    ],
)
def test_a_deployment_states_an_integer_range_and_values_are_read_by_it(value: str, ok: bool) -> None:
    policy = Policy(extra_env=("OMP_NUM_THREADS=int:1..64",))
    refused = "training.command_env.OMP_NUM_THREADS" in _refused(_env({"OMP_NUM_THREADS": value}), policy)
    assert refused is not ok, value


@pytest.mark.parametrize(("value", "ok"), [("true", True), ("false", True), ("True", False), ("1", False)])
def test_a_deployment_states_a_set_of_words_compared_exactly(value: str, ok: bool) -> None:
    policy = Policy(extra_env=("TPU_PREMAPPED_ENABLE=true|false",))
    refused = "training.command_env.TPU_PREMAPPED_ENABLE" in _refused(
        _env({"TPU_PREMAPPED_ENABLE": value}), policy
    )
    assert refused is not ok, value


@pytest.mark.parametrize(
    "entry",
    [
        "OMP_NUM_THREADS=int:64..1",  # an empty range
        "OMP_NUM_THREADS=",
        "OMP_NUM_THREADS=int:1..99999999999999999999",  # beyond 63 bits
        "OMP_NUM_THREADS=a/b",  # a path
        "OMP_NUM_THREADS=gs:x",
        "OMP_NUM_THREADS=a|",
        "OMP_NUM_THREADS=.*",  # a pattern is not a rule a deployment states
    ],
)
def test_a_malformed_rule_is_refused_when_the_deployment_loads(entry: str) -> None:
    (problem,) = _refusal((entry,))
    assert problem.path == "RLPIPE_ALLOWED_ENV" and "OMP_NUM_THREADS" in problem.message


def test_a_stated_rule_cannot_replace_the_rule_rlpipe_knows() -> None:
    (problem,) = _refusal(("GRPC_TRACE=http|api",))
    assert "GRPC_TRACE" in problem.message and "GRPC_TRACE" in problem.fix


@pytest.mark.parametrize(
    "entry",
    [
        "TENSORSTORE_VERBOSE_LOGGING=curl",  # curl's verbose output includes request headers
        "TENSORSTORE_VERBOSE_LOGGING",
        "ORBAX_LOG_LEVEL=int:0..3",
    ],
)
def test_a_name_that_chooses_what_is_printed_needs_a_rule_rlpipe_knows(entry: str) -> None:
    (problem,) = _refusal((entry,))
    assert "print" in problem.message


def test_a_family_admits_only_members_whose_values_rlpipe_reads() -> None:
    policy = Policy(extra_env=("OMP_*", "JAX_LOG_*"))
    problems = _refused(_env({"OMP_NUM_THREADS": "8"}), policy)
    problem = problems["training.command_env.OMP_NUM_THREADS"]
    assert "RLPIPE_ALLOWED_ENV" in problem.fix and "OMP_NUM_THREADS=int:" in problem.fix
    # JAX reads its boolean flags with strtobool: "yes" is true, "2" is an error
    assert validate_request(_env({"JAX_LOG_COMPILES": "yes"}), policy)
    assert "training.command_env.JAX_LOG_COMPILES" in _refused(_env({"JAX_LOG_COMPILES": "2"}), policy)


def test_a_family_cannot_carry_a_rule() -> None:
    (problem,) = _refusal(("OMP_*=int:1..64",))
    assert "OMP_*" in problem.message


@pytest.mark.parametrize(
    "value",
    [
        "flags.txt",  # XLA reads a value not starting with '-' as a file of flags
        "--xla_a=1\v--xla_b=2",  # one token to XLA (it splits on space, tab, CR, LF only)
        "--xla_tpu_enable_x=true --xla_dump_to=x",
    ],
)
def test_xla_flags_are_read_as_xla_splits_them(value: str) -> None:
    assert "training.command_env.LIBTPU_INIT_ARGS" in _refused(_env({"LIBTPU_INIT_ARGS": value}))


def test_every_built_in_and_known_name_refuses_a_path_a_url_and_a_header_dump() -> None:
    from rlpipe.core.request import env_allowlist

    for name, rule in env_allowlist.RULES.items():
        for value in ("/etc/passwd", "https://collector.example", "http", "all", "$(id)"):
            assert not rule.accepts(value), (name, value)
