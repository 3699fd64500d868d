"""Llama (``LlamaForCausalLM``): a pre-norm decoder with RoPE, RMSNorm, SwiGLU and grouped KV heads.

Only the default rotary embedding is reproduced: ``llama_config`` refuses any ``rope_scaling`` /
``rope_parameters`` type but ``default``, a head size other than ``hidden_size / heads``, and an
MLP bias that differs from the attention bias (attnlab has one ``bias`` switch).
"""

from __future__ import annotations

from attnlab.models.hf.config_keys import require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import Table, attention, ffn, layers, tokens_and_head
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos


def llama_config(c: dict, cls: str) -> GPTConfig:
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    require(rope, rope_type="default", type="default")
    require(c, hidden_act="silu", mlp_bias=c.get("attention_bias", False))
    d, heads = c["hidden_size"], c["num_attention_heads"]
    require(c, head_dim=d // heads)
    return GPTConfig(
        vocab_size=c["vocab_size"],
        d_model=d,
        n_layers=c["num_hidden_layers"],
        n_heads=heads,
        n_kv_heads=c.get("num_key_value_heads") or heads,
        d_ff=c["intermediate_size"],
        activation="swiglu",
        norm="rmsnorm",
        norm_eps=c["rms_norm_eps"],
        norm_first=True,
        bias=c.get("attention_bias", False),
        dropout=0.0,
        attn_dropout=c.get("attention_dropout", 0.0),
        max_seq_len=c["max_position_embeddings"],
        tie_embeddings=c.get("tie_word_embeddings", False),
        pos=RopePos(rope_base=rope.get("rope_theta", c.get("rope_theta", 10000.0))),
    )


def llama_weights(cfg: GPTConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"layers.{i}."
        return {
            **attention(
                "self_attn", p + "self_attn.", "q_proj", "k_proj", "v_proj", "o_proj", p + "input_layernorm"
            ),
            **ffn(
                p + "mlp.up_proj", p + "mlp.down_proj", p + "post_attention_layernorm", p + "mlp.gate_proj"
            ),
        }

    return {
        **tokens_and_head(cfg, "embed.tokens", "embed_tokens"),
        **layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "norm",
    }


register(
    Architecture(
        model_type="llama",
        classes=("LlamaForCausalLM",),
        prefix="model.",
        config=llama_config,
        weights=llama_weights,
        ignore=(r"rotary_emb\.inv_freq$",),  # computed from rope_theta
    )
)
