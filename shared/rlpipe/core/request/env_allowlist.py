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

A deployment may add names (``RLPIPE_ALLOWED_ENV``, a team's ``extra_env``): exact ``NAME``s,
``NAME=<rule>``, or families ``WORD_*``. What it may add is decided by the words a name is made of
(``env_names``): never a name one of whose words says proxy, CA or certificate, endpoint, URL,
host or server, resolver, emulator, plugin or code path, credential, or a namespace the pipeline
or MaxText owns; never a word rlpipe does not know; never ``*``.

And every name has a rule for its values, read as its tool reads it (a word is not enough:
``GRPC_TRACE=http`` makes gRPC log every call's headers). The rule is rlpipe's own when it knows
the name (``RULES``: the containers' names below and ``KNOWN``); otherwise the deployment states
one, ``NAME=int:LOW..HIGH`` or ``NAME=word|word``, or the name is refused when the deployment
loads. A stated rule may not replace one of rlpipe's, nor admit a name whose words say it chooses
what is printed (``env_names.printing_word``): which of such a variable's values print a
credential is for rlpipe to know, with a citation, not for a deployment to vouch for. A family
admits only members rlpipe has a rule for. Exact names and a family's own words are checked when
the deployment loads (``Policy``), a family's members when a request names one.

Sources: MT = AI-Hypercomputer/maxtext ``maxtext-v0.2.4``; XPK = AI-Hypercomputer/xpk @367c838;
TI = vllm-project/tpu-inference @7ecc401 (the commit MaxText pins); PU = pathways-utils @8950a34.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from rlpipe.core.problems import Problem
from rlpipe.core.request import env_names


@dataclass(frozen=True)
class EnvRule:
    """A name a request may set: which values it takes, read as its tool reads them, said in
    words for the problem (``says``), and where that is documented (``source``)."""

    accepts: Callable[[str], bool]
    says: str
    source: str


def _pattern(pattern: str, says: str, source: str) -> EnvRule:
    """Values the whole of which match ``pattern`` (for tools that compare the value exactly)."""
    compiled = re.compile(pattern)
    return EnvRule(lambda value: compiled.fullmatch(value) is not None, says, source)


def _words(words: Iterable[str], source: str, *, fold: bool = False) -> EnvRule:
    """One of ``words``; ``fold``: the tool compares without case, so any case of one is that
    word (and a case it would not fold is refused anyway, being in no list)."""
    given = tuple(dict.fromkeys(words))
    allowed = frozenset(w.casefold() if fold else w for w in given)
    says = ", ".join(given) + (" (any case)" if fold else "")
    return EnvRule(lambda value: (value.casefold() if fold else value) in allowed, says, source)


_DECIMAL = re.compile(r"-?(0|[1-9][0-9]{0,18})")


def _integers(low: int, high: int, source: str) -> EnvRule:
    """A whole number from ``low`` to ``high`` in the one spelling every reader takes alike:
    decimal digits, no sign but a minus, no leading zero or space (``strtol`` reads ``08`` and
    `` 8`` as 8, Python's ``int`` refuses the one and accepts the other)."""

    def accepts(value: str) -> bool:
        return _DECIMAL.fullmatch(value) is not None and low <= int(value) <= high

    return EnvRule(accepts, f"a whole number from {low} to {high}", source)


def _seconds(high: int, source: str) -> EnvRule:
    """A positive number of seconds up to ``high``: digits with at most one decimal point (no
    ``inf``, ``nan``, exponent, sign or ``_``, which Python's ``float`` would also read)."""
    shape = re.compile(r"(0|[1-9][0-9]{0,8})(\.[0-9]{1,6})?")

    def accepts(value: str) -> bool:
        return shape.fullmatch(value) is not None and 0 < float(value) <= high

    return EnvRule(accepts, f"a number of seconds above 0 and at most {high}", source)


def _tracers(allowed: Iterable[str], source: str) -> EnvRule:
    """gRPC's ``GRPC_TRACE``, read as gRPC reads it (``src/core/lib/debug/trace.cc``
    ``ParseTracers``): split at commas, empty entries skipped, each a tracer name, ``-name``
    (turns one off), ``all`` (every tracer) or a glob; names compared without case in the
    versions that fold it. Each entry, stripped and case folded, must be one of ``allowed`` or
    ``-`` one of them: ``all``, globs and every other tracer are refused."""
    names = frozenset(allowed)

    def accepts(value: str) -> bool:
        entries = [e.strip().casefold() for e in value.split(",")]
        entries = [e for e in entries if e]
        return bool(entries) and all(e.removeprefix("-") in names for e in entries)

    return EnvRule(accepts, f"a comma-separated list of the tracers {', '.join(sorted(names))}", source)


# XLA's whitespace (tsl parse_flags_from_env.cc, kWS): what separates flags. Python's own split
# would also cut at \v, \f and Unicode spaces, where XLA reads one token.
_XLA_WHITESPACE = " \t\r\n"
# XLA flags only, with plain values. Refused: any flag with "dump" in its name (--xla_dump_to
# writes HLO and constants to a path; MT configs/types.py:3305-3323), any value with "/" or ":"
# (a path or URL), every non --xla_ flag (--flagfile, --fromenv), and a value whose first
# non-blank character is not "-", which XLA reads as the name of a file of flags. Every v6e flag
# MaxText ships passes (MT run_gemma4_e4b_rl.sh:59-77, configs/tpu/v6e/*.sh:39).
_XLA_TOKEN = re.compile(r"--xla_[a-z0-9_]+(=[A-Za-z0-9_.+-]{1,64})?")


def _xla_flags(source: str) -> EnvRule:
    def accepts(value: str) -> bool:
        tokens = re.split(f"[{_XLA_WHITESPACE}]+", value.strip(_XLA_WHITESPACE))
        return bool(value.strip(_XLA_WHITESPACE)) and all(
            _XLA_TOKEN.fullmatch(t) and "dump" not in t.split("=")[0] for t in tokens
        )

    return EnvRule(
        accepts,
        "only XLA flags --xla_<name>[=<value>] separated by spaces (no dump flags, no paths or URLs in "
        "values)",
        source,
    )


_BOOL01 = r"^[01]$"
_BOOL = r"^(0|1|true|false)$"
_LOG_0_3 = r"^[0-3]$"
# absl/TSL vmodule: comma-separated module=level (TSL platform/default/logging.cc).
_VMODULE = r"^[A-Za-z0-9_]+=[0-9](,[A-Za-z0-9_]+=[0-9])*$"
_VMODULE_SAYS = "module=level pairs (level 0-9) separated by commas"
_ONE_OR_ZERO = "0 or 1"
_TRUE_FALSE = "true or false"

HEAD_CONTAINER: dict[str, EnvRule] = {
    "JAX_PLATFORMS": _pattern(
        r"^(proxy|cpu)(,(proxy|cpu))*$",
        "proxy and cpu, comma-separated",
        "tutorials; MT rl_on_multi_host.md:178",
    ),
    "ENABLE_PATHWAYS_PERSISTENCE": _pattern(
        _BOOL01, _ONE_OR_ZERO, "tutorials; PU pathwaysutils/_initialize.py:56-65"
    ),
    "VLLM_ENABLE_V1_MULTIPROCESSING": _pattern(
        _BOOL01, _ONE_OR_ZERO, "tutorial v6e-32; MT run_gemma4_e4b_rl.sh:81"
    ),
    "VLLM_LOGGING_LEVEL": _pattern(
        r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$",
        "DEBUG, INFO, WARNING, ERROR or CRITICAL",
        "MT run_gemma4_e4b_rl.sh:87",
    ),
    "VLLM_ENGINE_READY_TIMEOUT_S": _pattern(
        r"^[1-9][0-9]{0,4}$", "a whole number of seconds from 1 to 99999", "MT run_gemma4_e4b_rl.sh:91"
    ),
    "TF_CPP_MIN_LOG_LEVEL": _pattern(
        _LOG_0_3, "0 to 3", "MT rl_on_multi_host.md:178; XPK core/docker_container.py:121-124"
    ),
    "TPU_STDERR_LOG_LEVEL": _pattern(
        _LOG_0_3, "0 to 3", "MT run_qwen3_30b_rl.sh:87; XPK core/docker_container.py:121-122"
    ),
    "TPU_MIN_LOG_LEVEL": _pattern(
        _LOG_0_3, "0 to 3", "MT run_qwen3_30b_rl.sh:89; XPK core/docker_container.py:121-122"
    ),
    "TPU_VMODULE": _pattern(_VMODULE, _VMODULE_SAYS, "XPK core/docker_container.py:124"),
    "GRPC_DNS_RESOLVER": _pattern(
        r"^(native|ares)$", "native or ares", "tutorials; grpc doc/environment_variables.md"
    ),
    # gRPC compares GRPC_VERBOSITY without case (log.cc: EqualsIgnoreCase). DEBUG is refused: it
    # admits every debug line of gRPC core, which no one here has read for what it prints; the
    # tracers GRPC_TRACE may name log at INFO (grpc TROUBLESHOOTING.md).
    "GRPC_VERBOSITY": _words(
        ("INFO", "ERROR", "NONE"), "MT rl/math_verify_pool.py:77; grpc TROUBLESHOOTING.md", fold=True
    ),
    "GRPC_ENABLE_FORK_SUPPORT": _pattern(_BOOL, "0, 1, true or false", "MT run_gptoss_20b_rl.sh:83"),
    "FLAGS_pathways_enforce_subset_devices_form_subslice": _pattern(
        r"^(true|false)$", _TRUE_FALSE, "tutorial v6e-32"
    ),
    "ENABLE_PJRT_COMPATIBILITY": _pattern(r"^(true|false)$", _TRUE_FALSE, "MT run_gemma4_e4b_rl.sh:84"),
    "SKIP_JAX_PRECOMPILE": _pattern(
        _BOOL, "0, 1, true or false", "MT run_qwen3_30b_rl.sh:85; TI tpu_inference/envs.py:243"
    ),
    "NEW_MODEL_DESIGN": _pattern(
        _BOOL, "0, 1, true or false", "MT run_gemma4_e4b_rl.sh:82; TI tpu_inference/envs.py:259"
    ),
    "MODEL_IMPL_TYPE": _pattern(
        r"^(auto|vllm|flax_nnx)$", "auto, vllm or flax_nnx", "MT run_gptoss_20b_rl.sh:82; TI envs.py:249-251"
    ),
    "LIBTPU_INIT_ARGS": _xla_flags("MT configs/tpu/v6e/*.sh:39; XPK docs/usage/advanced.md:30"),
    "XLA_FLAGS": _xla_flags("MT configs/types.py:3305-3323"),
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
    "TPU_PREMAPPED_BUFFER_SIZE": _pattern(
        r"^[0-9]{4,12}$", "a number of bytes (4 to 12 digits)", "Cloud TPU performance guide"
    ),
    "LIBTPU_INIT_ARGS": HEAD_CONTAINER["LIBTPU_INIT_ARGS"],
}

# gRPC tracers that log state, never a call's data: estimations, flow control and keepalive
# windows, connectivity changes, load-balancing picks, final call errors. Refused by being absent:
# http (the http2 transport: every header, authorization included), api, call, channel and the
# other filters (batches with their metadata), tcp and secure_endpoint (the bytes on the wire),
# tsi and handshaker (the TLS handshake), all and globs (every tracer at once).
# Descriptions from grpc doc/environment_variables.md.
SAFE_GRPC_TRACERS = (
    "bdp_estimator",
    "call_error",
    "connectivity_state",
    "flowctl",
    "http_keepalive",
    "pick_first",
    "resource_quota",
    "round_robin",
    "timer",
)
_JAX_BOOL = (
    "y",
    "yes",
    "t",
    "true",
    "on",
    "1",
    "n",
    "no",
    "f",
    "false",
    "off",
    "0",
)

# Names no container lists, whose values rlpipe knows how their tool reads: a deployment may add
# each by name alone (RLPIPE_ALLOWED_ENV, a team's extra_env), or as a member of a family.
KNOWN: dict[str, EnvRule] = {
    "GRPC_TRACE": _tracers(
        SAFE_GRPC_TRACERS, "grpc doc/environment_variables.md; src/core/lib/debug/trace.cc"
    ),
    # JAX's boolean flags read their variable with strtobool, without case (jax/_src/config.py).
    "JAX_LOG_COMPILES": _words(_JAX_BOOL, "jax/_src/config.py bool_env", fold=True),
    # vLLM reads it with float(); <= 0 falls back to 10 (vllm/envs.py).
    "VLLM_LOG_STATS_INTERVAL": _seconds(86400, "vllm/envs.py VLLM_LOG_STATS_INTERVAL"),
    "TF_CPP_VMODULE": _pattern(_VMODULE, _VMODULE_SAYS, "TSL platform/default/logging.cc (as TPU_VMODULE)"),
}
# Every name rlpipe knows the values of: a deployment's own rule may never replace one of these.
RULES: dict[str, EnvRule] = {**HEAD_CONTAINER, **WORKER_CONTAINER, **KNOWN}

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
# their words (``env_names``) when a request names one, and need a rule rlpipe knows (``RULES``).
_FAMILY = re.compile(r"^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)*_\*$")
_SUBSTITUTION = re.compile(r"\$\(|`|\$\{[^}]*[:@#%/^,]")
SETTING = "RLPIPE_ALLOWED_ENV"
# Where a deployment adds names: its setting, or a team's declaration (``RLPIPE_TEAMS``).
_WHERE = f"{SETTING} (or the team's extra_env in RLPIPE_TEAMS)"

# The rules a deployment may state for a name rlpipe does not know (``NAME=<rule>``): whole
# numbers in a range, or a set of plain words compared exactly. No pattern, no free text: a word
# holds no "/" or ":", so no rule can admit a path or a URL.
_STATED_INT = re.compile(r"int:(-?[0-9]{1,19})\.\.(-?[0-9]{1,19})")
_STATED_WORD = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}"
_STATED_WORDS = re.compile(rf"{_STATED_WORD}(\|{_STATED_WORD}){{0,31}}")
_INT64 = 2**63 - 1


def _how_to_add(name: str) -> str:
    """The fix for a name the deployment wants whose values rlpipe does not know."""
    return (
        f"state its values in {_WHERE}: {name}=int:LOW..HIGH (whole numbers) or {name}=word|word "
        "(exactly those words), or remove it"
    )


def _stated_rule(name: str, text: str) -> EnvRule | str:
    """The rule ``text`` states for ``name``, or why it is not one."""
    source = f"this deployment's rule for {name} ({_WHERE})"
    numbers = _STATED_INT.fullmatch(text)
    if numbers is not None:
        low, high = int(numbers[1]), int(numbers[2])
        if not (-_INT64 - 1 <= low <= high <= _INT64):
            return f"int:{low}..{high} is not a range of 64-bit whole numbers from low to high"
        return _integers(low, high, source)
    if _STATED_WORDS.fullmatch(text):
        return _words(text.split("|"), source)
    return (
        f"{text!r} is not a value rule (int:LOW..HIGH, or words of letters, digits, '_', '.', '+', '-' "
        "joined by '|')"
    )


@dataclass(frozen=True)
class Additions:
    """What a deployment adds, read from its entries: exact names, each with the rule its values
    follow (rlpipe's own, else the one the entry states), and families (``WORD_`` prefixes).
    Entries ``deployment_problems`` refuses are left out (the deployment never loads with them)."""

    names: Mapping[str, EnvRule]
    families: tuple[str, ...]

    @classmethod
    def read(cls, entries: Iterable[str]) -> Additions:
        names: dict[str, EnvRule] = {}
        families: list[str] = []
        for entry in entries:
            name, stated, text = entry.partition("=")
            if _FAMILY.match(name) and not stated:
                families.append(name[:-1])
            elif _NAME.match(name):
                rule = RULES.get(name) if not stated else _stated_rule(name, text)
                if isinstance(rule, EnvRule) and not (stated and name in RULES):
                    names[name] = rule
        return cls(names, tuple(families))


def deployment_problems(entries: Iterable[str], setting: str = SETTING) -> list[Problem]:
    """What is wrong with a deployment's ``RLPIPE_ALLOWED_ENV`` (and a team's ``extra_env``),
    checked when the deployment loads (``Policy``). An entry is ``NAME``, ``NAME=<rule>`` or a
    family ``WORD_..._*``; every word it names must be one ``env_names`` knows as harmless; ``*``
    alone is refused. And every name must have a rule for its values: rlpipe's own (``RULES``),
    else one the entry states, which may not replace rlpipe's and may not admit a name that
    chooses what is printed (``env_names.printing_word``: which of its values print a credential
    is what rlpipe must know, not what a deployment vouches for). ``setting`` is the path the
    problems name (a team's ``teams.<name>.extra_env`` when its entries are checked alone)."""
    found: list[Problem] = []
    for entry in entries:
        name, stated, text = entry.partition("=")
        if _FAMILY.match(name):
            verdict, what = env_names.judge(name[:-2]), f"the family {name}"
        elif _NAME.match(name):
            verdict, what = env_names.judge(name), name
            if name in PIPELINE_NAMES:
                verdict = env_names.Verdict(False, "the pipeline sets it", refused_word=True)
        else:
            found.append(
                Problem(
                    setting,
                    f"{entry!r} is neither a variable name nor a family of whole words ending in _*"
                    + (
                        " ('*' alone would let a request set any variable)" if entry.strip("_*") == "" else ""
                    ),
                    "list names (TF_CPP_VMODULE), names with a value rule (OMP_NUM_THREADS=int:1..64) or "
                    "families such as VLLM_LOGGING_*",
                )
            )
            continue
        if not verdict.allowed:
            found.append(
                Problem(
                    setting,
                    f"{what} cannot be added: {verdict.reason}",
                    "remove it; no deployment setting allows it"
                    if verdict.refused_word
                    else "remove it, or list only names made of words docs/security.md lists",
                )
            )
            continue
        if _FAMILY.match(name):
            refusal = _family_rule_problem(name) if stated else None
        else:
            refusal = _rule_problem(name, stated, text)
        if refusal is not None:
            found.append(Problem(setting, *refusal))
    return found


def _family_rule_problem(family: str) -> tuple[str, str]:
    return (
        f"the family {family} states a value rule, but one rule cannot fit every variable of a family",
        f"list the family alone (its members rlpipe knows the values of), and each other name with "
        f"its own rule in {_WHERE}",
    )


def _rule_problem(name: str, stated: str, text: str) -> tuple[str, str] | None:
    """Why the exact name ``name`` (with ``text`` stated as its rule, if ``stated``) has no rule
    its values can be checked by, as (problem, fix); None when it has one."""
    known = RULES.get(name)
    printing = env_names.printing_word(name)
    if known is not None:
        if not stated:
            return None
        return (
            f"{name} states its own value rule, but rlpipe reads {name}'s values itself ({known.says})",
            f"list it as {name} alone in {_WHERE}",
        )
    if printing is not None:
        return (
            f"rlpipe knows no value rule for {name}, and its word {printing!r} says its values choose "
            "what is printed (a log may show what a value makes it print, credentials included)",
            f"remove it from {_WHERE}: only a name whose values rlpipe knows print no credential "
            "(env_allowlist.KNOWN) may choose what is printed",
        )
    if not stated:
        return f"rlpipe knows no rule for the values of {name}", _how_to_add(name)
    rule = _stated_rule(name, text)
    if isinstance(rule, str):
        return f"{name}: {rule}", _how_to_add(name)
    return None


def env_problems(
    env_maps: Iterable[tuple[str, Mapping[str, object], Mapping[str, EnvRule]]],
    extra_names: Iterable[str] = (),
) -> Iterator[Problem]:
    """Every variable outside the allowlist, every value outside its name's rule. ``extra_names``
    are the deployment's additions (``NAME``, ``NAME=<rule>``, or a family ``WORD_*``)."""
    extra = Additions.read(extra_names)
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
            rule = allowed.get(name) or _added_rule(name, path, allowed, extra)
            if not isinstance(rule, EnvRule):
                yield Problem(where, *rule)
                continue
            text = value if isinstance(value, str) else str(value)
            if _SUBSTITUTION.search(text):
                yield Problem(
                    where,
                    "the value contains shell substitution ($(...), backticks or ${...} operators)",
                    "give a literal value",
                )
            elif not rule.accepts(text):
                yield Problem(  # the value is not repeated: it may be a secret pasted in the wrong place
                    where,
                    f"{name} takes only {rule.says}",
                    f"give a value of that rule (see {rule.source}), or remove it",
                )


def _added_rule(
    name: str, path: str, allowed: Mapping[str, EnvRule], extra: Additions
) -> EnvRule | tuple[str, str]:
    """The rule of ``name`` (not built into this container) when the deployment added it: by name,
    or as a member of a family whose words are all harmless and whose values rlpipe knows.
    Otherwise why it may not be set here, as (problem, fix)."""
    if name in extra.names:
        return extra.names[name]
    verdict = env_names.judge(name)
    family = next((f + "*" for f in extra.families if name.startswith(f)), None)
    if verdict.refused_word:
        return f"{name} may not be set: {verdict.reason}", "remove it; no deployment setting allows it"
    if family is not None and not verdict.allowed:
        return (
            f"{name} is in the family {family} this deployment allows, but {verdict.reason}",
            "remove it: a deployment may add only names whose every word rlpipe knows (docs/security.md)",
        )
    if family is not None:
        known = RULES.get(name)
        if known is not None:
            return known
        printing = env_names.printing_word(name)
        fix = (
            f"remove it: its word {printing!r} chooses what is printed, so only a rule rlpipe knows may "
            "admit it"
            if printing is not None
            else _how_to_add(name)
        )
        return (
            f"{name} is in the family {family} this deployment allows, but rlpipe knows no rule for its values",
            fix,
        )
    return (
        f"{name} is not on this deployment's allowlist of variables for {path}",
        f"remove it; allowed here: {', '.join(sorted(allowed))}; an operator can add names with {SETTING}",
    )
