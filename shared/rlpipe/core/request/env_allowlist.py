"""Which environment variables a request may set in its containers: an allowlist, with values.

Why an allowlist: every blocklist of dangerous names had a way around it. ``HF_ENDPOINT`` sent the
Hugging Face token to any host, ``HTTPS_PROXY`` and ``REQUESTS_CA_BUNDLE`` read the traffic,
``PYTHONUSERBASE`` ran a ``usercustomize.py`` from the model repo, and MaxText reads any
``M_<KEY>`` as a config override (maxtext-v0.2.4 ``src/maxtext/configs/pyconfig.py:43,124-125,
517-540``), ``M_LOAD_PARAMETERS_PATH`` included. So a request may set only the names below, each
with the values its tool accepts; a deployment may add names (``RLPIPE_ALLOWED_ENV``), never the
denied ones.

The names are those the tutorials set (``VLLM_ENABLE_V1_MULTIPROCESSING``, ``JAX_PLATFORMS``,
``ENABLE_PATHWAYS_PERSISTENCE``; ``GRPC_DNS_RESOLVER`` and
``FLAGS_pathways_enforce_subset_devices_form_subslice`` on the Pathways containers) and those
MaxText's RL scripts and xpk set for tuning and logging. Each entry cites where it is set. A prefix
(``JAX_``, ``TPU_``, ``VLLM_``, ``GRPC_``, ``HF_``) is never allowed whole: each has members that
redirect traffic, load code or write to a path of the caller's choosing (``JAX_BACKEND_TARGET``,
``TPU_LIBRARY_PATH``, ``VLLM_PLUGINS``, ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, ``HF_ENDPOINT``).
Names are compared exactly: environment names are case-sensitive.

Sources: MT = AI-Hypercomputer/maxtext ``maxtext-v0.2.4``; XPK = AI-Hypercomputer/xpk @367c838;
TI = vllm-project/tpu-inference @7ecc401 (the commit MaxText pins); PU = pathways-utils @8950a34.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from rlpipe.core.problems import Problem

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

# Never, whatever a deployment adds: names the pipeline sets itself (a later duplicate entry wins
# in Kubernetes), and prefixes no single allowed name may be widened into.
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
DENIED_PREFIXES = ("M_", "MEGASCALE_", "RLPIPE_", "LD_", "BASH_", "PYTHON")
# Read by bash before our script's first line (bash(1) INVOCATION) or by the loader.
SHELL_NAMES = frozenset(
    {"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH"}
)
# Where a client sends its requests and whom it trusts, compared in any case (HTTP clients read
# http_proxy and HTTP_PROXY alike): HF_ENDPOINT sends the Hugging Face token to its host, a proxy
# or CA bundle reads the traffic, the metadata host hands out the workload's Google token.
NETWORK_PREFIXES = ("HF_", "GCE_METADATA", "SSL_CERT_", "GOOGLE_", "MAXTEXT_")
# Load code or data from a path, or open a server, by name (research notes in docs/security.md):
# libtpu and PJRT plugins, vLLM plugins and its logging dictConfig, pickle, the JAX compile cache.
CODE_NAMES = frozenset(
    {
        "TPU_LIBRARY_PATH",
        "PJRT_NAMES_AND_LIBRARY_PATHS",
        "VLLM_PLUGINS",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_ALLOW_INSECURE_SERIALIZATION",
        "JAX_COMPILATION_CACHE_DIR",
        "REGISTER_MM_MODULE_CUSTOM_PYTREE_CLASSES",
        "USE_JAX_PROFILER_SERVER",
    }
)
NETWORK_NAMES = frozenset(
    {
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "STORAGE_EMULATOR_HOST",
        "PUBSUB_EMULATOR_HOST",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HOME",
        "PATH",
        "TMPDIR",
    }
)
_SUBSTITUTION = re.compile(r"\$\(|`|\$\{[^}]*[:@#%/^,]")
SETTING = "RLPIPE_ALLOWED_ENV"


def denied(name: str) -> bool:
    """Never allowed, whatever a deployment lists."""
    folded = name.upper()
    return (
        name in PIPELINE_NAMES
        or name in SHELL_NAMES
        or name.startswith(DENIED_PREFIXES)
        or folded in NETWORK_NAMES
        or folded in CODE_NAMES
        or folded.startswith(NETWORK_PREFIXES)
    )


def env_problems(
    env_maps: Iterable[tuple[str, Mapping[str, object], Mapping[str, EnvRule]]],
    extra_names: Iterable[str] = (),
) -> Iterator[Problem]:
    """Every variable outside the allowlist, every value outside its rule. ``extra_names`` are the
    deployment's additions (``NAME`` exactly, or ``PREFIX*``), with any literal value."""
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
            if denied(name):
                yield Problem(
                    where,
                    f"{name} is set by the pipeline, redirects where a client connects or whom it "
                    "trusts, or is read by the shell, the loader, Python or MaxText before the "
                    "request's program runs",
                    "remove it; no deployment setting allows it",
                )
                continue
            rule = allowed.get(name)
            if rule is None and not _extra_allows(name, extra):
                yield Problem(
                    where,
                    f"{name} is not on this deployment's allowlist of variables for {path}",
                    f"remove it; allowed here: {', '.join(sorted(allowed))}; an operator can add "
                    f"names with {SETTING}",
                )
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


def _extra_allows(name: str, extra: tuple[str, ...]) -> bool:
    return any(name == e or (e.endswith("*") and name.startswith(e[:-1])) for e in extra)


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
