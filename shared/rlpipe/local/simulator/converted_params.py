"""The arrays ``to_maxtext`` saves in step 0's ``items``, by name, for a Gemma 4 model.

The conversion saves a ``TrainState`` whose ``step`` is 0 and whose parameters sit under
``params.params`` (maxtext-0.2.4 ``checkpoint_conversion/utils/utils.py:1296-1298``), one zarr
array per leaf. A Gemma 4 decoder's leaves, per unscanned layer ``decoder.layers_<i>``, are
MaxText's own names in ``GEMMA4_MAXTEXT_TO_HF_PARAM_MAPPING``
(``checkpoint_conversion/utils/param_mapping.py:2985-3047``; ``-`` there is ``.`` in a saved
name): attention, its norms and the layer scalar always, then either a dense MLP (one expert) or
the mixture-of-experts block (``num_experts`` > 1: gemma4-26b has 128,
``configs/models/gemma4-26b.yml:44``; gemma4-31b sets none, so one).

Written from MaxText's sources, not from rlpipe's layout code. The programs tier holds the names
to a real conversion of the gemma4-26b fixture (``tests/programs/test_programs_simulator.py``): every name
here is one the real program writes, and every kind of array it writes is here. A model name not
known here gets the dense layer (an approximation, never checked). Tiny contents, real names: the
simulator writes two layers where the model has tens.
"""

from __future__ import annotations

STEP = "step"  # the TrainState's step, saved beside the parameters
PARAMS = "params.params"
TOP_LEVEL = ("token_embedder.embedding", "decoder.decoder_norm.scale")
ATTENTION = (
    "self_attention.query.kernel",
    "self_attention.key.kernel",
    "self_attention.value.kernel",
    "self_attention.out.kernel",
    "self_attention.query_norm.scale",
    "self_attention.key_norm.scale",
    "pre_self_attention_norm.scale",
    "post_self_attention_norm.scale",
    "pre_ffw_norm.scale",
    "post_ffw_norm.scale",
    "layer_scalar",
)
DENSE_MLP = ("mlp.wi_0.kernel", "mlp.wi_1.kernel", "mlp.wo.kernel")
MIXTURE_OF_EXPERTS_MLP = (
    "mlp.pre_feedforward_layernorm_2.scale",
    "mlp.post_feedforward_layernorm_1.scale",
    "mlp.post_feedforward_layernorm_2.scale",
    "mlp.pre_forward_scale_2",
    "mlp.moe_block.MoeBlock_0.gate.kernel",
    "mlp.moe_block.MoeBlock_0.wi_0",
    "mlp.moe_block.MoeBlock_0.wi_1",
    "mlp.moe_block.MoeBlock_0.wo",
    "mlp.moe_block.MoeBlock_0.per_expert_scale",
    "mlp.moe_block.shared_experts.wi_0.kernel",
    "mlp.moe_block.shared_experts.wi_1.kernel",
    "mlp.moe_block.shared_experts.wo.kernel",
)
# Model names whose MaxText config sets num_experts > 1 (configs/models/<name>.yml).
MIXTURE_OF_EXPERTS = frozenset({"gemma4-26b"})
SIMULATED_LAYERS = 2


def layer_arrays(model_name: str | None) -> tuple[str, ...]:
    """One decoder layer's arrays, relative to the layer."""
    mlp = MIXTURE_OF_EXPERTS_MLP if model_name in MIXTURE_OF_EXPERTS else DENSE_MLP
    return (*ATTENTION, *mlp)


def converted_arrays(model_name: str | None, scan_layers: bool) -> list[str]:
    """Every array the simulated conversion saves, as Orbax names them in ``items``."""
    layers = ["layers"] if scan_layers else [f"layers_{i}" for i in range(SIMULATED_LAYERS)]
    per_layer = [f"decoder.{layer}.{name}" for layer in layers for name in layer_arrays(model_name)]
    return [STEP, *(f"{PARAMS}.{name}" for name in (*TOP_LEVEL, *per_layer))]
