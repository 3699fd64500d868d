"""Hugging Face checkpoints as attnlab models: GPT-2, BERT, ViT, Marian, T5, Llama and BLOOM.

Each architecture is two small functions: one reads its ``config.json`` into a ``ModelConfig``, one
is a table saying where every attnlab module finds its tensors in the checkpoint. ``convert`` applies
the table and checks that the checkpoint accounts exactly for the model: every parameter found,
every shape right, no tensor left over (bar the few an architecture declares it has no use for).
Tables use the checkpoint's on-disk names, which are stable across ``transformers`` versions.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.config import ModelConfig, PosConfig
from attnlab.models import build_model

log = logging.getLogger(__name__)

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# classifier layers a checkpoint may lack (a pretrained body for fine-tuning): they start from scratch
HEADS = ("cls_head.pre.", "cls_head.classifier.", "head.pre.", "head.classifier.")

# ---------------------------------------------------------------------------------------------------
# Reading a checkpoint, and specs: where one attnlab module's tensors come from


class Checkpoint:
    """A checkpoint's tensors by name, without the base-model prefix; remembers which were read."""

    def __init__(self, tensors: Mapping[str, Tensor], prefix: str = "") -> None:
        legacy = {".gamma": ".weight", ".beta": ".bias"}  # names of old TF-converted checkpoints
        self.tensors = {}
        for name, t in tensors.items():
            name = name.removeprefix(prefix)
            for old, new in legacy.items():
                name = name[: -len(old)] + new if name.endswith(old) else name
            self.tensors[name] = t
        self.used: set[str] = set()

    def tensor(self, name: str) -> Tensor | None:
        self.used.add(name)
        return self.tensors.get(name)

    def module(self, name: str) -> dict[str, Tensor]:
        """The ``weight`` and ``bias`` stored under ``name`` (those present)."""
        found = {s: self.tensor(f"{name}.{s}") for s in ("weight", "bias")}
        return {s: t for s, t in found.items() if t is not None}

    def unused(self, ignore: tuple[str, ...]) -> list[str]:
        return sorted(
            k for k in self.tensors if k not in self.used and not any(re.search(p, k) for p in ignore)
        )


@dataclass(frozen=True)
class Same:
    """A module stored with our layout (a plain string in a table means this)."""

    name: str

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        return ckpt.module(self.name)


@dataclass(frozen=True)
class Transposed(Same):
    """GPT-2's Conv1D stores its weight as (in, out); ``nn.Linear`` wants (out, in)."""

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        return {s: t.t() if s == "weight" else t for s, t in ckpt.module(self.name).items()}


@dataclass(frozen=True)
class PerHeadQKV(Same):
    """BLOOM's fused rows are laid out (head, q/k/v, head_dim); ours are (q/k/v, head, head_dim)."""

    n_heads: int = 1

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        out = ckpt.module(self.name)
        if any(t.shape[0] % (3 * self.n_heads) for t in out.values()):
            return out  # cannot be split into heads: the shape check reports it
        return {
            s: t.unflatten(0, (self.n_heads, 3, -1)).transpose(0, 1).flatten(0, 2) for s, t in out.items()
        }


@dataclass(frozen=True)
class Raw(Same):
    """One bare tensor by its full name; ``squeeze`` drops a leading dimension of size 1."""

    squeeze: bool = False

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        t = ckpt.tensor(self.name)
        if t is None:
            return {}
        return {"": t[0] if self.squeeze and t.dim() > 1 and t.shape[0] == 1 else t}


@dataclass(frozen=True)
class Fused:
    """Separate projections stacked into one of ours (q, k, v -> qkv_proj; k, v -> kv_proj)."""

    names: tuple[str, ...]

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        parts = [ckpt.module(n) for n in self.names]
        return {s: torch.cat([p[s] for p in parts]) for s in ("weight", "bias") if all(s in p for p in parts)}


