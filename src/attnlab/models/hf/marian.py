"""Marian (``MarianMTModel``): a post-norm encoder-decoder with concatenated sinusoidal positions.

The encoder and decoder must agree on heads and FFN width (attnlab's seq2seq has one value of each);
embeddings are shared between source and target unless the config says otherwise.
"""

from __future__ import annotations

from attnlab.blocks.ffn import ffn_width
from attnlab.models.common import scales_embeddings
from attnlab.models.hf.config_keys import activation, hf_activation, require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import Raw, Table, Tied, attention, ffn, layers
from attnlab.schema.model import Seq2SeqConfig
from attnlab.schema.pos import SinusoidalPos


def marian_config(c: dict, cls: str) -> Seq2SeqConfig:
    for enc, dec in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if c[enc] != c[dec]:
            raise ValueError(f"{enc}={c[enc]} differs from {dec}={c[dec]}; attnlab's seq2seq uses one value")
    require(c, decoder_vocab_size=c["vocab_size"])
    return Seq2SeqConfig(
        vocab_size=c["vocab_size"],
        d_model=c["d_model"],
        n_layers=c["encoder_layers"],
        n_decoder_layers=c["decoder_layers"],
        n_heads=c["encoder_attention_heads"],
        d_ff=c["encoder_ffn_dim"],
        activation=activation(c["activation_function"]),
        norm="layernorm",
        norm_eps=1e-5,
        norm_first=False,
        dropout=c["dropout"],
        attn_dropout=c["attention_dropout"],
        ffn_dropout=c["activation_dropout"],
        max_seq_len=c["max_position_embeddings"],
        tie_embeddings=c.get("tie_word_embeddings", True),
        embed_scale=c["scale_embedding"],
        share_embeddings=c.get("share_encoder_decoder_embeddings", True),
        lm_head_bias=True,
        pos=SinusoidalPos(layout="concat"),
    )


def marian_export(cfg: Seq2SeqConfig) -> dict:
    """The config.json of ``cfg`` as Marian (the inverse of ``marian_config``)."""
    d_ff = ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult)
    return {
        "model_type": "marian",
        "architectures": ["MarianMTModel"],
        "vocab_size": cfg.vocab_size,
        "decoder_vocab_size": cfg.vocab_size,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_layers,
        "decoder_layers": cfg.n_decoder_layers or cfg.n_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": d_ff,
        "decoder_ffn_dim": d_ff,
        "activation_function": hf_activation(cfg.activation),
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attn_dropout,
        "activation_dropout": cfg.ffn_dropout,
        "max_position_embeddings": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
        "scale_embedding": scales_embeddings(cfg),
        "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "pad_token_id": 0,  # inside the vocabulary (Marian's default is not); the tokenizer's if it has one
        "decoder_start_token_id": 0,
        "forced_eos_token_id": None,  # attnlab's decoding never forces an eos at the length limit
    }


def marian_weights(cfg: Seq2SeqConfig) -> Table:
    def layer(stack: str, i: int) -> Table:
        p = f"{stack}.layers.{i}."
        names = ("q_proj", "k_proj", "v_proj", "out_proj")
        cross = attention("cross_attn", p + "encoder_attn.", *names, p + "encoder_attn_layer_norm")
        return {
            **attention("self_attn", p + "self_attn.", *names, p + "self_attn_layer_norm"),
            **(cross if stack == "decoder" else {}),
            **ffn(p + "fc1", p + "fc2", p + "final_layer_norm"),
        }

    if cfg.share_embeddings:
        src = tgt = ("shared", "encoder.embed_tokens", "decoder.embed_tokens")
    else:
        src, tgt = ("encoder.embed_tokens",), ("decoder.embed_tokens",)
    head = {"lm_head.proj": "lm_head"}
    if cfg.tie_embeddings:
        tgt, head = (*tgt, "lm_head"), {}
    return {
        "src_embed.tokens": Tied(src),
        "tgt_embed.tokens": Tied(tgt),
        **head,
        "lm_head.bias": Raw("final_logits_bias", squeeze=True),
        **layers("encoder.layers", cfg.n_layers, lambda i: layer("encoder", i)),
        **layers("decoder.layers", cfg.n_decoder_layers or cfg.n_layers, lambda i: layer("decoder", i)),
    }


register(
    Architecture(
        model_type="marian",
        classes=("MarianMTModel",),
        prefix="model.",
        config=marian_config,
        weights=marian_weights,
        ignore=(r"embed_positions\.weight$",),  # fixed sinusoids: attnlab computes them
        export=marian_export,
        family="seq2seq",
    )
)
