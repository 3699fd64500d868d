"""GPT-2 (``GPT2LMHeadModel``, ``GPT2Model``): a pre-norm decoder with learned positions.

Its Conv1D layers store weights transposed, and q, k, v already fused in one ``c_attn``.
"""

from __future__ import annotations

from attnlab.blocks.ffn import ffn_width
from attnlab.models.hf.config_keys import activation, hf_activation, require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import Table, Transposed, ffn, layers, tokens_and_head
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import LearnedPos


def gpt2_config(c: dict, cls: str) -> GPTConfig:
    require(c, scale_attn_by_inverse_layer_idx=False, scale_attn_weights=True, add_cross_attention=False)
    return GPTConfig(
        vocab_size=c["vocab_size"],
        d_model=c["n_embd"],
        n_layers=c["n_layer"],
        n_heads=c["n_head"],
        d_ff=c.get("n_inner") or 4 * c["n_embd"],
        activation=activation(c["activation_function"]),
        norm="layernorm",
        norm_eps=c["layer_norm_epsilon"],
        norm_first=True,
        dropout=c.get("resid_pdrop", 0.1),
        attn_dropout=c.get("attn_pdrop", 0.1),
        max_seq_len=c["n_positions"],
        tie_embeddings=c.get("tie_word_embeddings", True),
        embed_scale=False,
        pos=LearnedPos(),
    )


def gpt2_export(cfg: GPTConfig) -> dict:
    """The config.json of ``cfg`` as GPT-2 (the inverse of ``gpt2_config``)."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": cfg.vocab_size,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "n_inner": ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult),
        "activation_function": hf_activation(cfg.activation),
        "layer_norm_epsilon": cfg.norm_eps,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.attn_dropout,
        "n_positions": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
    }


def gpt2_weights(cfg: GPTConfig) -> Table:
    def layer(i: int) -> Table:
        h = f"h.{i}."
        return {
            "self_attn.norm": h + "ln_1",
            "self_attn.fn.qkv_proj": Transposed(h + "attn.c_attn"),
            "self_attn.fn.out_proj": Transposed(h + "attn.c_proj"),
            **ffn(Transposed(h + "mlp.c_fc"), Transposed(h + "mlp.c_proj"), h + "ln_2"),
        }

    return {
        **tokens_and_head(cfg, "embed.tokens", "wte"),
        "embed.pos": "wpe",
        **layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "ln_f",
    }


register(
    Architecture(
        model_type="gpt2",
        classes=("GPT2LMHeadModel", "GPT2Model"),
        prefix="transformer.",
        config=gpt2_config,
        weights=gpt2_weights,
        ignore=(r"\.attn\.(masked_)?bias$",),  # causal-mask buffers of older checkpoints
        export=gpt2_export,
        family="gpt",
    )
)
