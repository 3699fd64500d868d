"""BERT (``BertForMaskedLM``, ``BertModel``, ``BertForSequenceClassification``): a post-norm encoder.

Token types, an embedding LayerNorm, an MLM head tied to the embeddings, a pooler before the
classifier. ``bert_like_sizes`` and ``bert_layer`` serve ViT too, which spells them the same way.
"""

from __future__ import annotations

from typing import Any

from attnlab.blocks.ffn import ffn_width
from attnlab.models.hf.config_keys import activation, hf_activation, num_labels, require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.spec import Raw, Table, Tied, attention, ffn, layers
from attnlab.schema.model import BertConfig, ModelConfig
from attnlab.schema.pos import LearnedPos


def bert_like_sizes(c: dict) -> dict[str, Any]:
    """The fields BERT and ViT configs spell the same way: sizes, activation, LayerNorm, dropout."""
    return dict(
        d_model=c["hidden_size"],
        n_layers=c["num_hidden_layers"],
        n_heads=c["num_attention_heads"],
        d_ff=c["intermediate_size"],
        activation=activation(c["hidden_act"]),
        norm="layernorm",
        norm_eps=c["layer_norm_eps"],
        dropout=c["hidden_dropout_prob"],
        attn_dropout=c["attention_probs_dropout_prob"],
    )


def bert_like_export(cfg: ModelConfig) -> dict[str, Any]:
    """The keys of ``bert_like_sizes`` from an attnlab config (its inverse)."""
    return {
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": ffn_width(cfg.d_model, cfg.d_ff, cfg.ffn_mult),
        "hidden_act": hf_activation(cfg.activation),
        "layer_norm_eps": cfg.norm_eps,
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attn_dropout,
    }


def labels(n: int) -> dict[str, Any]:
    """A classifier's ``id2label`` and ``label2id`` for ``n`` classes (``num_labels``)."""
    names = {i: f"LABEL_{i}" for i in range(n)}
    return {"id2label": names, "label2id": {v: k for k, v in names.items()}}


def bert_export(cfg: BertConfig) -> dict:
    """The config.json of ``cfg`` as BERT (the inverse of ``bert_config``): a masked LM, or a
    sequence classifier. Without segments, one segment row of zeros (``ZERO_SEGMENTS``), which adds
    nothing, since BERT always adds a segment embedding."""
    cls = "BertForSequenceClassification" if cfg.num_classes and not cfg.mlm_head else "BertForMaskedLM"
    return {
        "model_type": "bert",
        "architectures": [cls],
        "vocab_size": cfg.vocab_size,
        **bert_like_export(cfg),
        "max_position_embeddings": cfg.max_seq_len,
        "type_vocab_size": max(cfg.type_vocab_size, 1),
        "tie_word_embeddings": cfg.tie_embeddings,
        **(labels(cfg.num_classes) if cls == "BertForSequenceClassification" else {}),
    }


def bert_config(c: dict, cls: str) -> BertConfig:
    require(c, position_embedding_type="absolute", is_decoder=False, add_cross_attention=False)
    return BertConfig(
        vocab_size=c["vocab_size"],
        **bert_like_sizes(c),
        norm_first=False,
        embed_norm=True,
        max_seq_len=c["max_position_embeddings"],
        tie_embeddings=c.get("tie_word_embeddings", True),
        embed_scale=False,
        type_vocab_size=c["type_vocab_size"],
        mlm_head=cls == "BertForMaskedLM",
        num_classes=num_labels(c) if cls == "BertForSequenceClassification" else 0,
        pooling="cls",
        classifier_hidden=True,
        pos=LearnedPos(),
    )


def bert_layer(i: int, attention_prefix: str) -> Table:
    """A BERT-style layer (BERT, ViT): query/key/value under ``attention_prefix``, dense layers by role."""
    p = f"encoder.layer.{i}."
    return {
        **attention(
            "self_attn",
            p,
            f"{attention_prefix}.query",
            f"{attention_prefix}.key",
            f"{attention_prefix}.value",
            "attention.output.dense",
            p + "attention.output.LayerNorm",
        ),
        **ffn(p + "intermediate.dense", p + "output.dense", p + "output.LayerNorm"),
    }


def bert_weights(cfg: BertConfig) -> Table:
    table: Table = {
        "embed.tokens": "embeddings.word_embeddings",
        "embed.pos": "embeddings.position_embeddings",
        "embed.segments": "embeddings.token_type_embeddings",
        "embed.norm": "embeddings.LayerNorm",
        **layers("stack.layers", cfg.n_layers, lambda i: bert_layer(i, "attention.self")),
    }
    if cfg.mlm_head:
        table |= {
            "mlm_head.dense": "cls.predictions.transform.dense",
            "mlm_head.norm": "cls.predictions.transform.LayerNorm",
            "mlm_head.decoder.bias": Raw("cls.predictions.bias"),
        }
        if cfg.tie_embeddings:
            table["embed.tokens"] = Tied(("embeddings.word_embeddings", "cls.predictions.decoder"))
        else:
            table["mlm_head.decoder.proj.weight"] = Raw("cls.predictions.decoder.weight")
    if cfg.num_classes:
        table |= {"cls_head.pre.0": "pooler.dense", "cls_head.classifier": "classifier"}
    return table


register(
    Architecture(
        model_type="bert",
        classes=("BertForMaskedLM", "BertModel", "BertForSequenceClassification"),
        prefix="bert.",
        config=bert_config,
        weights=bert_weights,
        ignore=(r"position_ids$", r"^pooler\.", r"^cls\.", r"^classifier\."),  # heads the config leaves out
        export=bert_export,
        family="bert",
    )
)