@dataclass(frozen=True)
class Tied:
    """A matrix stored under any of several tied names (checkpoints keep one); the rest are duplicates."""

    names: tuple[str, ...]

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        found = [ckpt.module(n) for n in self.names]  # reads all, so the duplicates count as used
        return next(({"weight": f["weight"]} for f in found if "weight" in f), {})


Spec = str | Same | Fused | Tied
Table = dict[str, Spec]  # attnlab module (or, for Raw, parameter) name -> where it comes from


def _spec(spec: Spec) -> Same | Fused | Tied:
    return Same(spec) if isinstance(spec, str) else spec


def _layers(ours: str, n: int, layer: Callable[[int], Table]) -> Table:
    """The table of ``n`` layers, layer ``i`` under ``{ours}.{i}.``."""
    return {f"{ours}.{i}.{k}": v for i in range(n) for k, v in layer(i).items()}


def _attention(sub: str, prefix: str, q: str, k: str, v: str, o: str, norm: str | None = None) -> Table:
    """A self- (``sub="self_attn"``) or cross-attention sublayer from separate q, k, v, o projections."""
    q, k, v, o = (prefix + n for n in (q, k, v, o))
    proj = {"qkv_proj": Fused((q, k, v))} if sub == "self_attn" else {"q_proj": q, "kv_proj": Fused((k, v))}
    table: Table = {f"{sub}.fn.{n}": s for n, s in {**proj, "out_proj": o}.items()}
    return {**table, f"{sub}.norm": norm} if norm else table


def _ffn(fc_in: Spec, fc_out: Spec, norm: str, fc_gate: str | None = None) -> Table:
    table: Table = {"ffn.fn.fc_in": fc_in, "ffn.fn.fc_out": fc_out, "ffn.norm": norm}
    return {**table, "ffn.fn.fc_gate": fc_gate} if fc_gate else table


def _tokens_and_head(cfg: ModelConfig, ours: str, theirs: str, head: str = "lm_head") -> Table:
    """Token embeddings and the LM head: one tied matrix, or two."""
    if cfg.tie_embeddings:
        return {ours: Tied((theirs, head))}
    return {ours: theirs, "lm_head.proj": head}


# ---------------------------------------------------------------------------------------------------
# Reading config.json


HF_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}


def _activation(name: str) -> str:
    if name not in HF_ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not supported; attnlab maps {', '.join(HF_ACTIVATIONS)}")
    return HF_ACTIVATIONS[name]


def _get(c: dict, *names: str) -> Any:
    """The first of ``names`` set in ``c`` (configs of different vintages spell some keys differently)."""
    for name in names:
        if c.get(name) is not None:
            return c[name]
    raise KeyError(names[0])


def _require(c: dict, **supported: Any) -> None:
    """Refuse config options whose effect the attnlab blocks do not reproduce."""
    for key, value in supported.items():
        if c.get(key, value) != value:
            raise ValueError(f"{key}={c[key]!r} is not supported (attnlab needs {value!r})")


def _num_labels(c: dict) -> int:
    return len(c.get("id2label") or {}) or c.get("num_labels", 2)


# ---------------------------------------------------------------------------------------------------
# The architectures: config function, weight table


def gpt2_config(c: dict, cls: str) -> ModelConfig:
    _require(c, scale_attn_by_inverse_layer_idx=False, scale_attn_weights=True, add_cross_attention=False)
    return ModelConfig(
        family="gpt",
        vocab_size=c["vocab_size"],
        d_model=c["n_embd"],
        n_layers=c["n_layer"],
        n_heads=c["n_head"],
        d_ff=c.get("n_inner") or 4 * c["n_embd"],
        activation=_activation(c["activation_function"]),
        norm="layernorm",
        norm_eps=c["layer_norm_epsilon"],
        norm_first=True,
        dropout=c.get("resid_pdrop", 0.1),
        attn_dropout=c.get("attn_pdrop", 0.1),
        max_seq_len=c["n_positions"],
        tie_embeddings=c.get("tie_word_embeddings", True),
        pos=PosConfig("learned"),
    )


