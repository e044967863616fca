"""The serve check: does the exported model load and answer as a server would build it, before
anything is published (docs/evaluation.md).

A program of its own, run where torch and transformers are (the serving tier here,
``programs/requirements-serving.lock``; a serving workload in production), with nothing of rlpipe
imported, so it runs from its source alone as the publish program does. It reads the export the
way a server does, through transformers' own loaders:

1. **The config, against the base model's.** Training changes weights, never the architecture, so
   every field the base model's config sets must read back the same from the export's (both read
   by ``AutoConfig``, so a value is compared as transformers holds it). The fields export may
   rewrite are an allowlist (``MAY_DIFFER``: the dtype, the writer's version and the like). This is
   what MaxText#2867 shipped: a Gemma 3 export whose ``hidden_activation`` was ``gelu`` where the
   model's is ``gelu_pytorch_tanh``; vLLM refused it, transformers loads it and computes another
   function, so only the comparison catches it here.
2. **The tokenizer and its chat template** (``AutoTokenizer``, ``apply_chat_template``).
3. **The model** (``AutoModelForCausalLM``), then a greedy completion of each fixed prompt.

Exit 0 with the evaluation manifest written (``--out``, JSON: what loaded it, the versions, each
prompt's completion); exit 2 with ``serve check refused: …`` on stderr, naming the field or the
loader's own error, when the model would not serve as trained.

    python serve_check.py --model EXPORT_DIR --base BASE_DIR --out evaluation.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REFUSED = 2  # the exit code of a model that must not be published (a permanent failure)

# Config fields an export may write differently from the base model's without changing the model
# a server builds: the writer's own bookkeeping and the weights' storage type.
# (Not ``architectures``: a server picks the model's implementation by it.)
MAY_DIFFER = frozenset({"transformers_version", "_name_or_path", "dtype", "torch_dtype"})
MAPPING = "<a mapping>"  # a nested config (vision_config, rope_parameters…), compared field by field

# The prompts every check asks (chat turns): fixed, so two checks of one model answer alike.
PROMPTS = (
    "What is 3 + 4?",
    "Name a primary color.",
)


class Refused(Exception):
    """The model would not serve as it was trained: the message says why, with the field."""


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every field by its dotted path; a nested config is also a field of its own (``MAPPING``), so
    a base without one (None) and an export with one differ there."""
    if isinstance(value, dict):
        out: dict[str, Any] = {prefix[:-1]: MAPPING} if prefix else {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def config_differences(model: str, base: str) -> list[str]:
    """Every field of the base model's config, as transformers reads it (its defaults filled in, and
    old spellings such as ``rope_theta`` moved where they now live), that reads back otherwise from
    the export's, in words. A field only the export has is not compared: a reader of the base's
    would not have it either."""
    from transformers import AutoConfig

    try:
        exported = AutoConfig.from_pretrained(model).to_dict()
    except Exception as exc:  # any loader error refuses the model, named
        raise Refused(
            f"transformers cannot read the export's config.json: {type(exc).__name__}: {exc}"
        ) from exc
    wanted = _flat(AutoConfig.from_pretrained(base).to_dict())
    got = _flat(exported)
    out = []
    for key in sorted(wanted):
        if key.rsplit(".", 1)[-1] in MAY_DIFFER:
            continue
        if got.get(key, "<absent>") != wanted[key]:
            out.append(f"{key} is {got.get(key, '<absent>')!r} where the base model's is {wanted[key]!r}")
    return out


def check(model: str, base: str, max_new_tokens: int = 8) -> dict[str, Any]:
    """Raises :class:`Refused`; returns the evaluation manifest."""
    started = time.monotonic()
    differences = config_differences(model, base)
    if differences:
        raise Refused(
            "the export's config.json builds another model than the one trained: " + "; ".join(differences)
        )
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    except Exception as exc:  # the loader's own error, named
        raise Refused(f"transformers cannot load the export: {type(exc).__name__}: {exc}") from exc
    answers = []
    for prompt in PROMPTS:
        try:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}],
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            )
            with torch.no_grad():
                out = loaded.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
        except Exception as exc:  # a missing chat template, or a model that cannot run a step
            raise Refused(f"the export cannot answer {prompt!r}: {type(exc).__name__}: {exc}") from exc
        new = out[0, ids["input_ids"].shape[1] :].tolist()
        answers.append({"prompt": prompt, "tokens": new, "completion": tokenizer.decode(new)})
    return {
        "loaded_by": f"transformers {transformers.__version__}, torch {torch.__version__}",
        "model_class": type(loaded).__name__,
        "config_checked_against": str(base),
        "greedy": {"max_new_tokens": max_new_tokens},
        "answers": answers,
        "seconds": round(time.monotonic() - started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the export's directory")
    p.add_argument(
        "--base", required=True, help="the base model's files at the pinned commit (its config.json)"
    )
    p.add_argument("--out", required=True, help="where the evaluation manifest is written")
    p.add_argument("--max-new-tokens", type=int, default=8)
    args = p.parse_args(argv)
    try:
        manifest = check(args.model, args.base, args.max_new_tokens)
    except Refused as exc:
        print(f"serve check refused: {exc}", file=sys.stderr)
        return REFUSED
    Path(args.out).write_text(json.dumps(manifest, indent=1))
    print(
        f"serve check: {manifest['model_class']} loaded by {manifest['loaded_by']}; {len(manifest['answers'])} answers"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
