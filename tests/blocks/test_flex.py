"""FlexAttention (``model.attn_backend=flex``) equals SDPA in the forward pass for every positional
encoding and mask, in every family; cached decoding; one block mask per forward pass; the explicit
path still records; no backward on the CPU.

The cases run the uncompiled kernel (the same ``mask_mod`` and ``score_mod``; a compilation per case
would take a minute); ``test_the_compiled_kernel_equals_sdpa`` runs the compiled one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from attnlab.blocks import flex as flex_module
from attnlab.blocks.attention import attention_modules, record_attention, use_attention_path
from attnlab.schema.pos import PosName

ATOL = 1e-5
POSITIONS = [p.value for p in PosName]
# causal: the family's own rule alone (bidirectional for bert); document: three packed documents
MASKS = ["causal", "window", "padding", "document"]
WINDOW = 3


@pytest.fixture(autouse=True)
def uncompiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flex_module, "COMPILE_FROM", 10**9)


@pytest.fixture
def model(tiny_model: Callable[..., torch.nn.Module]) -> Callable[..., torch.nn.Module]:
    """``model(family, pos, mask, **overrides)``: a tiny model with two key/value heads, windowed when
    ``mask`` is "window"."""

    def build(family: str, pos: str, mask: str, **overrides: object) -> torch.nn.Module:
        window = WINDOW if mask == "window" else None
        return tiny_model(family, pos, n_kv_heads=2, attn_window=window, **overrides)

    return build


def batch(family: str, mask: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Inputs of ``family`` with the padding ``mask`` asks for, and where the outputs are real tokens
    (a left-padded decoder query that sees no key gives zeros in flex, a uniform mix in SDPA)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 23, (2, 9), generator=g)
    real = torch.ones(2, 9, dtype=torch.bool)
    if mask == "padding":
        real[1, :3] = False if family == "gpt" else real[1, :3]  # gpt: left padding, as in sampling
        real[1, 6:] = family == "gpt"  # the encoders: right padding
    if mask == "document" and family != "seq2seq":  # packing: text models only
        docs = torch.tensor([[0, 0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 1, 1, 1, 1, 1, 2, 2]])
        return {"input_ids": ids, "document_ids": docs}, real
    if family == "seq2seq":
        tgt = torch.randint(3, 23, (2, 7), generator=g)
        tgt_real = torch.ones(2, 7, dtype=torch.bool)
        tgt_real[1, 5:] = mask != "padding"
        inputs = {"src_ids": ids, "tgt_in": tgt, "src_mask": real, "tgt_mask": tgt_real}
        return inputs, tgt_real
    key = "attention_mask"
    return {"input_ids": ids, key: real}, real


CASES = [
    (family, pos, mask)
    for family in ("gpt", "bert", "seq2seq")
    for pos in POSITIONS
    for mask in MASKS
    if not (family == "seq2seq" and mask == "document")  # packing is for gpt and bert
]


@pytest.mark.parametrize(("family", "pos", "mask"), CASES)
def test_flex_equals_sdpa_in_the_forward_pass(
    model: Callable[..., torch.nn.Module], family: str, pos: str, mask: str
) -> None:
    m = model(family, pos, mask)
    inputs, real = batch(family, mask)
    with torch.no_grad():
        sdpa = m.logits(inputs)
        with use_attention_path(m, "flex"):
            flex = m.logits(inputs)
    assert torch.allclose(flex[real], sdpa[real], atol=ATOL), (flex - sdpa)[real].abs().max()


@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_changing_one_document_leaves_the_others_unchanged_with_flex(
    model: Callable[..., torch.nn.Module], family: str
) -> None:
    m = model(family, "alibi", "window", attn_backend="flex")
    inputs, _ = batch(family, "document")
    changed = dict(inputs, input_ids=inputs["input_ids"].clone())
    changed["input_ids"][:, 4:6] = 1  # row 0: all of document 1; row 1: part of document 1
    with torch.no_grad():
        before, after = m.logits(inputs), m.logits(changed)
    others = inputs["document_ids"] != 1
    assert torch.equal(before[others], after[others])
    assert not torch.allclose(before[~others], after[~others])


def test_a_model_built_with_the_flex_backend_runs_it(model: Callable[..., torch.nn.Module]) -> None:
    m = model("seq2seq", "alibi", "window", attn_backend="flex")
    assert {a.path for a in attention_modules(m).values()} == {"flex"}
    reference = model("seq2seq", "alibi", "window")
    inputs, real = batch("seq2seq", "padding")
    with torch.no_grad():
        assert torch.allclose(m.logits(inputs)[real], reference.logits(inputs)[real], atol=ATOL)


@pytest.mark.parametrize("pos", POSITIONS)
def test_cached_decoding_with_flex_equals_the_full_forward(
    model: Callable[..., torch.nn.Module], pos: str
) -> None:
    """A prompt, then one token at a time through a windowed KV cache, equals SDPA without a cache."""
    m = model("gpt", pos, "window", attn_backend="flex")
    reference = model("gpt", pos, "window")
    ids = torch.randint(3, 23, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = reference(ids)
        cache = m.new_cache()
        steps = [m(ids[:, :4], cache=cache)]
        steps += [m(ids[:, t : t + 1], cache=cache) for t in range(4, 10)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=ATOL)
    assert cache.self_attn[0].length == WINDOW


def test_cached_encoder_decoder_decoding_with_flex_equals_the_full_forward(
    model: Callable[..., torch.nn.Module],
) -> None:
    m = model("seq2seq", "relative", "window", attn_backend="flex")
    reference = model("seq2seq", "relative", "window")
    inputs, _ = batch("seq2seq", "causal")
    src, src_mask, tgt = inputs["src_ids"], inputs["src_mask"], inputs["tgt_in"]
    src_mask[1, 6:] = False
    with torch.no_grad():
        full = reference(src, tgt, src_mask)
        memory, cache = m.encode(src, src_mask), m.new_cache()
        steps = [m.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in range(tgt.shape[1])]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=ATOL)


def test_one_block_mask_per_forward_pass(
    model: Callable[..., torch.nn.Module], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layers of a stack share their block mask: built once per stack for self-attention and once
    for cross-attention, not once per layer."""
    built = []
    create = flex_module.create_block_mask
    monkeypatch.setattr(flex_module, "create_block_mask", lambda *a, **k: built.append(1) or create(*a, **k))
    m = model("seq2seq", "rope", "window", attn_backend="flex", n_layers=3)
    inputs, _ = batch("seq2seq", "padding")
    with torch.no_grad():
        m.logits(inputs)
    assert len(built) == 3  # encoder self-attention, decoder self-attention, decoder cross-attention


