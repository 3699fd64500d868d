"""DiffLlama (``DiffLlamaForCausalLM``): Llama's block with differential attention.

Every layer's attention is attnlab's differential mixer (``model.mixer=differential``): Llama's q, k,
v and o projections, and per layer the four λ vectors (``lambda_q1``, ``lambda_k1``, ``lambda_q2``,
``lambda_k2``) read as they are; λ_init follows from the layer's place, and the per-pair norm has no
weights. ``lambda_std_dev`` only draws the λ vectors at initialisation. RoPE, head size and the rest
are read as for Llama; ``attention_bias`` is refused (DiffLlama's MLP has no bias, attnlab has one
``bias`` switch).
"""

from __future__ import annotations

from dataclasses import replace

from attnlab.models.hf.config_keys import require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.llama import llama_config, llama_export, llama_weights
from attnlab.models.hf.spec import Raw, Table, layers
from attnlab.schema.mixers import Mixer
from attnlab.schema.model import GPTConfig

LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def diffllama_config(c: dict, cls: str) -> GPTConfig:
    require(c, attention_bias=False)
    return replace(llama_config(c, cls), mixer=Mixer.differential)


def diffllama_export(cfg: GPTConfig) -> dict:
    out = llama_export(cfg, "diffllama", "DiffLlamaForCausalLM")
    del out["mlp_bias"]  # not a DiffLlama key: its MLP never has a bias
    # attention_bias: what it can hold (a model with biases reads back without, and export names it)
    return {**out, "attention_bias": False, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None}


def diffllama_weights(cfg: GPTConfig) -> Table:
    def lambdas(i: int) -> Table:
        return {f"self_attn.fn.{n}": Raw(f"layers.{i}.self_attn.{n}") for n in LAMBDAS}

    return {**llama_weights(cfg), **layers("stack.layers", cfg.n_layers, lambdas)}


register(
    Architecture(
        model_type="diffllama",
        classes=("DiffLlamaForCausalLM",),
        prefix="model.",
        config=diffllama_config,
        weights=diffllama_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),
        export=diffllama_export,
        family="gpt",
    )
)
