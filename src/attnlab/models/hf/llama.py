"""Llama (``LlamaForCausalLM``): a pre-norm decoder with RoPE, RMSNorm, SwiGLU and grouped KV heads.

RoPE scaling is read from ``rope_parameters`` (transformers 5) or ``rope_scaling`` (4.x, whose older
files spell the kind ``type``): ``default``, ``linear``, ``dynamic`` (attnlab's ``ntk``) and ``yarn``
are reproduced; any other kind (``llama3``, ``longrope``, ...) is refused, as are a head size other
than ``hidden_size / heads`` and an MLP bias that differs from the attention bias (attnlab has one
``bias`` switch). ``partial_rotary_factor`` is read into ``model.pos.rope_fraction`` (partial RoPE) for
the architectures that apply it (Phi-3, ``models.hf.phi3``); ``LlamaForCausalLM`` itself rotates every
dimension whatever the factor says (transformers 5), so a Llama config with a factor below 1 is refused
rather than loaded into a model that computes something else.
"""

from __future__ import annotations

from attnlab.blocks.ffn import ffn_width
from attnlab.models.hf.config_keys import require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import Table, attention, ffn, layers, tokens_and_head
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos, RopeScalingKind

ROPE_TYPES = {"default": "none", "linear": "linear", "dynamic": "ntk", "yarn": "yarn"}  # HF -> attnlab


def rope_config(c: dict) -> RopePos:
    """The RoPE settings of a Llama config.json: base, and scaling with its parameters."""
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope_type={kind!r} is not supported (attnlab reproduces {', '.join(ROPE_TYPES)})")
    fraction = float(rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)))
    base = rope.get("rope_theta", c.get("rope_theta", 10000.0))
    if kind == "default":
        return RopePos(rope_base=base, rope_fraction=fraction)
    original = rope.get("original_max_position_embeddings") if kind == "yarn" else None
    factor = rope.get("factor")
    if factor is None and original:  # YaRN as DeepSeek-V3 writes it: the stretch is implied by the lengths
        factor = c["max_position_embeddings"] / original
    if factor is None:
        raise KeyError("rope_parameters.factor")
    return RopePos(
        rope_base=base,
        rope_scaling=RopeScalingKind(ROPE_TYPES[kind]),
        rope_factor=float(factor),
        rope_original_max_len=original or c["max_position_embeddings"],
        rope_beta_fast=float(rope.get("beta_fast") or 32.0),
        rope_beta_slow=float(rope.get("beta_slow") or 1.0),
        rope_attn_factor=rope.get("attention_factor"),
        rope_mscale=float(rope.get("mscale") or 0.0),
        rope_mscale_all_dim=float(rope.get("mscale_all_dim") or 0.0),
        rope_truncate=bool(rope.get("truncate", True)),
        rope_fraction=fraction,
    )


def rope_export(cfg: GPTConfig) -> dict:
    """``rope_parameters`` of ``cfg`` (the inverse of ``rope_config``); an unscaled default for a
    model without RoPE, which export then names as the difference."""
    pos = cfg.pos
    if not isinstance(pos, RopePos):
        return {"rope_type": "default", "rope_theta": 10000.0}
    out: dict = {"rope_theta": pos.rope_base}
    if pos.rope_fraction != 1.0:
        out["partial_rotary_factor"] = pos.rope_fraction
    if pos.rope_scaling == RopeScalingKind.none:
        return {**out, "rope_type": "default"}
    kind = next(hf for hf, ours in ROPE_TYPES.items() if ours == str(pos.rope_scaling))
    out |= {"rope_type": kind, "factor": pos.rope_factor}
    if kind == "yarn":
        out |= {
            "original_max_position_embeddings": pos.rope_original_max_len or cfg.max_seq_len,
            "beta_fast": pos.rope_beta_fast,
            "beta_slow": pos.rope_beta_slow,
            "attention_factor": pos.rope_attn_factor,
            "mscale": pos.rope_mscale,
            "mscale_all_dim": pos.rope_mscale_all_dim,
            "truncate": pos.rope_truncate,
        }
    return out


def llama_export(cfg: GPTConfig, model_type: str = "llama", cls: str = "LlamaForCausalLM") -> dict:
    """The config.json of ``cfg`` as Llama (the inverse of ``llama_config``); Mistral and Qwen3 add
    their keys to it."""
    return {
        "model_type": model_type,
        "architectures": [cls],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads or cfg.n_heads,
        "head_dim": cfg.d_model // cfg.n_heads,
        "intermediate_size": ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult),
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.bias,
        "mlp_bias": cfg.bias,
        "attention_dropout": cfg.attn_dropout,
        "max_position_embeddings": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
        "rope_parameters": rope_export(cfg),
    }


def llama_config(c: dict, cls: str, partial_rope: bool = False) -> GPTConfig:
    """``partial_rope``: the architecture applies ``partial_rotary_factor`` (Llama does not)."""
    require(c, hidden_act="silu", mlp_bias=c.get("attention_bias", False))
    pos = rope_config(c)
    if pos.rope_fraction != 1.0 and not partial_rope:
        raise ValueError(
            f"partial_rotary_factor={pos.rope_fraction} is not applied by {cls} (it rotates every "
            "dimension); Phi3ForCausalLM applies it"
        )
    d, heads = c["hidden_size"], c["num_attention_heads"]
    if c.get("head_dim") is not None:  # null (Mistral's default) means d // heads
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
        embed_scale=False,
        pos=pos,
    )


def llama_weights(cfg: GPTConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"layers.{i}."
        return {
            **attention(
                "self_attn",
                p + "self_attn.",
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                p + "input_layernorm",
                heads=(cfg.n_heads, cfg.n_kv_heads or cfg.n_heads),
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
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),  # computed from rope_theta and the scaling
        export=llama_export,
        family="gpt",
    )
)
