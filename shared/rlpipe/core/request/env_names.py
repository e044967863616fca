"""What an environment variable's name says it does, from the words it is made of.

Why words and not spellings: a deployment may widen the built-in allowlist
(``RLPIPE_ALLOWED_ENV``), and a list of names or prefixes it must never add was always one
spelling short: with ``GRPC_*``, ``TENSORSTORE_*``, ``VLLM_*`` or ``*`` allowed,
``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, ``grpc_proxy``, ``TENSORSTORE_GCS_HTTP_URL``,
``VLLM_USAGE_STATS_SERVER`` and ``AWS_CA_BUNDLE`` all passed. Tools name their variables with
words (``HTTPS_PROXY``, ``REQUESTS_CA_BUNDLE``, ``HF_ENDPOINT``), so a name is split into its parts
(on ``_``, ``-`` and ``.``, case folded: ``grpc_proxy`` and ``GRPC_PROXY`` are the same two
words) and each part is looked up here:

* a word with a meaning a request must never control (``REFUSED``: a proxy, a CA or certificate,
  an endpoint, URL, host or server, a resolver, an emulator, a plugin, a code path, a credential,
  or a namespace the pipeline or MaxText owns) refuses the name, whatever else it says;
* a word of what a tool's tuning and logging is made of (``ALLOWED``) is fine;
* a word in neither is refused too: rlpipe cannot say what ``PYTHONUSERBASE`` or ``PS4`` does, so
  it does not let a deployment add it. This is what keeps the catalogue an allowlist: a new tool's
  new word is refused until someone writes down what it means.

The words were taken from the variables the refused names are made of (bash(1), ld.so(8),
Python's and the Hugging Face, gRPC, TensorStore, vLLM, JAX and Google client documentation) and
from the names the tutorials and MaxText's RL scripts set (``env_allowlist``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEPARATORS = re.compile(r"[_.\-]+")

# meaning -> the words that carry it. A request may never set a name with one of these words.
REFUSED: dict[str, tuple[str, ...]] = {
    "a proxy, which relays the traffic": ("proxy", "proxies", "socks"),
    "a CA or certificate, which decides whom a client trusts": (
        "ca",
        "cacert",
        "cafile",
        "capath",
        "cert",
        "certs",
        "certificate",
        "certificates",
        "ssl",
        "tls",
        "roots",
        "bundle",
        "trust",
        "truststore",
        "insecure",
        "verify",
    ),
    "an endpoint, URL, host or server, which decides where a client connects": (
        "endpoint",
        "endpoints",
        "url",
        "urls",
        "uri",
        "host",
        "hosts",
        "hostname",
        "server",
        "servers",
        "address",
        "addr",
        "ip",
        "port",
        "target",
        "metadata",
        "domain",
        "remote",
        "gateway",
        "api",
    ),
    "a resolver, which decides what a name connects to": ("resolver", "resolvers", "resolve", "dns"),
    "an emulator, which stands in for a real service": ("emulator", "emulators"),
    "a plugin, hook or preload, which loads code by name": (
        "plugin",
        "plugins",
        "extension",
        "extensions",
        "hook",
        "hooks",
        "preload",
        "audit",
    ),
    "a code path: a file, directory, library or module read, run or written": (
        "path",
        "paths",
        "dir",
        "dirs",
        "directory",
        "home",
        "file",
        "files",
        "filename",
        "lib",
        "library",
        "libraries",
        "module",
        "modules",
        "loader",
        "ld",
        "config",
        "cache",
        "tmpdir",
        "tmp",
        "temp",
        "root",
        "prefix",
        "script",
        "startup",
        "command",
        "cmd",
        "exec",
        "shell",
        "bash",
        "env",
        "python",
        "args",
        "flags",
        "options",
        "opts",
        "serialization",
        "pickle",
        "profiler",
    ),
    "a credential": (
        "token",
        "tokens",
        "secret",
        "secrets",
        "password",
        "passwd",
        "credential",
        "credentials",
        "auth",
        "key",
        "apikey",
    ),
    "a namespace the pipeline, MaxText or a cloud client owns": (
        "m",  # MaxText reads M_<KEY> as a config override (pyconfig.py:43, 124-125, 519-553)
        "maxtext",
        "megascale",
        "rlpipe",
        "jobset",
        "kueue",
        "absl",
        "hf",  # the pipeline sets HF_TOKEN and HF_HOME; HF_ENDPOINT sends the token elsewhere
        "huggingface",
        "google",
        "gce",
        "gcloud",
        "cloudsdk",
        "aws",
        "azure",
        "boto",
    ),
}

# What a logging word means: a name with one chooses what a program prints, so what its values
# print must be known (``env_allowlist``: only a value rule rlpipe knows may admit such a name).
LOGGING = "logging: what is logged, how much, where on the console"

# meaning -> the words that carry it. A name made only of these may be added by a deployment.
ALLOWED: dict[str, tuple[str, ...]] = {
    "a program or library whose behaviour the variable tunes": (
        "tpu",
        "libtpu",
        "jax",
        "xla",
        "pjrt",
        "vllm",
        "grpc",
        "tf",
        "cpp",
        "pathways",
        "tensorstore",
        "orbax",
        "flax",
        "tunix",
        "grain",
        "tokenizers",
        "omp",
    ),
    LOGGING: (
        "log",
        "logs",
        "logging",
        "level",
        "verbosity",
        "verbose",
        "quiet",
        "debug",
        "trace",
        "tracing",
        "stderr",
        "stdout",
        "vmodule",
        "color",
        "stats",
        "usage",
        "telemetry",
        "progress",
        "bars",
        "warnings",
    ),
    "a switch, a count, a size or a time": (
        "enable",
        "enabled",
        "disable",
        "disabled",
        "use",
        "skip",
        "allow",
        "force",
        "no",
        "num",
        "count",
        "min",
        "max",
        "size",
        "len",
        "long",
        "limit",
        "threads",
        "thread",
        "workers",
        "worker",
        "processes",
        "procs",
        "parallelism",
        "timeout",
        "s",
        "ms",
        "seconds",
        "interval",
        "retries",
        "retry",
        "fraction",
        "buffer",
        "memory",
        "mem",
        "preallocate",
        "premapped",
        "default",
        "async",
        "batch",
        "chunk",
        "seed",
        "deterministic",
        "v1",
        "v2",
        "multiprocessing",
        "fork",
        "support",
        "engine",
        "ready",
        "precompile",
        "compile",
        "compiles",
        "compilation",
        "new",
        "model",
        "design",
        "impl",
        "type",
        "mode",
        "compatibility",
        "persistence",
        "platforms",
        "platform",
        "enforce",
        "subset",
        "devices",
        "device",
        "form",
        "subslice",
        "init",
        "cpu",
        "per",
        "dtype",
        "precision",
        "offline",
    ),
}

_REFUSED_WORDS = {word: meaning for meaning, words in REFUSED.items() for word in words}
_ALLOWED_WORDS = {word: meaning for meaning, words in ALLOWED.items() for word in words}


def parts(name: str) -> list[str]:
    """The words of ``name``: split on ``_``, ``-`` and ``.``, case folded, empty ones dropped."""
    return [p for p in _SEPARATORS.split(name.casefold()) if p]


@dataclass(frozen=True)
class Verdict:
    """Whether a deployment may add ``name``, and why not (the word and what it means)."""

    allowed: bool
    reason: str = ""
    refused_word: bool = False  # a word whose meaning is never allowed (not merely unknown)


def judge(name: str) -> Verdict:
    """May a deployment add the variable ``name``? Only when every word of it is known and none
    means something a request must never control."""
    words = parts(name)
    if not words:
        return Verdict(False, f"{name!r} has no words")
    refused = [
        f"{word!r} names {_REFUSED_WORDS[word]}" for word in dict.fromkeys(words) if word in _REFUSED_WORDS
    ]
    if refused:
        return Verdict(False, "its word " + "; its word ".join(refused), refused_word=True)
    unknown = [w for w in words if w not in _ALLOWED_WORDS]
    if unknown:
        return Verdict(
            False,
            f"rlpipe does not know what {' and '.join(map(repr, unknown))} "
            f"{'means' if len(unknown) == 1 else 'mean'} in a variable name, so it cannot tell what "
            "the variable does",
        )
    return Verdict(True)


def printing_word(name: str) -> str | None:
    """The first word of ``name`` that says it chooses what is printed (``LOGGING``), or None.

    Why it matters: such a variable's value decides what a program writes to the log, and a log
    is read by more people than a Secret (``GRPC_TRACE=http`` prints every call's headers). So its
    values must be ones rlpipe knows print no credential: a deployment cannot vouch for them with
    a rule of its own (``env_allowlist.deployment_problems``)."""
    logging_words = set(ALLOWED[LOGGING])
    return next((word for word in parts(name) if word in logging_words), None)
