"""DeepSeek-V3 (``DeepseekV3ForCausalLM``) with every layer dense: multi-head latent attention in a
Llama-like pre-norm block (RMSNorm, SwiGLU).

Each layer's attention is attnlab's latent mixer (``model.mixer=latent``), its sizes read into
``model.mixers`` (``q_lora_rank``, null for a plain query projection; ``kv_lora_rank``,
``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``; ``rope_interleave``: DeepSeek's
checkpoints store the rotary dimensions as interleaved pairs). Its parameters keep Hugging Face's
names but for ``o_proj``, here ``out_proj``.

Refused in one line, each naming the config key: mixture-of-experts layers (``first_k_dense_replace``
below ``num_hidden_layers``: attnlab builds no experts), a RoPE other than ``default`` (DeepSeek's YaRN
also rescales the softmax, which the latent mixer does not), ``num_key_value_heads`` other than the
heads (MLA expands a key and value per head; Hugging Face's own attention breaks otherwise) and
``attention_bias`` (its MLP has no bias, attnlab has one ``bias`` switch). Multi-token-prediction
modules are not built (Hugging Face builds none either).
"""

from __future__ import annotations

from attnlab.blocks.ffn import ffn_width
from attnlab.models.hf.config_keys import require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.llama import rope_config, rope_export
from attnlab.models.hf.spec import Table, ffn, layers, tokens_and_head
from attnlab.schema.mixers import Mixer, MixerSizes
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos, RopeScalingKind

DENSE_DEFAULT = 3  # DeepseekV3Config's first_k_dense_replace when config.json has none


def dense_layers(c: dict) -> None:
    """Refuse a config whose layers from ``first_k_dense_replace`` on are mixture-of-experts."""
    n, dense = c["num_hidden_layers"], c.get("first_k_dense_replace", DENSE_DEFAULT)
    if dense < n:
        which = f"layer {dense}" if dense == n - 1 else f"layers {dense} to {n - 1}"
        raise ValueError(
            f"first_k_dense_replace={dense} makes {which} mixture-of-experts, which attnlab does not "
            f"build (a dense model needs first_k_dense_replace={n})"
        )


def deepseek_v3_config(c: dict, cls: str) -> GPTConfig:
    require(c, hidden_act="silu", attention_bias=False, num_key_value_heads=c["num_attention_heads"])
    dense_layers(c)
    pos = rope_config(c)
    if pos.rope_scaling != RopeScalingKind.none:
        raise ValueError(
            f"rope_parameters.rope_type={pos.rope_scaling.value!r} is not supported for DeepSeek-V3 (its "
            "latent attention rotates with an unscaled RoPE in attnlab: rope_type 'default')"
        )
    require({"partial_rotary_factor": pos.rope_fraction}, partial_rotary_factor=1.0)
    return GPTConfig(
        vocab_size=c["vocab_size"],
        d_model=c["hidden_size"],
        n_layers=c["num_hidden_layers"],
        n_heads=c["num_attention_heads"],
        d_ff=c["intermediate_size"],
        activation="swiglu",
        norm="rmsnorm",
        norm_eps=c["rms_norm_eps"],
        bias=False,
        dropout=0.0,
        attn_dropout=c.get("attention_dropout", 0.0),
        max_seq_len=c["max_position_embeddings"],
        tie_embeddings=c.get("tie_word_embeddings", False),
        embed_scale=False,
        pos=RopePos(rope_base=pos.rope_base),
        mixer=Mixer.latent,
        mixers=MixerSizes(
            kv_lora_rank=c["kv_lora_rank"],
            q_lora_rank=c.get("q_lora_rank"),
            qk_nope_head_dim=c["qk_nope_head_dim"],
            qk_rope_head_dim=c["qk_rope_head_dim"],
            v_head_dim=c["v_head_dim"],
            rope_interleave=c.get("rope_interleave", True),
        ),
    )


def deepseek_v3_export(cfg: GPTConfig) -> dict:
    """The config.json of ``cfg`` as an all-dense DeepSeek-V3 (the inverse of ``deepseek_v3_config``)."""
    sizes = cfg.mixers.resolved(cfg.n_heads, cfg.d_model // cfg.n_heads, {Mixer.latent})
    return {
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "first_k_dense_replace": cfg.n_layers,  # every layer dense: no experts are built
        "num_nextn_predict_layers": 0,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_heads,
        "intermediate_size": ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult),
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": False,  # what it can hold: a model with biases reads back without (named)
        "attention_dropout": cfg.attn_dropout,
        "max_position_embeddings": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
        # unscaled, whole: what it can hold (a model that scales its RoPE reads back without, named)
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_export(cfg)["rope_theta"]},
        **sizes,
        "pad_token_id": None,
        "bos_token_id": None,  # its defaults (0, 1) may be no special token of the exported vocabulary
        "eos_token_id": None,
    }


def deepseek_v3_weights(cfg: GPTConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"layers.{i}."
        a = p + "self_attn."
        if cfg.mixers.q_lora_rank is None:
            queries: Table = {"self_attn.fn.q_proj": a + "q_proj"}
        else:
            queries = {f"self_attn.fn.{n}": a + n for n in ("q_a_proj", "q_a_layernorm", "q_b_proj")}
        latents = ("kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj")
        return {
            **queries,
            **{f"self_attn.fn.{n}": a + n for n in latents},
            "self_attn.fn.out_proj": a + "o_proj",
            "self_attn.norm": p + "input_layernorm",
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
        model_type="deepseek_v3",
        classes=("DeepseekV3ForCausalLM",),
        prefix="model.",
        config=deepseek_v3_config,
        weights=deepseek_v3_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),
        export=deepseek_v3_export,
        family="gpt",
    )
)