def gpt2_weights(cfg: ModelConfig) -> Table:
    def layer(i: int) -> Table:
        h = f"h.{i}."
        return {
            "self_attn.norm": h + "ln_1",
            "self_attn.fn.qkv_proj": Transposed(h + "attn.c_attn"),
            "self_attn.fn.out_proj": Transposed(h + "attn.c_proj"),
            **_ffn(Transposed(h + "mlp.c_fc"), Transposed(h + "mlp.c_proj"), h + "ln_2"),
        }

    return {
        **_tokens_and_head(cfg, "embed.tokens", "wte"),
        "embed.pos": "wpe",
        **_layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "ln_f",
    }


def _bert_like_sizes(c: dict) -> dict[str, Any]:
    """The fields BERT and ViT configs spell the same way: sizes, activation, LayerNorm, dropout."""
    return dict(
        d_model=c["hidden_size"],
        n_layers=c["num_hidden_layers"],
        n_heads=c["num_attention_heads"],
        d_ff=c["intermediate_size"],
        activation=_activation(c["hidden_act"]),
        norm="layernorm",
        norm_eps=c["layer_norm_eps"],
        dropout=c["hidden_dropout_prob"],
        attn_dropout=c["attention_probs_dropout_prob"],
    )


def bert_config(c: dict, cls: str) -> ModelConfig:
    _require(c, position_embedding_type="absolute", is_decoder=False, add_cross_attention=False)
    return ModelConfig(
        family="bert",
        vocab_size=c["vocab_size"],
        **_bert_like_sizes(c),
        norm_first=False,
        embed_norm=True,
        max_seq_len=c["max_position_embeddings"],
        tie_embeddings=c.get("tie_word_embeddings", True),
        type_vocab_size=c["type_vocab_size"],
        mlm_head=cls == "BertForMaskedLM",
        num_classes=_num_labels(c) if cls == "BertForSequenceClassification" else 0,
        pooling="cls",
        classifier_hidden=True,
        pos=PosConfig("learned"),
    )


def _bert_layer(i: int, attention: str) -> Table:
    """A BERT-style layer (BERT, ViT): query/key/value under ``attention``, dense layers by role."""
    p = f"encoder.layer.{i}."
    return {
        **_attention(
            "self_attn",
            p,
            f"{attention}.query",
            f"{attention}.key",
            f"{attention}.value",
            "attention.output.dense",
            p + "attention.output.LayerNorm",
        ),
        **_ffn(p + "intermediate.dense", p + "output.dense", p + "output.LayerNorm"),
    }


