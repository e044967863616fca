"""Writes the tiny Gemma 4 fixture the real converters read: ``tests/fixtures/tiny_gemma4/``.

A checkpoint laid out as ``google/gemma-4-26b-a4b-it`` is (``Gemma4ForConditionalGeneration``:
the text model's tensors under ``model.language_model.``, bf16 safetensors with an index, a
``config.json``, a tokenizer with a chat template), at a size a 2-core machine converts in
minutes: hidden size 32, 30 layers (the 26B's five blocks of five sliding-window layers and one
global layer: ``to_huggingface --override_model_architecture`` keeps the hard-coded 30-entry
``layer_types``, so any other depth exports a config transformers refuses), 4 experts, top 2,
and a 512-token BPE vocabulary trained here on generated arithmetic questions.

Tensor names and shapes follow the Hugging Face Gemma 4 text decoder layer: per layer
q/k/o projections (v too on sliding-window layers; the global layers share K and V,
``attention_k_eq_v``), q/k norms, the four layer norms and ``layer_scalar``; the MoE block's
router (``proj``, ``scale``, ``per_expert_scale``), fused ``experts.gate_up_proj`` [E, 2F, H]
and ``experts.down_proj`` [E, H, F], the shared dense MLP, and the two extra MoE norms. No
torch: ``safetensors.numpy`` with ``ml_dtypes.bfloat16``. Deterministic (seeded), so running it
again writes the same tensors.

    .cache/programs/venv/bin/python programs/make_tiny_gemma4.py tests/fixtures/tiny_gemma4
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# The sizes. The override_model_config keys that tell MaxText the same sizes are in
# programs/run.py (TINY_MODEL_KEYS): the converters map with the model name's hard-coded config.
TEXT = {
    "hidden_size": 32,
    "num_hidden_layers": 30,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "global_head_dim": 32,
    "num_global_key_value_heads": 1,
    "intermediate_size": 32,
    "moe_intermediate_size": 16,
    "num_experts": 4,
    "top_k_experts": 2,
    "vocab_size": 512,
    "sliding_window": 16,
}
PATTERN = ["sliding_attention"] * 5 + ["full_attention"]  # the 26B's block of six layers
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
BASE = "model.language_model"


def layer_types() -> list[str]:
    return [PATTERN[i % len(PATTERN)] for i in range(TEXT["num_hidden_layers"])]


def tensor_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor of the text model, by its Hugging Face name."""
    t = TEXT
    hidden, experts = t["hidden_size"], t["num_experts"]
    shapes: dict[str, tuple[int, ...]] = {
        f"{BASE}.embed_tokens.weight": (t["vocab_size"], hidden),
        f"{BASE}.norm.weight": (hidden,),
    }
    for i, kind in enumerate(layer_types()):
        p = f"{BASE}.layers.{i}"
        is_global = kind == "full_attention"
        head_dim = t["global_head_dim"] if is_global else t["head_dim"]
        kv_heads = t["num_global_key_value_heads"] if is_global else t["num_key_value_heads"]
        q_dim, kv_dim = t["num_attention_heads"] * head_dim, kv_heads * head_dim
        shapes[f"{p}.self_attn.q_proj.weight"] = (q_dim, hidden)
        shapes[f"{p}.self_attn.k_proj.weight"] = (kv_dim, hidden)
        if not is_global:  # attention_k_eq_v: a global layer's values are its keys
            shapes[f"{p}.self_attn.v_proj.weight"] = (kv_dim, hidden)
        shapes[f"{p}.self_attn.o_proj.weight"] = (hidden, q_dim)
        shapes[f"{p}.self_attn.q_norm.weight"] = (head_dim,)
        shapes[f"{p}.self_attn.k_norm.weight"] = (head_dim,)
        for norm in (
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
            "pre_feedforward_layernorm_2",
            "post_feedforward_layernorm_1",
            "post_feedforward_layernorm_2",
        ):
            shapes[f"{p}.{norm}.weight"] = (hidden,)
        shapes[f"{p}.layer_scalar"] = (1,)
        shapes[f"{p}.router.proj.weight"] = (experts, hidden)
        shapes[f"{p}.router.scale"] = (hidden,)
        shapes[f"{p}.router.per_expert_scale"] = (experts,)
        shapes[f"{p}.experts.gate_up_proj"] = (experts, 2 * t["moe_intermediate_size"], hidden)
        shapes[f"{p}.experts.down_proj"] = (experts, hidden, t["moe_intermediate_size"])
        shapes[f"{p}.mlp.gate_proj.weight"] = (t["intermediate_size"], hidden)
        shapes[f"{p}.mlp.up_proj.weight"] = (t["intermediate_size"], hidden)
        shapes[f"{p}.mlp.down_proj.weight"] = (hidden, t["intermediate_size"])
    return shapes


def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """Small random weights (norms and scales near one, as trained ones are), in bf16."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in tensor_shapes().items():
        if name.endswith(("norm.weight", "layer_scalar", "router.scale", "per_expert_scale")):
            values = 1.0 + 0.05 * rng.standard_normal(shape)
        else:
            values = 0.02 * rng.standard_normal(shape)
        out[name] = values.astype(np.float32).astype(ml_dtypes.bfloat16)
    return out


def corpus(seed: int = 0, lines: int = 2000) -> list[str]:
    """Arithmetic questions and answers, GSM8K-like, for the tokenizer's merges."""
    rng = random.Random(seed)
    names = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana"]
    things = ["apples", "books", "coins", "marbles", "pencils", "stamps", "shells", "cards"]
    out = []
    for _ in range(lines):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        who, what = rng.choice(names), rng.choice(things)
        out.append(f"{who} has {a} {what} and buys {b} more. How many {what} does {who} have now?")
        out.append(f"{who} has {a} + {b} = {a + b} {what}. #### {a + b}")
    out.append("<reasoning> </reasoning> <answer> </answer> You are given a problem. Think about it.")
    return out


def tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TEXT["vocab_size"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def config() -> dict[str, object]:
    text = {
        **{k: v for k, v in TEXT.items()},
        "model_type": "gemma4_text",
        "layer_types": layer_types(),
        "attention_k_eq_v": True,
        "enable_moe_block": True,
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": 30.0,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": True,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
        "dtype": "bfloat16",
    }
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "text_config": text,
        "tie_word_embeddings": True,
        "dtype": "bfloat16",
    }


def write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    weights = tensors()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    # An index as a sharded repository has one (to_maxtext reads the index when there is one).
    index = {
        "metadata": {"total_size": sum(a.nbytes for a in weights.values())},
        "weight_map": dict.fromkeys(sorted(weights), "model.safetensors"),
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    (folder / "config.json").write_text(json.dumps(config(), indent=1, sort_keys=True) + "\n")
    tokenizer().save(str(folder / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 4096,
    }
    (folder / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=1, sort_keys=True) + "\n"
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: make_tiny_gemma4.py FOLDER")
    write(Path(sys.argv[1]))
