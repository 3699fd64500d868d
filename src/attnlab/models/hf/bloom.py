"""BLOOM (``BloomForCausalLM``, ``BloomModel``): a pre-norm decoder with ALiBi and an embedding norm.

Its fused q/k/v rows are interleaved per head (``PerHeadQKV``); older configs spell the sizes
``n_embed`` / ``n_layer`` / ``n_head``, newer ones ``hidden_size`` / ``num_hidden_layers`` / ...
"""

from __future__ import annotations

from attnlab.models.hf.config_keys import get, require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import PerHeadQKV, Table, ffn, layers, tokens_and_head
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import AlibiPos


def bloom_config(c: dict, cls: str) -> GPTConfig:
    require(c, apply_residual_connection_post_layernorm=False)
    d = get(c, "hidden_size", "n_embed")
    return GPTConfig(
        vocab_size=c["vocab_size"],
        d_model=d,
        n_layers=get(c, "n_layer", "num_hidden_layers"),
        n_heads=get(c, "n_head", "num_attention_heads"),
        d_ff=4 * d,
        activation="gelu_tanh",
        norm="layernorm",
        norm_eps=c["layer_norm_epsilon"],
        norm_first=True,
        embed_norm=True,
        dropout=c.get("hidden_dropout", 0.0),
        attn_dropout=c.get("attention_dropout", 0.0),
        max_seq_len=c.get("seq_length") or 2048,
        tie_embeddings=c.get("tie_word_embeddings", True),
        embed_scale=False,
        pos=AlibiPos(),
    )


def bloom_export(cfg: GPTConfig) -> dict:
    """The config.json of ``cfg`` as BLOOM (the inverse of ``bloom_config``)."""
    return {
        "model_type": "bloom",
        "architectures": ["BloomForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "layer_norm_epsilon": cfg.norm_eps,
        "hidden_dropout": cfg.dropout,
        "attention_dropout": cfg.attn_dropout,
        "seq_length": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
        "apply_residual_connection_post_layernorm": False,
    }


def bloom_weights(cfg: GPTConfig) -> Table:
    def layer(i: int) -> Table:
        h = f"h.{i}."
        return {
            "self_attn.norm": h + "input_layernorm",
            "self_attn.fn.qkv_proj": PerHeadQKV(h + "self_attention.query_key_value", n_heads=cfg.n_heads),
            "self_attn.fn.out_proj": h + "self_attention.dense",
            **ffn(h + "mlp.dense_h_to_4h", h + "mlp.dense_4h_to_h", h + "post_attention_layernorm"),
        }

    return {
        **tokens_and_head(cfg, "embed.tokens", "word_embeddings"),
        "embed.norm": "word_embeddings_layernorm",
        **layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "ln_f",
    }


register(
    Architecture(
        model_type="bloom",
        classes=("BloomForCausalLM", "BloomModel"),
        prefix="transformer.",
        config=bloom_config,
        weights=bloom_weights,
        export=bloom_export,
        family="gpt",
    )
)
