"""Gemma 2 (``Gemma2ForCausalLM``): soft-capped attention and logits, alternating windows, sandwich norms.

What Gemma 2 adds to Llama's block, each an attnlab setting:

- attention logits soft-capped, ``attn_logit_softcapping * tanh(s / cap)``: ``model.attn_softcap``
  (on the explicit path: the fused SDPA kernels cannot apply it), and the final logits likewise,
  ``final_logit_softcapping``: ``model.logit_softcap``;
- ``layer_types`` alternating ``sliding_attention`` and ``full_attention``: ``model.layout``;
- a norm before and after each sublayer (``pre_feedforward_layernorm``, ``post_attention_layernorm``,
  ``post_feedforward_layernorm``): ``model.post_norms``; its RMSNorm multiplies by ``1 + weight``,
  read as our weight plus one;
- queries scaled by ``query_pre_attn_scalar ** -0.5``: ``model.attn_scale``; token embeddings
  multiplied by ``sqrt(hidden_size)``: ``model.embed_scale``; a tanh-GELU gated MLP: ``geglu_tanh``.

A head size other than ``hidden_size / heads`` is refused, as for Qwen3.
"""

from __future__ import annotations

from attnlab.blocks.ffn import ffn_width
from attnlab.models.hf.config_keys import require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.layouts import layer_types, read_layout
from attnlab.models.hf.llama import rope_config, rope_export
from attnlab.models.hf.spec import PlusOne, Table, attention, ffn, layers, tokens_and_head
from attnlab.schema.model import AttnBackend, GPTConfig


def gemma2_config(c: dict, cls: str) -> GPTConfig:
    require(c, hidden_activation="gelu_pytorch_tanh", attention_bias=False)
    d, heads = c["hidden_size"], c["num_attention_heads"]
    require(c, head_dim=d // heads)
    n = c["num_hidden_layers"]
    return GPTConfig(
        vocab_size=c["vocab_size"],
        d_model=d,
        n_layers=n,
        n_heads=heads,
        n_kv_heads=c.get("num_key_value_heads") or heads,
        d_ff=c["intermediate_size"],
        activation="geglu_tanh",
        norm="rmsnorm",
        norm_eps=c["rms_norm_eps"],
        post_norms=True,
        bias=False,
        dropout=0.0,
        attn_dropout=c.get("attention_dropout", 0.0),
        attn_scale=None if c["query_pre_attn_scalar"] == d // heads else c["query_pre_attn_scalar"] ** -0.5,
        attn_softcap=c.get("attn_logit_softcapping"),
        attn_backend=AttnBackend.explicit if c.get("attn_logit_softcapping") else AttnBackend.sdpa,
        logit_softcap=c.get("final_logit_softcapping"),
        max_seq_len=c["max_position_embeddings"],
        tie_embeddings=c.get("tie_word_embeddings", True),
        embed_scale=True,
        pos=rope_config(c),
        **read_layout(n, c.get("layer_types"), c.get("sliding_window")),
    )


def gemma2_export(cfg: GPTConfig) -> dict:
    types = layer_types(cfg)
    return {
        "model_type": "gemma2",
        "architectures": ["Gemma2ForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.d_model // cfg.n_heads,
        "intermediate_size": ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult),
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.bias,
        "attention_dropout": cfg.attn_dropout,
        # an integer in Gemma2Config: a scale it cannot hold reads back as another one (export names it)
        "query_pre_attn_scalar": cfg.d_model // cfg.n_heads
        if cfg.attn_scale is None
        else round(cfg.attn_scale**-2),
        "attn_logit_softcapping": cfg.attn_softcap,
        "final_logit_softcapping": cfg.logit_softcap,
        "max_position_embeddings": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
        "layer_types": types,
        "sliding_window": cfg.attn_window if "sliding_attention" in types else None,
        "rope_parameters": rope_export(cfg),
    }


def gemma2_weights(cfg: GPTConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"layers.{i}."
        heads = (cfg.n_heads, cfg.n_kv_heads or cfg.n_heads)
        attn = attention("self_attn", p + "self_attn.", "q_proj", "k_proj", "v_proj", "o_proj", heads=heads)
        return {
            **attn,
            "self_attn.norm": PlusOne(p + "input_layernorm"),
            "self_attn.post_norm": PlusOne(p + "post_attention_layernorm"),
            **ffn(
                p + "mlp.up_proj",
                p + "mlp.down_proj",
                PlusOne(p + "pre_feedforward_layernorm"),
                p + "mlp.gate_proj",
            ),
            "ffn.post_norm": PlusOne(p + "post_feedforward_layernorm"),
        }

    return {
        **tokens_and_head(cfg, "embed.tokens", "embed_tokens"),
        **layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": PlusOne("norm"),
    }


register(
    Architecture(
        model_type="gemma2",
        classes=("Gemma2ForCausalLM",),
        prefix="model.",
        config=gemma2_config,
        weights=gemma2_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$", r"embed_tokens\.embed_scale$"),
        export=gemma2_export,
        family="gpt",
    )
)
