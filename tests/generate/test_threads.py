"""A decoding step's single query runs the fused kernel on one CPU thread, only while decoding."""

from __future__ import annotations

import pytest
import torch

import attnlab.blocks.backends as backends
from attnlab.blocks.attention import SelfAttention, attention_modules, use_attention_path
from attnlab.blocks.backends import SDPA
from attnlab.blocks.view import AttentionView
from attnlab.generate import generate
from attnlab.generate.threads import ONE_THREAD_SDPA, single_query_threads
from attnlab.models import DecoderLM
from attnlab.schema.model import GPTConfig

D_MODEL, N_HEADS = 16, 4


@pytest.fixture
def threads_seen(monkeypatch) -> list[int]:
    """The thread count at each call of the fused kernel, with two threads to start from."""
    seen: list[int] = []
    real = backends.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(backends.F, "scaled_dot_product_attention", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield seen
    torch.set_num_threads(before)


@pytest.mark.parametrize("queries", [1, 3])
def test_one_query_attends_on_one_thread_and_gives_the_threads_back(threads_seen, queries: int) -> None:
    """Handing two threads over between MKL's products and the kernel costs milliseconds on a busy
    machine; longer queries keep every thread, and outside decoding nothing changes."""
    torch.manual_seed(0)
    attn, x = SelfAttention(D_MODEL, N_HEADS).eval(), torch.randn(2, queries, D_MODEL)
    view = AttentionView(torch.arange(queries), causal=True)
    attn(x, view)
    with single_query_threads(attn):
        assert attn.backend is ONE_THREAD_SDPA
        out = attn(x, view)
    assert attn.backend is SDPA and torch.get_num_threads() == 2
    assert threads_seen == [2, 1 if queries == 1 else 2]
    with use_attention_path(attn, "explicit"):  # the same numbers on either thread count
        torch.testing.assert_close(out, attn(x, view), atol=1e-5, rtol=0)


def test_decoding_swaps_only_sdpa_modules_and_restores_them(threads_seen) -> None:
    torch.manual_seed(0)
    model = DecoderLM(GPTConfig(d_model=D_MODEL, n_heads=N_HEADS, n_layers=2, vocab_size=11)).eval()
    modules = list(attention_modules(model).values())
    with use_attention_path(modules[0], "explicit"), single_query_threads(model):
        assert [m.path for m in modules] == ["explicit", "sdpa"] and modules[1].backend is ONE_THREAD_SDPA
    assert all(m.backend is SDPA for m in modules)
    generate(model, [[1, 2, 3]], max_new_tokens=3, temperature=0)
    # the prompt's pass on two threads, then each new token's step on one
    assert threads_seen == [2, 2, 1, 1, 1, 1] and all(m.backend is SDPA for m in modules)
