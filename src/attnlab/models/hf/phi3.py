"""Phi-3 (``Phi3ForCausalLM``): Llama's block with fused projections and partial RoPE.

Queries, keys and values come from one ``qkv_proj`` (attnlab's own fused layout: queries, then keys,
then values) and the gated MLP's gate and up projections from one ``gate_up_proj`` (gate rows first).
``partial_rotary_factor`` (in ``rope_parameters``, or at the top level of older files) rotates only
the first ``int(head_dim * factor)`` dimensions of each head: ``model.pos.rope_fraction``. The
``longrope`` scaling of the long-context checkpoints is refused, as is a sliding window.
"""

from __future__ import annotations

from attnlab.models.hf.config_keys import require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.llama import llama_config, llama_export
from attnlab.models.hf.spec import Part, Table, ffn, layers, tokens_and_head
from attnlab.schema.model import GPTConfig


def phi3_config(c: dict, cls: str) -> GPTConfig:
    require(c, sliding_window=None)
    return llama_config({**c, "attention_bias": False, "mlp_bias": False}, cls, partial_rope=True)


def phi3_export(cfg: GPTConfig) -> dict:
    out = llama_export(cfg, "phi3", "Phi3ForCausalLM")
    for key in ("head_dim", "attention_bias", "mlp_bias"):
        out.pop(key)
    return {**out, "sliding_window": None, "pad_token_id": None}  # its default pad is token 32000


def phi3_weights(cfg: GPTConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"layers.{i}."
        return {
            "self_attn.fn.qkv_proj": p + "self_attn.qkv_proj",
            "self_attn.fn.out_proj": p + "self_attn.o_proj",
            "self_attn.norm": p + "input_layernorm",
            **ffn(
                Part(p + "mlp.gate_up_proj", 1, 2),
                p + "mlp.down_proj",
                p + "post_attention_layernorm",
                Part(p + "mlp.gate_up_proj", 0, 2),
            ),
        }

    return {
        **tokens_and_head(cfg, "embed.tokens", "embed_tokens"),
        **layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "norm",
    }


register(
    Architecture(
        model_type="phi3",
        classes=("Phi3ForCausalLM",),
        prefix="model.",
        config=phi3_config,
        weights=phi3_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),
        export=phi3_export,
        family="gpt",
    )
)
