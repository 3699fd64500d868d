"""The nanoGPT references of benchmarks/nanogpt: GPT-2's weights mapped into the hand-written GPT
give GPT-2's logits; without a checkout nanoGPT's own model is absent, not an error."""

from __future__ import annotations

import torch
from benchmarks.nanogpt.checkout import CONV1D, gpt2_weights, own_gpt
from benchmarks.nanogpt.handwritten import with_gpt2_weights

from benchmarks import models


def test_gpt2_weights_transpose_the_conv1d_weights_and_drop_the_mask_buffers() -> None:
    state = models.hf_gpt2(models.GPT_TINY).state_dict()
    mapped = gpt2_weights(state)
    assert not any(name.endswith((".attn.bias", ".attn.masked_bias")) for name in mapped)
    for name, tensor in mapped.items():
        expected = state[name].t() if name.endswith(CONV1D) else state[name]
        assert torch.equal(tensor, expected), name
    assert sum(name.endswith(CONV1D) for name in mapped) == 4 * models.GPT_TINY.n_layers


def test_the_hand_written_gpt_with_gpt2_weights_gives_gpt2_logits() -> None:
    hf = models.hf_gpt2(models.GPT_TINY).eval()
    ours = with_gpt2_weights(models.GPT_TINY, hf).eval()
    ids, _ = models.gpt_batch(models.GPT_TINY)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(input_ids=ids).logits, atol=1e-5, rtol=1e-5)


def test_without_a_checkout_there_is_no_own_nanogpt(monkeypatch) -> None:
    monkeypatch.delenv("NANOGPT_DIR", raising=False)
    assert own_gpt(models.GPT_TINY) is None
