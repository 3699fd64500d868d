"""Each family's parameter count equals a closed form derived from its config alone."""

from __future__ import annotations

from dataclasses import fields

import pytest

from attnlab.models import count_parameters
from attnlab.schema.model import MODELS, Family, ModelConfig
from attnlab.schema.pos import pos_config

GATED = ("swiglu", "geglu", "geglu_tanh")  # two input projections each


def linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def norm(c: ModelConfig) -> int:
    return c.d_model * (2 if c.norm == "layernorm" and c.norm_bias else 1)


def width(c: ModelConfig) -> int:
    return c.d_ff if c.d_ff else round(c.ffn_mult * c.d_model)


def attention(c: ModelConfig, cross: bool) -> int:
    """Queries (n_heads heads), keys and values (n_kv_heads heads each), output projection."""
    hd = c.d_model // c.n_heads
    q, kv = c.n_heads * hd, (c.n_kv_heads or c.n_heads) * hd
    projections = linear(c.d_model, q, c.bias) + linear(c.d_model, 2 * kv, c.bias)
    if not cross:  # one fused projection has the same shapes as separate ones
        assert projections == linear(c.d_model, q + 2 * kv, c.bias)
    return projections + linear(q, c.d_model, c.bias)


def feed_forward(c: ModelConfig) -> int:
    f = width(c)
    n_in = 2 if c.activation in GATED else 1
    return n_in * linear(c.d_model, f, c.bias) + linear(f, c.d_model, c.bias)


def layer(c: ModelConfig, cross: bool = False) -> int:
    sublayers = attention(c, False) + feed_forward(c) + (attention(c, True) if cross else 0)
    return sublayers + (3 if cross else 2) * norm(c)


def stack(c: ModelConfig, n_layers: int, cross: bool = False) -> int:
    final = c.norm_first if c.final_norm is None else c.final_norm
    return n_layers * layer(c, cross) + (norm(c) if final else 0)


def positional(c: ModelConfig, n_positions: int) -> int:
    if c.pos.name == "learned":
        return n_positions * c.d_model
    return c.pos.num_buckets * c.n_heads if c.pos.name == "relative" else 0


def embedding(c: ModelConfig, type_vocab_size: int = 0) -> int:
    """Token table, segments, positions and embedding norm of one text embedding."""
    segments = type_vocab_size * c.d_model
    return (
        c.vocab_size * c.d_model + segments + positional(c, c.max_seq_len) + (norm(c) if c.embed_norm else 0)
    )


def lm_head(c: ModelConfig) -> int:  # gpt, seq2seq
    return (0 if c.tie_embeddings else c.vocab_size * c.d_model) + (c.vocab_size if c.lm_head_bias else 0)


def classifier(c: ModelConfig) -> int:
    if c.num_classes <= 0:
        return 0
    pooler = linear(c.d_model, c.d_model, True) if c.classifier_hidden else 0
    return pooler + linear(c.d_model, c.num_classes, True)


def expected_gpt(c: ModelConfig) -> int:
    return embedding(c) + stack(c, c.n_layers) + lm_head(c)


def expected_bert(c: ModelConfig) -> int:
    mlm = 0
    if c.mlm_head:  # dense + norm + vocabulary bias (+ an untied projection)
        mlm = linear(c.d_model, c.d_model, True) + norm(c) + c.vocab_size
        mlm += 0 if c.tie_embeddings else c.vocab_size * c.d_model
    return embedding(c, c.type_vocab_size) + stack(c, c.n_layers) + mlm + classifier(c)


def expected_seq2seq(c: ModelConfig) -> int:
    two_embeddings = 2 * embedding(c) - (c.vocab_size * c.d_model if c.share_embeddings else 0)
    encoder = stack(c, c.n_layers)
    decoder = stack(c, c.n_decoder_layers or c.n_layers, cross=True)
    return two_embeddings + encoder + decoder + lm_head(c)


