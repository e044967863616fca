"""The only changes made to an argv rlpipe renders so that a real MaxText program runs on this machine.

Shared by the programs tier (``programs/``, ``make programs``) and the simulator when it runs a
convert or export pod's program for real (``.real_programs``, ``make demo PROGRAMS=real``): both
run exactly the rendered argv, changed only here.

The MaxText config reader needs none: it reads every rendered argv as it is. Running the
programs needs three, and nothing else is touched (every key keeps its value, every path its
name below its root):

1. **The bucket becomes a folder.** ``gs://<bucket>/<name>`` → ``<work>/bucket/<name>``: the
   programs write and read the same object names, on local disk (no GCS for them here).
2. **The container's local paths move under the work folder.** An absolute path ``/p`` →
   ``<work>/fs/p``: the convert script's snapshot (``--hf_model_path``), the head's pinned
   tokenizer, the user's files where the head's staging step writes them, the export's output
   directory. Whoever runs the program puts there what the stage's script would have put there
   (the fixture, the staged parquet, the user file) and takes from there what it leaves.
3. **The model's size.** The converters map weights with the hard-coded config of ``model_name``
   (a 26B model), not the checkpoint's ``config.json``; ``override_model_config=true`` and the size
   keys below tell them the fixture's size (``programs/make_tiny_gemma4.py``), keeping
   ``model_name=gemma4-26b``.

Also here, the environment a program runs in (:func:`program_env`): nothing fetched from the Hub,
JAX on the CPU, scratch space under the work folder.

Pure (strings in, strings out), so the key of a tier result (``programs.parts``) covers it.
"""

from __future__ import annotations

from collections.abc import Mapping

WORK = "{work}"  # replaced by the run's folder when a program runs; kept in keys, so they are stable
BUCKET_DIR = "bucket"
FS_DIR = "fs"

# The fixture's sizes as MaxText keys (programs/make_tiny_gemma4.py TEXT).
TINY_MODEL_KEYS: tuple[str, ...] = (
    "override_model_config=true",
    "base_emb_dim=32",
    "base_num_decoder_layers=30",
    "base_num_query_heads=2",
    "base_num_kv_heads=1",
    "base_mlp_dim=32",
    "base_moe_mlp_dim=16",
    "head_dim=16",
    "global_head_dim=32",
    "global_num_kv_heads=1",
    "vocab_size=512",
    "num_experts=4",
    "num_experts_per_tok=2",
    "sliding_window_size=16",
)


def local_path(value: str) -> str:
    """Where a rendered path lives on the test machine (a value that is no path is unchanged)."""
    if value.startswith("gs://"):
        _, _, rest = value[len("gs://") :].partition("/")
        return f"{WORK}/{BUCKET_DIR}/{rest}"
    if value.startswith("/"):
        return f"{WORK}/{FS_DIR}{value}"
    return value


def localize(args: list[str]) -> list[str]:
    """Every ``key=value`` and ``--flag=value`` of an argv, with its path values moved (1, 2)."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        out.append(f"{key}{sep}{local_path(value)}" if sep else arg)
    return out


def resolve(text: str, work: str) -> str:
    return text.replace(WORK, work)


def value_of(args: list[str], key: str) -> str:
    """The value of ``key=`` (or ``--key=``) in an argv."""
    for arg in args:
        k, sep, value = arg.partition("=")
        if sep and k.lstrip("-") == key:
            return value
    raise KeyError(key)


def converter_args(rendered: list[str]) -> list[str]:
    """A converter's argv (``to_maxtext``, ``to_huggingface``) as it runs here: its paths moved
    (1, 2) and the fixture's size appended (3)."""
    return [*localize(rendered), *TINY_MODEL_KEYS]


# Variables a program must not inherit: MaxText's config overrides (``M_*``, read by pyconfig) and
# the Hub's, JAX's and XLA's settings of whoever runs it.
NOT_INHERITED = ("M_", "HF_", "JAX_", "XLA_")


def program_env(work: str, inherited: Mapping[str, str]) -> dict[str, str]:
    """The environment a real program runs in: ``inherited`` without :data:`NOT_INHERITED`, the
    Hub and its datasets offline (every file it reads is staged), JAX on the CPU, and temporary
    files, home and Hugging Face cache under ``work``."""
    env = {k: v for k, v in inherited.items() if not k.startswith(NOT_INHERITED)}
    env.update(
        TMPDIR=f"{work}/tmp",
        HOME=f"{work}/home",
        HF_HOME=f"{work}/hf-home",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        JAX_PLATFORMS="cpu",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env