def test_the_explicit_path_records_a_flex_model_and_gives_it_back(
    model: Callable[..., torch.nn.Module],
) -> None:
    m = model("gpt", "alibi", "window", attn_backend="flex")
    inputs, real = batch("gpt", "padding")
    with torch.no_grad():
        flex = m.logits(inputs)
        with record_attention(m) as maps:
            recorded = m.logits(inputs)
    assert torch.allclose(recorded[real], flex[real], atol=ATOL)
    weights = maps["stack.layers.0.self_attn.fn"]
    assert weights.shape == (2, 4, 9, 9)
    assert weights[0, :, 5, :3].abs().max() == 0  # the window hides keys 3 or more positions back
    assert {a.path for a in attention_modules(m).values()} == {"flex"}


def test_a_backward_on_the_cpu_is_refused_in_one_line(model: Callable[..., torch.nn.Module]) -> None:
    m = model("gpt", "alibi", "causal", attn_backend="flex").train()
    inputs, _ = batch("gpt", "causal")
    with pytest.raises(NotImplementedError) as err:
        m.logits(inputs).sum().backward()
    assert str(err.value) == (
        "model.attn_backend=flex: FlexAttention has no backward on CPU in torch 2.13; train with sdpa, "
        "evaluate or sample with flex"
    )


@pytest.mark.slow
@pytest.mark.parametrize("pos", ["alibi", "relative"])
def test_the_compiled_kernel_equals_sdpa(
    model: Callable[..., torch.nn.Module], monkeypatch: pytest.MonkeyPatch, fresh_compiler: None, pos: str
) -> None:
    """What eval and sampling run for prompts: torch.compile(flex_attention), block-sparse, fused."""
    monkeypatch.setattr(flex_module, "COMPILE_FROM", 2)
    m = model("gpt", pos, "window", attn_backend="flex")
    reference = model("gpt", pos, "window")
    inputs, real = batch("gpt", "padding")
    with torch.no_grad():
        flex, sdpa = m.logits(inputs), reference.logits(inputs)
    assert torch.allclose(flex[real], sdpa[real], atol=ATOL)


@pytest.mark.parametrize("pos", ["alibi", "relative"])
def test_a_pruned_model_with_flex_biases_its_kept_heads_as_sdpa_does(
    model: Callable[..., torch.nn.Module], pos: str
) -> None:
    """A pruned module's score_mod is called with each kept head's original index (ALiBi's slope, T5's
    bucket column), as the dense path indexes its bias."""
    m = model("gpt", pos, "window", kept_heads=[[2, 3], [0, 1, 2, 3]])  # two key/value groups of two
    inputs, real = batch("gpt", "window")
    with torch.no_grad():
        sdpa = m.logits(inputs)
        with use_attention_path(m, "flex"):
            flex = m.logits(inputs)
    assert torch.allclose(flex[real], sdpa[real], atol=ATOL), (flex - sdpa)[real].abs().max()