def expected_vit(c: ModelConfig) -> int:
    n_patches = (c.image_size // c.patch_size) ** 2
    use_cls = c.pooling == "cls"
    patches = linear(c.channels * c.patch_size**2, c.d_model, True)  # the strided convolution
    cls = c.d_model if use_cls else 0
    return patches + cls + positional(c, n_patches + use_cls) + stack(c, c.n_layers) + classifier(c)


EXPECTED = {"gpt": expected_gpt, "bert": expected_bert, "seq2seq": expected_seq2seq, "vit": expected_vit}

BASE = dict(vocab_size=37, d_model=24, n_layers=2, n_heads=4, max_seq_len=20, init_std=0.02)
VARIANTS = {  # each family takes the settings it has
    "default": {},
    "gqa-swiglu-rmsnorm": dict(n_kv_heads=2, activation="swiglu", norm="rmsnorm", ffn_mult=8 / 3),
    "mqa-geglu-d_ff": dict(n_kv_heads=1, activation="geglu", d_ff=40),
    "post-norm-no-bias": dict(norm_first=False, bias=False, norm_bias=False, embed_norm=True),
    "untied-head-bias": dict(tie_embeddings=False, lm_head_bias=True, final_norm=False, pos="relative"),
    "rope-final-norm": dict(norm_first=False, final_norm=True, pos="rope"),
    "relative-buckets": dict(pos=pos_config("relative", num_buckets=12)),
    "sinusoidal": dict(pos="sinusoidal", embed_scale=True),
    "alibi-norm-no-bias": dict(pos="alibi", norm_bias=False, embed_norm=True),
}
FAMILY_VARIANTS = {
    "gpt": {},
    "bert": {
        "segments-classifier": dict(type_vocab_size=3, num_classes=5, classifier_hidden=True),
        "no-mlm-mean-pool": dict(mlm_head=False, num_classes=2, pooling="mean"),
        "untied-mlm": dict(tie_embeddings=False, embed_norm=True),
    },
    "seq2seq": {
        "unshared": dict(share_embeddings=False, n_decoder_layers=3),
        "unshared-untied": dict(share_embeddings=False, tie_embeddings=False, lm_head_bias=True),
    },
    "vit": {
        "mean-pool": dict(pooling="mean"),
        "patches-channels": dict(image_size=12, patch_size=3, channels=1, classifier_hidden=True),
    },
}
CASES = [
    pytest.param(family, {**overrides}, id=f"{family}-{name}")
    for family in EXPECTED
    for name, overrides in {**VARIANTS, **FAMILY_VARIANTS[family]}.items()
]


def settings_of(family: str, overrides: dict) -> dict:
    """BASE and ``overrides`` where the family has such fields (a ViT: 8x8 images in 10 classes)."""
    names = {f.name for f in fields(MODELS.schemas[Family(family)])}
    wanted = {**BASE, **(dict(image_size=8, num_classes=10) if family == "vit" else {}), **overrides}
    return {k: v for k, v in wanted.items() if k in names}


@pytest.mark.parametrize(("family", "overrides"), CASES)
def test_parameter_count_matches_closed_form(tiny_model, family: str, overrides: dict) -> None:
    settings = settings_of(family, overrides)
    model = tiny_model(family, settings.pop("pos", "learned"), **settings)
    assert count_parameters(model) == EXPECTED[family](model.cfg)


def test_tied_weights_are_counted_once(tiny_model) -> None:
    tied = tiny_model("gpt", **BASE)
    untied = tiny_model("gpt", **BASE, tie_embeddings=False)
    assert count_parameters(untied) - count_parameters(tied) == 37 * 24
    assert tied.lm_head.weight is tied.embed.tokens.weight


def test_frozen_parameters_are_not_counted(tiny_model) -> None:
    model = tiny_model("gpt", **BASE)
    total = count_parameters(model)
    model.embed.tokens.weight.requires_grad_(False)
    assert count_parameters(model) == total - 37 * 24