def bert_weights(cfg: ModelConfig) -> Table:
    table: Table = {
        "embed.tokens": "embeddings.word_embeddings",
        "embed.pos": "embeddings.position_embeddings",
        "embed.segments": "embeddings.token_type_embeddings",
        "embed.norm": "embeddings.LayerNorm",
        **_layers("stack.layers", cfg.n_layers, lambda i: _bert_layer(i, "attention.self")),
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


def vit_config(c: dict, cls: str) -> ModelConfig:
    _require(c, qkv_bias=True)
    image_size, patch_size = c["image_size"], c["patch_size"]
    if isinstance(image_size, list | tuple) or isinstance(patch_size, list | tuple):
        raise ValueError(f"image_size={image_size}, patch_size={patch_size}: attnlab's ViT takes square ints")
    return ModelConfig(
        family="vit",
        **_bert_like_sizes(c),
        norm_first=True,
        image_size=image_size,
        patch_size=patch_size,
        channels=c["num_channels"],
        num_classes=_num_labels(c),
        pooling="cls",
        classifier_hidden=False,
        pos=PosConfig("learned"),
    )


def vit_weights(cfg: ModelConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"encoder.layer.{i}."
        norms = {"self_attn.norm": p + "layernorm_before", "ffn.norm": p + "layernorm_after"}
        return {**_bert_layer(i, "attention.attention"), **norms}

    return {
        "patches.proj": "embeddings.patch_embeddings.projection",
        "cls_token": Raw("embeddings.cls_token"),
        "pos.weight": Raw("embeddings.position_embeddings", squeeze=True),
        **_layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "layernorm",
        "head.classifier": "classifier",
    }


def marian_config(c: dict, cls: str) -> ModelConfig:
    for enc, dec in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if c[enc] != c[dec]:
            raise ValueError(f"{enc}={c[enc]} differs from {dec}={c[dec]}; attnlab's seq2seq uses one value")
    _require(c, decoder_vocab_size=c["vocab_size"])
    return ModelConfig(
        family="seq2seq",
        vocab_size=c["vocab_size"],
        d_model=c["d_model"],
        n_layers=c["encoder_layers"],
        n_decoder_layers=c["decoder_layers"],
        n_heads=c["encoder_attention_heads"],
        d_ff=c["encoder_ffn_dim"],
        activation=_activation(c["activation_function"]),
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
        pos=PosConfig("sinusoidal", layout="concat"),
    )


def marian_weights(cfg: ModelConfig) -> Table:
    def layer(stack: str, i: int) -> Table:
        p = f"{stack}.layers.{i}."
        names = ("q_proj", "k_proj", "v_proj", "out_proj")
        cross = _attention("cross_attn", p + "encoder_attn.", *names, p + "encoder_attn_layer_norm")
        return {
            **_attention("self_attn", p + "self_attn.", *names, p + "self_attn_layer_norm"),
            **(cross if stack == "decoder" else {}),
            **_ffn(p + "fc1", p + "fc2", p + "final_layer_norm"),
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
        **_layers("encoder.layers", cfg.n_layers, lambda i: layer("encoder", i)),
        **_layers("decoder.layers", cfg.n_decoder_layers or cfg.n_layers, lambda i: layer("decoder", i)),
    }


def _t5_activation(feed_forward_proj: str) -> str:
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


def t5_config(c: dict, cls: str) -> ModelConfig:
    if c["d_kv"] * c["num_heads"] != c["d_model"]:
        raise ValueError(
            f"d_kv={c['d_kv']} x num_heads={c['num_heads']} != d_model={c['d_model']}; "
            "attnlab's attention needs head_dim = d_model / n_heads"
        )
    tied = c.get("tie_word_embeddings", True)
    return ModelConfig(
        family="seq2seq",
        vocab_size=c["vocab_size"],
        d_model=c["d_model"],
        n_layers=c["num_layers"],
        n_decoder_layers=c.get("num_decoder_layers") or c["num_layers"],
        n_heads=c["num_heads"],
        d_ff=c["d_ff"],
        activation=_t5_activation(c["feed_forward_proj"]),
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
        tied_output_scale=c.get("scale_decoder_outputs", tied),
        share_embeddings=True,
        pos=PosConfig(
            "relative",
            num_buckets=c["relative_attention_num_buckets"],
            max_distance=c["relative_attention_max_distance"],
        ),
    )


def t5_weights(cfg: ModelConfig) -> Table:
    gated = cfg.activation in ("geglu", "geglu_tanh", "swiglu")

    def layer(stack: str, i: int) -> Table:
        p = f"{stack}.block.{i}.layer."
        cross = _attention("cross_attn", p + "1.EncDecAttention.", "q", "k", "v", "o", p + "1.layer_norm")
        f = f"{p}{2 if stack == 'decoder' else 1}."
        ffn = _ffn(
            f + "DenseReluDense.wi_1", f + "DenseReluDense.wo", f + "layer_norm", f + "DenseReluDense.wi_0"
        )
        return {
            **_attention("self_attn", p + "0.SelfAttention.", "q", "k", "v", "o", p + "0.layer_norm"),
            **(cross if stack == "decoder" else {}),
            **(ffn if gated else _ffn(f + "DenseReluDense.wi", f + "DenseReluDense.wo", f + "layer_norm")),
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
        **_layers("encoder.layers", cfg.n_layers, lambda i: layer("encoder", i)),
        **_layers("decoder.layers", cfg.n_decoder_layers or cfg.n_layers, lambda i: layer("decoder", i)),
        "encoder.final_norm": "encoder.final_layer_norm",
        "decoder.final_norm": "decoder.final_layer_norm",
    }


def llama_config(c: dict, cls: str) -> ModelConfig:
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    _require(rope, rope_type="default", type="default")
    _require(c, hidden_act="silu", mlp_bias=c.get("attention_bias", False))
    d, heads = c["hidden_size"], c["num_attention_heads"]
    _require(c, head_dim=d // heads)
    return ModelConfig(
        family="gpt",
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
        pos=PosConfig("rope", rope_base=rope.get("rope_theta", c.get("rope_theta", 10000.0))),
    )


def llama_weights(cfg: ModelConfig) -> Table:
    def layer(i: int) -> Table:
        p = f"layers.{i}."
        return {
            **_attention(
                "self_attn", p + "self_attn.", "q_proj", "k_proj", "v_proj", "o_proj", p + "input_layernorm"
            ),
            **_ffn(
                p + "mlp.up_proj", p + "mlp.down_proj", p + "post_attention_layernorm", p + "mlp.gate_proj"
            ),
        }

    return {
        **_tokens_and_head(cfg, "embed.tokens", "embed_tokens"),
        **_layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "norm",
    }


def bloom_config(c: dict, cls: str) -> ModelConfig:
    _require(c, apply_residual_connection_post_layernorm=False)
    d = _get(c, "hidden_size", "n_embed")
    return ModelConfig(
        family="gpt",
        vocab_size=c["vocab_size"],
        d_model=d,
        n_layers=_get(c, "n_layer", "num_hidden_layers"),
        n_heads=_get(c, "n_head", "num_attention_heads"),
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
        pos=PosConfig("alibi"),
    )


def bloom_weights(cfg: ModelConfig) -> Table:
    def layer(i: int) -> Table:
        h = f"h.{i}."
        return {
            "self_attn.norm": h + "input_layernorm",
            "self_attn.fn.qkv_proj": PerHeadQKV(h + "self_attention.query_key_value", n_heads=cfg.n_heads),
            "self_attn.fn.out_proj": h + "self_attention.dense",
            **_ffn(h + "mlp.dense_h_to_4h", h + "mlp.dense_4h_to_h", h + "post_attention_layernorm"),
        }

    return {
        **_tokens_and_head(cfg, "embed.tokens", "word_embeddings"),
        "embed.norm": "word_embeddings_layernorm",
        **_layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": "ln_f",
    }


@dataclass(frozen=True)
class Architecture:
    """One Hugging Face architecture: the classes it covers and how to read its config and weights."""

    classes: tuple[str, ...]  # ``architectures`` entries of config.json that attnlab loads
    prefix: str  # base-model prefix of the checkpoint's names, removed when present
    config: Callable[[dict, str], ModelConfig]
    weights: Callable[[ModelConfig], Table]
    ignore: tuple[str, ...] = ()  # regexes: checkpoint tensors attnlab has no module for


ARCHITECTURES = {  # by config.json's model_type
    "gpt2": Architecture(
        ("GPT2LMHeadModel", "GPT2Model"),
        "transformer.",
        gpt2_config,
        gpt2_weights,
        (r"\.attn\.(masked_)?bias$",),
    ),
    "bert": Architecture(
        ("BertForMaskedLM", "BertModel", "BertForSequenceClassification"),
        "bert.",
        bert_config,
        bert_weights,
        (r"position_ids$", r"^pooler\.", r"^cls\.", r"^classifier\."),  # heads the config leaves out
    ),
    "vit": Architecture(
        ("ViTForImageClassification", "ViTModel"), "vit.", vit_config, vit_weights, (r"^pooler\.",)
    ),
    "marian": Architecture(
        ("MarianMTModel",), "model.", marian_config, marian_weights, (r"embed_positions\.weight$",)
    ),
    "t5": Architecture(
        ("T5ForConditionalGeneration",),
        "",
        t5_config,
        t5_weights,
        (r"^decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight$",),
    ),
    "llama": Architecture(
        ("LlamaForCausalLM",), "model.", llama_config, llama_weights, (r"rotary_emb\.inv_freq$",)
    ),
    "bloom": Architecture(("BloomForCausalLM", "BloomModel"), "transformer.", bloom_config, bloom_weights),
}
SUPPORTED = tuple(cls for arch in ARCHITECTURES.values() for cls in arch.classes)

# ---------------------------------------------------------------------------------------------------
# Conversion and checks


def _architecture(hf_config: dict, where: str) -> tuple[Architecture, str]:
    model_type = hf_config.get("model_type")
    arch = ARCHITECTURES.get(model_type)
    cls = (hf_config.get("architectures") or [arch.classes[0] if arch else model_type])[0]
    if arch is None or cls not in arch.classes:
        raise ValueError(
            f"{where}: unsupported architecture {cls!r} (model_type {model_type!r}); "
            f"attnlab loads {', '.join(SUPPORTED)}"
        )
    return arch, cls


def _with_overrides(cfg: ModelConfig, overrides: dict[str, Any]) -> ModelConfig:
    known = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"unknown ModelConfig override(s) {', '.join(unknown)}; fields are {', '.join(sorted(known))}"
        )
    if isinstance(overrides.get("pos"), dict):
        overrides = {**overrides, "pos": replace(cfg.pos, **overrides["pos"])}
    return replace(cfg, **overrides)


def hf_model_config(hf_config: dict, *, where: str = "checkpoint", **overrides: Any) -> ModelConfig:
    """The attnlab ModelConfig of a Hugging Face config dict, with ``overrides`` of ModelConfig fields."""
    arch, cls = _architecture(hf_config, where)
    try:
        cfg = arch.config({k: v for k, v in hf_config.items() if v is not None}, cls)  # null = absent
    except KeyError as e:
        raise ValueError(f"{where}: config.json lacks {e.args[0]!r}, which {cls} needs") from None
    except ValueError as e:
        raise ValueError(f"{where}: {cls}: {e}") from None
    return _with_overrides(cfg, overrides)


def _few(keys: list[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def _check(
    cfg: ModelConfig, state: dict[str, Tensor], origin: dict[str, str], unused: list[str], where: str
) -> None:
    """Every parameter of the model found with its shape, every checkpoint tensor used (else ValueError)."""
    with torch.device("meta"):  # shapes only: nothing is allocated
        expected = {k: tuple(v.shape) for k, v in build_model(cfg).state_dict().items()}
    for key, t in state.items():
        if key not in expected:
            raise ValueError(
                f"{where}: checkpoint tensor {origin[key]} maps to {key}, which the model built from "
                "its config does not have"
            )
        if tuple(t.shape) != expected[key]:
            raise ValueError(
                f"{where}: shape mismatch for {key} (checkpoint {origin[key]}): checkpoint has "
                f"{tuple(t.shape)}, the model built from config.json has {expected[key]}"
            )
    missing = [k for k in expected if k not in state]
    fresh = [
        k for k in missing if any(k.startswith(h) and not any(s.startswith(h) for s in state) for h in HEADS)
    ]
    missing = [k for k in missing if k not in fresh]
    if missing:
        raise ValueError(f"{where}: missing in the checkpoint: {_few(missing)}")
    if unused:
        raise ValueError(
            f"{where}: unexpected tensors in the checkpoint (attnlab has no place for them): {_few(unused)}"
        )
    if fresh:
        log.warning("%s: no weights for %s in the checkpoint; they start from scratch", where, _few(fresh))


def convert(
    hf_config: dict, tensors: Mapping[str, Tensor], *, where: str = "checkpoint", **overrides: Any
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """Map a Hugging Face config dict and state dict (on-disk names) to an attnlab config and state dict.

    Raises ValueError for an unsupported architecture or option, a shape mismatch, a missing parameter or
    a checkpoint tensor with no place in the model. Classifier heads the checkpoint lacks are left out.
    """
    arch, _ = _architecture(hf_config, where)
    cfg = hf_model_config(hf_config, where=where, **overrides)
    ckpt = Checkpoint(tensors, arch.prefix)
    state, origin = {}, {}
    for ours, spec in arch.weights(cfg).items():
        spec = _spec(spec)
        for suffix, t in spec.read(ckpt).items():
            key = f"{ours}.{suffix}" if suffix else ours
            sources = [f"{n}.{suffix}" if suffix else n for n in spec.names]
            state[key], origin[key] = t, " + ".join(n for n in sources if n in ckpt.tensors)
    _check(cfg, state, origin, ckpt.unused(arch.ignore), where)
    return cfg, state


def _build(cfg: ModelConfig, state: dict[str, Tensor]) -> nn.Module:
    model = build_model(cfg)
    model.load_state_dict(state, strict=False)  # strictness is _check's job: only fresh heads are absent
    return model.eval()


# ---------------------------------------------------------------------------------------------------
# Local checkpoint directories and in-memory transformers models


def _read_config(path: Path) -> dict:
    if not path.is_dir():
        raise FileNotFoundError(f"Hugging Face checkpoint directory {path} does not exist")
    file = path / "config.json"
    if not file.is_file():
        raise FileNotFoundError(
            f"{file} not found: a Hugging Face checkpoint directory needs its config.json"
        )
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{file} is not valid JSON ({e})") from None


def _read_file(file: Path) -> dict[str, Tensor]:
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(file)
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # corrupt or foreign files: say which one
        raise ValueError(f"{file}: cannot read weights ({e})") from e


def read_weights(path: Path) -> dict[str, Tensor]:
    """The tensors of a checkpoint directory: safetensors or ``.bin``, single file or sharded with an index."""
    for name in WEIGHT_FILES:
        file = path / name
        if not file.is_file():
            continue
        if not name.endswith(".index.json"):
            return _read_file(file)
        shards = sorted(set(json.loads(file.read_text())["weight_map"].values()))
        tensors: dict[str, Tensor] = {}
        for shard in shards:
            if not (path / shard).is_file():
                raise FileNotFoundError(f"{path / shard} not found (listed in {file})")
            tensors |= _read_file(path / shard)
        return tensors
    raise FileNotFoundError(f"no weights in {path}: expected one of {', '.join(WEIGHT_FILES)}")


def model_config_from_hf(path: str | Path, **overrides: Any) -> ModelConfig:
    """The attnlab ModelConfig (family, sizes, options) of a local checkpoint; reads config.json only."""
    path = Path(path)
    return hf_model_config(_read_config(path), where=str(path), **overrides)


def load_hf(path: str | Path, **overrides: Any) -> nn.Module:
    """Load a local Hugging Face checkpoint directory into the matching attnlab model, in eval mode.

    ``overrides`` replace ModelConfig fields (e.g. ``dropout=0.0``, or ``num_classes=5`` to put a fresh
    classifier on a pretrained encoder).
    """
    path = Path(path)
    hf_config = _read_config(path)
    cfg, state = convert(hf_config, read_weights(path), where=str(path), **overrides)
    return _build(cfg, state)


def from_transformers(hf_model: nn.Module, **overrides: Any) -> nn.Module:
    """The attnlab twin of an in-memory ``transformers`` model (its weights copied), in eval mode."""
    tensors = hf_model.state_dict()
    try:  # transformers 5 renames some modules in memory; saving reverts that, and so do we
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        pass
    else:
        tensors = revert_weight_conversion(hf_model, tensors)
    name = type(hf_model).__name__
    hf_config = {**hf_model.config.to_dict(), "architectures": [name]}
    cfg, state = convert(hf_config, tensors, where=name, **overrides)
    return _build(cfg, state)
