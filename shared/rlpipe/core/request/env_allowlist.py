"""Which environment variables a request may set in its containers: an allowlist, with values.

Why an allowlist: every blocklist of dangerous names had a way around it. ``HF_ENDPOINT`` sent the
Hugging Face token to any host, ``HTTPS_PROXY`` and ``REQUESTS_CA_BUNDLE`` read the traffic,
``PYTHONUSERBASE`` ran a ``usercustomize.py`` from the model repo, and MaxText reads any
``M_<KEY>`` as a config override (maxtext-v0.2.4 ``src/maxtext/configs/pyconfig.py:43,124-125,
517-540``), ``M_LOAD_PARAMETERS_PATH`` included. So a request may set only the names below, each
with the values its tool accepts.

The names are those the tutorials set (``VLLM_ENABLE_V1_MULTIPROCESSING``, ``JAX_PLATFORMS``,
``ENABLE_PATHWAYS_PERSISTENCE``; ``GRPC_DNS_RESOLVER`` and
``FLAGS_pathways_enforce_subset_devices_form_subslice`` on the Pathways containers) and those
MaxText's RL scripts and xpk set for tuning and logging. Each entry cites where it is set.
Names are compared exactly: environment names are case-sensitive.

A deployment may add names (``RLPIPE_ALLOWED_ENV``): exact ``NAME``s, or families ``WORD_*``.
What it may add is decided by the words a name is made of (``env_names``): never a name one of
whose words says proxy, CA or certificate, endpoint, URL, host or server, resolver, emulator,
plugin or code path, credential, or a namespace the pipeline or MaxText owns; never a word
rlpipe does not know; never ``*``. Exact names and a family's own words are checked when the
deployment loads (``Policy``), a family's members when a request names one.

Sources: MT = AI-Hypercomputer/maxtext ``maxtext-v0.2.4``; XPK = AI-Hypercomputer/xpk @367c838;
TI = vllm-project/tpu-inference @7ecc401 (the commit MaxText pins); PU = pathways-utils @8950a34.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from rlpipe.core.problems import Problem
from rlpipe.core.request import env_names

_BOOL01 = r"^[01]$"
_BOOL = r"^(0|1|true|false)$"
_LOG_0_3 = r"^[0-3]$"
# LIBTPU_INIT_ARGS and XLA_FLAGS: XLA flags only, with plain values. Refused: any flag with "dump"
# in its name (--xla_dump_to writes HLO and constants to a path; MT configs/types.py:3305-3323),
# any value with "/" or ":" (a path or URL), and every non --xla_ flag (--flagfile, --fromenv).
# Every v6e flag MaxText ships passes (MT run_gemma4_e4b_rl.sh:59-77, configs/tpu/v6e/*.sh:39).
_XLA_TOKEN = re.compile(r"^--xla_[a-z0-9_]+(=[A-Za-z0-9_.+-]{1,64})?$")


@dataclass(frozen=True)
class EnvRule:
    """A name a request may set, the values it may take, and where that is documented."""

    pattern: str | None  # a regex the whole value must match; None: the XLA flag rule
    source: str


HEAD_CONTAINER: dict[str, EnvRule] = {
    "JAX_PLATFORMS": EnvRule(r"^(proxy|cpu)(,(proxy|cpu))*$", "tutorials; MT rl_on_multi_host.md:178"),
    "ENABLE_PATHWAYS_PERSISTENCE": EnvRule(_BOOL01, "tutorials; PU pathwaysutils/_initialize.py:56-65"),
    "VLLM_ENABLE_V1_MULTIPROCESSING": EnvRule(_BOOL01, "tutorial v6e-32; MT run_gemma4_e4b_rl.sh:81"),
    "VLLM_LOGGING_LEVEL": EnvRule(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$", "MT run_gemma4_e4b_rl.sh:87"),
    "VLLM_ENGINE_READY_TIMEOUT_S": EnvRule(r"^[1-9][0-9]{0,4}$", "MT run_gemma4_e4b_rl.sh:91"),
    "TF_CPP_MIN_LOG_LEVEL": EnvRule(
        _LOG_0_3, "MT rl_on_multi_host.md:178; XPK core/docker_container.py:121-124"
    ),
    "TPU_STDERR_LOG_LEVEL": EnvRule(
        _LOG_0_3, "MT run_qwen3_30b_rl.sh:87; XPK core/docker_container.py:121-122"
    ),
    "TPU_MIN_LOG_LEVEL": EnvRule(_LOG_0_3, "MT run_qwen3_30b_rl.sh:89; XPK core/docker_container.py:121-122"),
    "TPU_VMODULE": EnvRule(
        r"^[A-Za-z0-9_]+=[0-9](,[A-Za-z0-9_]+=[0-9])*$", "XPK core/docker_container.py:124"
    ),
    "GRPC_DNS_RESOLVER": EnvRule(r"^(native|ares)$", "tutorials; grpc doc/environment_variables.md"),
    "GRPC_VERBOSITY": EnvRule(r"^(DEBUG|INFO|ERROR|NONE)$", "MT rl/math_verify_pool.py:77"),
    "GRPC_ENABLE_FORK_SUPPORT": EnvRule(_BOOL, "MT run_gptoss_20b_rl.sh:83"),
    "FLAGS_pathways_enforce_subset_devices_form_subslice": EnvRule(r"^(true|false)$", "tutorial v6e-32"),
    "ENABLE_PJRT_COMPATIBILITY": EnvRule(r"^(true|false)$", "MT run_gemma4_e4b_rl.sh:84"),
    "SKIP_JAX_PRECOMPILE": EnvRule(_BOOL, "MT run_qwen3_30b_rl.sh:85; TI tpu_inference/envs.py:243"),
    "NEW_MODEL_DESIGN": EnvRule(_BOOL, "MT run_gemma4_e4b_rl.sh:82; TI tpu_inference/envs.py:259"),
    "MODEL_IMPL_TYPE": EnvRule(r"^(auto|vllm|flax_nnx)$", "MT run_gptoss_20b_rl.sh:82; TI envs.py:249-251"),
    "LIBTPU_INIT_ARGS": EnvRule(None, "MT configs/tpu/v6e/*.sh:39; XPK docs/usage/advanced.md:30"),
    "XLA_FLAGS": EnvRule(None, "MT configs/types.py:3305-3323"),
}
_PATHWAYS_NAMES = (
    "GRPC_DNS_RESOLVER",
    "GRPC_VERBOSITY",
    "FLAGS_pathways_enforce_subset_devices_form_subslice",
    "TF_CPP_MIN_LOG_LEVEL",
    "TPU_STDERR_LOG_LEVEL",
    "TPU_MIN_LOG_LEVEL",
    "TPU_VMODULE",
)
PATHWAYS_CONTAINER: dict[str, EnvRule] = {name: HEAD_CONTAINER[name] for name in _PATHWAYS_NAMES}
WORKER_CONTAINER: dict[str, EnvRule] = {
    **PATHWAYS_CONTAINER,
    # Cloud TPU performance guide, "Memory management tuning": a multiple of 4096
    "TPU_PREMAPPED_BUFFER_SIZE": EnvRule(r"^[0-9]{4,12}$", "Cloud TPU performance guide"),
    "LIBTPU_INIT_ARGS": HEAD_CONTAINER["LIBTPU_INIT_ARGS"],
}

# The env maps of a request: (field path, where it sits in the document, its container's names).
ENV_FIELDS: tuple[tuple[str, tuple[str, ...], Mapping[str, EnvRule]], ...] = (
    ("training.command_env", ("training", "command_env"), HEAD_CONTAINER),
    ("pathways.env.workload", ("pathways", "env", "workload"), HEAD_CONTAINER),
    ("pathways.env.proxy", ("pathways", "env", "proxy"), PATHWAYS_CONTAINER),
    ("pathways.env.resource_manager", ("pathways", "env", "resource_manager"), PATHWAYS_CONTAINER),
    ("pathways.env.worker", ("pathways", "env", "worker"), WORKER_CONTAINER),
)

# Names the pipeline sets itself in the containers (``core.manifests``): a request's duplicate would
# lose (the pipeline's entries come later), but no setting lets a request name them at all.
PIPELINE_NAMES = frozenset(
    {
        "JAX_BACKEND_TARGET",
        "PATHWAYS_HEAD",
        "XCLOUD_ENVIRONMENT",
        "ABSL_FLAGS",
        "HF_TOKEN",
        "VLLM_HOST_IP",
        "TPU_SKIP_MDS_QUERY",
        "JOBSET_NAME",
        "REPLICATED_JOB_NAME",
        "HOST_ADDRESS",
    }
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A family: one or more whole words, then ``_*`` (``VLLM_LOGGING_*``); its members are judged by
# their words (``env_names``) when a request names one.
_FAMILY = re.compile(r"^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*_\*$")
_SUBSTITUTION = re.compile(r"\$\(|`|\$\{[^}]*[:@#%/^,]")
SETTING = "RLPIPE_ALLOWED_ENV"


def deployment_problems(entries: Iterable[str]) -> list[Problem]:
    """What is wrong with a deployment's ``RLPIPE_ALLOWED_ENV``, checked when the deployment loads
    (``Policy``): an entry is a NAME or a family ``WORD_..._*``, and every word it names must be
    one ``env_names`` knows as harmless; ``*`` alone is refused."""
    found: list[Problem] = []
    for entry in entries:
        if _FAMILY.match(entry):
            verdict, what = env_names.judge(entry[:-2]), f"the family {entry}"
        elif _NAME.match(entry):
            verdict, what = env_names.judge(entry), entry
            if entry in PIPELINE_NAMES:
                verdict = env_names.Verdict(False, "the pipeline sets it", refused_word=True)
        else:
            found.append(
                Problem(
                    SETTING,
                    f"{entry!r} is neither a variable name nor a family of whole words ending in _*"
                    + (
                        " ('*' alone would let a request set any variable)" if entry.strip("_*") == "" else ""
                    ),
                    "list names (TF_CPP_VMODULE) or families such as VLLM_LOGGING_*",
                )
            )
            continue
        if not verdict.allowed:
            found.append(
                Problem(
                    SETTING,
                    f"{what} cannot be added: {verdict.reason}",
                    "remove it; no deployment setting allows it"
                    if verdict.refused_word
                    else "remove it, or list only names made of words docs/security.md lists",
                )
            )
    return found


def env_problems(
    env_maps: Iterable[tuple[str, Mapping[str, object], Mapping[str, EnvRule]]],
    extra_names: Iterable[str] = (),
) -> Iterator[Problem]:
    """Every variable outside the allowlist, every value outside its rule. ``extra_names`` are the
    deployment's additions (``NAME`` exactly, or a family ``WORD_*``), with any literal value."""
    extra = tuple(extra_names)
    for path, env, allowed in env_maps:
        seen: dict[str, str] = {}
        for name, value in env.items():
            if not isinstance(name, str):
                continue
            where = f"{path}.{name}"
            folded = name.upper()
            if folded in seen:
                yield Problem(where, f"{name} and {seen[folded]} differ only in case", "set one of them")
                continue
            seen[folded] = name
            if name in PIPELINE_NAMES:
                yield Problem(
                    where,
                    f"{name} is set by the pipeline itself",
                    "remove it; no deployment setting allows it",
                )
                continue
            rule = allowed.get(name)
            if rule is None:
                refusal = _not_allowed(name, path, allowed, extra)
                if refusal is not None:
                    yield Problem(where, *refusal)
                    continue
            text = value if isinstance(value, str) else str(value)
            if _SUBSTITUTION.search(text):
                yield Problem(
                    where,
                    "the value contains shell substitution ($(...), backticks or ${...} operators)",
                    "give a literal value",
                )
            elif rule is not None and not _value_ok(rule, text):
                yield Problem(where, _value_message(name, rule), f"see {rule.source}")


