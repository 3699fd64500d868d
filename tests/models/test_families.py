"""Every family x positional encoding builds and trains on CPU; bad configs give clear errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.blocks.attention import MultiHeadAttention, record_attention
from attnlab.schema.model import Family
from attnlab.schema.pos import PosName, pos_config

VOCAB = 23
FAMILIES = list(Family)
POSITIONAL_ENCODINGS = list(PosName)
# Every head of every family: segments and a classifier on bert, RGB 4x4 patches on vit.
HEADS = {"bert": dict(type_vocab_size=2, num_classes=3), "vit": dict(patch_size=4, channels=3)}


@pytest.fixture(scope="module")
def tiny(tiny_model):
    """``tiny(family, pos, **overrides)``: one layer of two heads, 16 positions, every head."""

    def build(family: str, pe: str = "learned", **overrides) -> nn.Module:
        settings = dict(n_layers=1, n_heads=2, **HEADS.get(family, {}))
        if family != "vit":
            settings["max_seq_len"] = 16
        return tiny_model(family, pe, **{**settings, **overrides})

    return build


def loss_of(model: nn.Module, family: str) -> torch.Tensor:
    """A loss that reaches every output head of the family."""
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, 6))
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    if family == "gpt":
        logits = model(ids, attention_mask=mask)
        return F.cross_entropy(logits.flatten(0, 1), ids.roll(-1, 1).flatten())
    if family == "bert":
        hidden = model(ids, attention_mask=mask, token_type_ids=(torch.arange(6) >= 3).long().expand(2, -1))
        mlm = F.cross_entropy(model.mlm_logits(hidden).flatten(0, 1), ids.flatten())
        return mlm + F.cross_entropy(model.classify(hidden, mask), torch.tensor([0, 2]))
    if family == "seq2seq":
        tgt = torch.randint(0, VOCAB, (2, 5))
        logits = model(ids, tgt, src_mask=mask, tgt_mask=torch.ones(2, 5, dtype=torch.bool))
        return F.cross_entropy(logits.flatten(0, 1), tgt.roll(-1, 1).flatten())
    images = torch.randn(2, 3, 8, 8)
    return F.cross_entropy(model(images), torch.tensor([1, 2]))


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_and_positional_encoding_trains(tiny, family: str, pe: str) -> None:
    model = tiny(family, pe, dropout=0.1, attn_dropout=0.1, ffn_dropout=0.1).train()
    assert model.cfg.pos.name == pe and model.cfg.family == family
    loss = loss_of(model, family)
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


SWITCHES = {
    "attn_window": dict(attn_window=2),
    "qk_norm": dict(qk_norm=True),
}  # the attention switches


@pytest.mark.parametrize("switch", list(SWITCHES))
@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_with_each_attention_switch(tiny, family: str, pe: str, switch: str) -> None:
    """A few optimizer steps on one batch lower its loss, with every parameter (QK-norms too) learning."""
    model = tiny(family, pe, **SWITCHES[switch]).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, moved = [], set()
    for _ in range(3):
        loss = loss_of(model, family)
        optimizer.zero_grad()
        loss.backward()
        # (a ViT's CLS token starts at zero, so its QK-norms get no gradient before the first step)
        moved |= {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    assert moved == {n for n, _ in model.named_parameters()}
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert all(m.window == (None if m.cross else model.cfg.attn_window) for m in attention)
    assert all((m.q_norm is not None) == model.cfg.qk_norm for m in attention)


def outputs(model: nn.Module, family: str) -> torch.Tensor:
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, 6))
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    if family == "gpt":
        return model(ids, attention_mask=mask)
    if family == "bert":
        return model.mlm_logits(model(ids, attention_mask=mask))
    if family == "seq2seq":
        return model(ids, ids[:, :4], src_mask=mask)
    return model(torch.randn(2, 3, 8, 8))


@pytest.mark.parametrize("switch", [None, *SWITCHES])
@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_recording_attention_changes_no_output(tiny, family: str, pe: str, switch: str | None) -> None:
    """The explicit path (taken while recording) equals the fused one inside every family."""
    model = tiny(family, pe, **SWITCHES.get(switch, {}))
    with torch.no_grad():
        fused = outputs(model, family)
        with record_attention(model) as maps:
            explicit = outputs(model, family)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=0)
    attention = [n for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    assert sorted(maps) == sorted(attention)
    for name, weights in maps.items():
        keys = 6 if family != "seq2seq" or "cross" in name or name.startswith("encoder") else 4
        assert weights.shape[1] == 2 and weights.shape[-1] == (5 if family == "vit" else keys), name


def test_families_are_built_from_the_shared_blocks_only(tiny) -> None:
    """No family keeps a private copy of attention, a layer or a positional encoding."""
    for family in FAMILIES:
        for pe in POSITIONAL_ENCODINGS:
            model = tiny(family, pe)
            for name, module in model.named_modules():
                origin = type(module).__module__
                allowed = origin.startswith(("torch.nn.", "attnlab.blocks.")) or module is model
                allowed = allowed or (family == "vit" and name == "patches")  # the patch embedding
                assert allowed, f"{family}/{pe}: {name} is a {origin}.{type(module).__name__}"


def test_relative_buckets_are_one_sided_exactly_where_attention_is_causal(tiny) -> None:
    """T5: bidirectional buckets in encoders, one-sided buckets in decoders."""
    gpt, bert = tiny("gpt", "relative"), tiny("bert", "relative")
    s2s, vit = tiny("seq2seq", "relative"), tiny("vit", "relative")
    assert not gpt.embed.pos.bidirectional and not s2s.tgt_embed.pos.bidirectional
    assert bert.embed.pos.bidirectional and s2s.src_embed.pos.bidirectional and vit.pos.bidirectional


BAD_CONFIGS = {  # what a Python caller can get wrong: the schema validates a config from the command line
    "norm": ("gpt", dict(norm="batchnorm"), r"'batchnorm' is not a valid Norm"),
    "activation": ("gpt", dict(activation="tanh"), r"'tanh' is not a valid Activation"),
    "bert-pooling": ("bert", dict(pooling="first"), r"'first' is not a valid Pooling"),
    "vit-pooling": ("vit", dict(pooling="first"), r"'first' is not a valid Pooling"),
    "vit-patches": ("vit", dict(image_size=10), r"^model.image_size=10: .* model.patch_size=4$"),
    "vit-classes": ("vit", dict(num_classes=0), r"model.num_classes=0"),
    "vocab": ("gpt", dict(vocab_size=0), r"model.vocab_size=0"),
    "heads": (
        "gpt",
        dict(d_model=18, n_heads=4),
        r"^model.d_model=18: must be divisible by model.n_heads=4$",
    ),
    "kv-heads": ("gpt", dict(n_heads=4, n_kv_heads=3), r"^model.n_kv_heads=3: must divide model.n_heads=4$"),
    "rope": (
        "gpt",
        dict(d_model=12, n_heads=4, pe="rope"),
        r"^model.pos.name=rope: rope needs an even head size",
    ),
    "sinusoidal": (
        "gpt",
        dict(d_model=15, n_heads=3, pe="sinusoidal"),
        r"sinusoidal needs an even model.d_model",
    ),
    "pos-layout": (
        "gpt",
        dict(pe=pos_config("sinusoidal", layout="spiral")),
        r"'spiral' is not a valid Layout",
    ),
}


@pytest.mark.parametrize(
    ("family", "overrides", "message"), list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS)
)
def test_bad_configs_name_the_key(tiny, family: str, overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(family, **overrides)


@pytest.mark.parametrize("shape", [(2, 1, 8, 8), (2, 3, 8, 12), (3, 8, 8)])
def test_vit_wrong_input_shape_names_the_expected_shape(tiny, shape: tuple[int, ...]) -> None:
    model = tiny("vit")
    with pytest.raises(ValueError, match=r"images of shape .* expected \(B, 3, 8, 8\) from model.channels"):
        model(torch.randn(shape))


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq"])
@pytest.mark.parametrize("bad_id", [VOCAB, -1])
def test_token_id_outside_the_vocabulary_is_named(tiny, family: str, bad_id: int) -> None:
    model = tiny(family)
    ids = torch.tensor([[1, bad_id, 2]])
    with pytest.raises(ValueError, match=rf"token id {bad_id} is outside the model's vocabulary of {VOCAB}"):
        model(ids, ids) if family == "seq2seq" else model(ids)


def test_learned_positions_beyond_max_seq_len_are_named(tiny) -> None:
    model = tiny("gpt", "learned")
    with pytest.raises(ValueError, match=r"position 16 is beyond .* max_seq_len=16"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_missing_heads_are_clear_errors(tiny) -> None:
    model = tiny("bert", mlm_head=False, num_classes=0)
    hidden = model(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=r"model.mlm_head=false"):
        model.mlm_logits(hidden)
    with pytest.raises(ValueError, match=r"model.num_classes=0"):
        model.classify(hidden)
