"""T5 (``T5ForConditionalGeneration``, v1.0 and v1.1 / gated): a pre-norm encoder-decoder.

RMSNorm, no biases, unscaled attention and a relative position bias held by the first layer of each
stack; ``feed_forward_proj`` picks a plain or gated FFN.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from attnlab.blocks.ffn import ffn_width
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import Table, Tied, attention, ffn, layers
from attnlab.schema.model import Seq2SeqConfig
from attnlab.schema.pos import RelativePos


def t5_activation(feed_forward_proj: str) -> str:
    """attnlab's activation for T5's ``feed_forward_proj`` (``relu``, ``gated-gelu``, ...)."""
    gated, _, act = feed_forward_proj.rpartition("-")
    act = "gelu_new" if feed_forward_proj == "gated-gelu" else act  # as transformers reads it
    ours = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "silu": "silu"}.get(act)
    if gated == "gated":
        ours = {"gelu": "geglu", "gelu_tanh": "geglu_tanh", "silu": "swiglu"}.get(ours)
    if ours is None or gated not in ("", "gated"):
        raise ValueError(
            f"feed_forward_proj={feed_forward_proj!r} is not supported; "
            "attnlab maps relu, gelu, gelu_new, silu, gated-gelu, gated-gelu_new, gated-silu"
        )
    return ours


def t5_config(c: dict, cls: str) -> Seq2SeqConfig:
    if c["d_kv"] * c["num_heads"] != c["d_model"]:
        raise ValueError(
            f"d_kv={c['d_kv']} x num_heads={c['num_heads']} != d_model={c['d_model']}; "
            "attnlab's attention needs head_dim = d_model / n_heads"
        )
    tied = c.get("tie_word_embeddings", True)
    return Seq2SeqConfig(
        vocab_size=c["vocab_size"],
        d_model=c["d_model"],
        n_layers=c["num_layers"],
        n_decoder_layers=c.get("num_decoder_layers") or c["num_layers"],
        n_heads=c["num_heads"],
        d_ff=c["d_ff"],
        activation=t5_activation(c["feed_forward_proj"]),
        norm="rmsnorm",
        norm_eps=c["layer_norm_epsilon"],
        norm_first=True,
        bias=False,
        dropout=c["dropout_rate"],
        attn_dropout=c["dropout_rate"],
        ffn_dropout=c["dropout_rate"],
        attn_scale=1.0,
        max_seq_len=c.get("n_positions", 512),
        tie_embeddings=tied,
        embed_scale=False,
        tied_output_scale=c.get("scale_decoder_outputs", tied),
        share_embeddings=True,
        pos=RelativePos(
            num_buckets=c["relative_attention_num_buckets"],
            max_distance=c["relative_attention_max_distance"],
        ),
    )


def t5_tying_from_weights(c: dict, tensors: Mapping[str, Tensor]) -> dict:
    """``c`` with ``tie_word_embeddings: false`` where the weights hold an ``lm_head.weight`` of its own
    (not equal to ``shared.weight``). transformers 5 writes every T5's config.json as tied, T5 v1.1's
    too (``scale_decoder_outputs`` tells the versions apart), and keeps such a head untied on load."""
    head, table = tensors.get("lm_head.weight"), tensors.get("shared.weight")
    if head is None or table is None or torch.equal(head, table):
        return c
    return {**c, "tie_word_embeddings": False}


# attnlab -> feed_forward_proj (the inverse of t5_activation; exact GeGLU has no spelling)
T5_FFN = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "silu"}
T5_FFN |= {"geglu_tanh": "gated-gelu", "swiglu": "gated-silu"}


def t5_export(cfg: Seq2SeqConfig) -> dict:
    """The config.json of ``cfg`` as T5 (the inverse of ``t5_config``)."""
    return {
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "d_kv": cfg.d_model // cfg.n_heads,
        "num_heads": cfg.n_heads,
        "num_layers": cfg.n_layers,
        "num_decoder_layers": cfg.n_decoder_layers or cfg.n_layers,
        "d_ff": ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult),
        "feed_forward_proj": T5_FFN.get(str(cfg.activation), "relu"),
        "layer_norm_epsilon": cfg.norm_eps,
        "dropout_rate": cfg.dropout,
        "n_positions": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
        "scale_decoder_outputs": cfg.tied_output_scale,
        "relative_attention_num_buckets": getattr(cfg.pos, "num_buckets", 32),
        "relative_attention_max_distance": getattr(cfg.pos, "max_distance", 128),
        "is_encoder_decoder": True,
    }


def t5_weights(cfg: Seq2SeqConfig) -> Table:
    gated = cfg.activation in ("geglu", "geglu_tanh", "swiglu")

    def layer(stack: str, i: int) -> Table:
        p = f"{stack}.block.{i}.layer."
        cross = attention("cross_attn", p + "1.EncDecAttention.", "q", "k", "v", "o", p + "1.layer_norm")
        n = 2 if stack == "decoder" else 1  # the feed-forward sublayer comes after cross-attention
        mlp, norm = f"{p}{n}.DenseReluDense.", f"{p}{n}.layer_norm"
        if gated:
            feed_forward = ffn(mlp + "wi_1", mlp + "wo", norm, mlp + "wi_0")
        else:
            feed_forward = ffn(mlp + "wi", mlp + "wo", norm)
        return {
            **attention("self_attn", p + "0.SelfAttention.", "q", "k", "v", "o", p + "0.layer_norm"),
            **(cross if stack == "decoder" else {}),
            **feed_forward,
        }

    tokens = ("shared", "encoder.embed_tokens", "decoder.embed_tokens")
    head = {"lm_head.proj": "lm_head"}
    if cfg.tie_embeddings:
        tokens, head = (*tokens, "lm_head"), {}
    bias = "block.0.layer.0.SelfAttention.relative_attention_bias"
    return {
        "src_embed.tokens": Tied(tokens),
        "tgt_embed.tokens": Tied(tokens),
        **head,
        "src_embed.pos.bias": f"encoder.{bias}",
        "tgt_embed.pos.bias": f"decoder.{bias}",
        **layers("encoder.layers", cfg.n_layers, lambda i: layer("encoder", i)),
        **layers("decoder.layers", cfg.n_decoder_layers or cfg.n_layers, lambda i: layer("decoder", i)),
        "encoder.final_norm": "encoder.final_layer_norm",
        "decoder.final_norm": "decoder.final_layer_norm",
    }


register(
    Architecture(
        model_type="t5",
        classes=("T5ForConditionalGeneration",),
        prefix="",
        config=t5_config,
        weights=t5_weights,
        # a cross-attention bias older checkpoints store and transformers ignores on load as well
        ignore=(r"^decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight$",),
        export=t5_export,
        family="seq2seq",
        config_from_weights=t5_tying_from_weights,
    )
)