def _not_allowed(
    name: str, path: str, allowed: Mapping[str, EnvRule], extra: tuple[str, ...]
) -> tuple[str, str] | None:
    """Why ``name`` (not built in) may not be set here, as (problem, fix); None when the
    deployment added it exactly, or it is a member of a family whose words are all harmless."""
    if name in extra:
        return None
    verdict = env_names.judge(name)
    family = next((e for e in extra if e.endswith("_*") and name.startswith(e[:-1])), None)
    if family is not None and verdict.allowed:
        return None
    if verdict.refused_word:
        return f"{name} may not be set: {verdict.reason}", "remove it; no deployment setting allows it"
    if family is not None:
        return (
            f"{name} is in the family {family} this deployment allows, but {verdict.reason}",
            "remove it: a deployment may add only names whose every word rlpipe knows (docs/security.md)",
        )
    return (
        f"{name} is not on this deployment's allowlist of variables for {path}",
        f"remove it; allowed here: {', '.join(sorted(allowed))}; an operator can add names with {SETTING}",
    )


def _value_ok(rule: EnvRule, value: str) -> bool:
    if rule.pattern is not None:
        return re.fullmatch(rule.pattern, value) is not None
    tokens = value.split()
    return bool(tokens) and all(_XLA_TOKEN.match(t) and "dump" not in t.split("=")[0] for t in tokens)


def _value_message(name: str, rule: EnvRule) -> str:
    if rule.pattern is None:
        return (
            f"{name} may hold only XLA flags --xla_<name>[=<value>] (no dump flags, no paths or URLs "
            "in values)"
        )
    return f"{name} must match {rule.pattern}"
