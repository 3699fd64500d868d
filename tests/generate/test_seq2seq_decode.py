"""Encoder-decoder decoding: greedy and beam search, cached and not, batched and not."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor, nn

from attnlab.blocks.cache import KVCache
from attnlab.generate import beam_search, greedy_decode
from attnlab.generate.seq2seq import greedy_tokens
from attnlab.schema.model import Seq2SeqConfig
from attnlab.schema.pos import PosName

# Random untied weights and an init wide enough that argmax is decisive (the root tiny_model's init).
GENERATOR = dict(vocab_size=41, d_model=32, max_seq_len=64, tie_embeddings=False)

BOS, EOS, PAD = 1, 2, 0
SOURCES = [[5, 9, 12, 7, 30, 3], [4, 6], [8, 8, 3, 21]]


@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
@pytest.mark.parametrize("pos", list(PosName))
def test_greedy_with_cache_equals_without_cache(tiny_model, pos: str, window: int | None) -> None:
    model = tiny_model("seq2seq", pos, attn_window=window, **GENERATOR)
    cached = greedy_decode(model, SOURCES, bos_id=BOS, eos_id=EOS, max_new_tokens=16)
    assert cached == greedy_decode(model, SOURCES, bos_id=BOS, eos_id=EOS, max_new_tokens=16, use_cache=False)


@pytest.mark.parametrize("window", [None, 3], ids=["full", "window3"])
def test_beam_search_with_cache_equals_without_cache(tiny_model, window: int | None) -> None:
    """Beam search reorders the caches; a window's trimmed cache too."""
    model = tiny_model("seq2seq", "relative", attn_window=window, **GENERATOR)
    kwargs = dict(bos_id=BOS, eos_id=EOS, num_beams=3, n_best=3, max_new_tokens=12)
    cached, uncached = (
        beam_search(model, SOURCES, **kwargs),
        beam_search(model, SOURCES, use_cache=False, **kwargs),
    )
    assert [[h.tokens for h in hyps] for hyps in cached] == [[h.tokens for h in hyps] for hyps in uncached]
    for a, b in zip(cached, uncached):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


@pytest.mark.parametrize("pos", ["sinusoidal", "rope"])
def test_beam_of_one_equals_greedy(tiny_model, pos: str) -> None:
    model = tiny_model("seq2seq", pos, **GENERATOR)
    greedy = greedy_decode(model, SOURCES, bos_id=BOS, eos_id=EOS, max_new_tokens=16)
    beams = beam_search(model, SOURCES, bos_id=BOS, eos_id=EOS, num_beams=1, max_new_tokens=16)
    assert [hyps[0].tokens for hyps in beams] == greedy


def test_batched_beam_search_equals_one_source_at_a_time(tiny_model) -> None:
    model = tiny_model("seq2seq", "learned", **GENERATOR)
    kwargs = dict(bos_id=BOS, eos_id=EOS, num_beams=4, n_best=2, max_new_tokens=12, length_penalty=0.6)
    batched = beam_search(model, SOURCES, **kwargs)
    single = [beam_search(model, [s], **kwargs)[0] for s in SOURCES]
    assert [[h.tokens for h in hyps] for hyps in batched] == [[h.tokens for h in hyps] for hyps in single]


def test_n_best_are_sorted_by_score(tiny_model) -> None:
    model = tiny_model("seq2seq", "rope", **GENERATOR)
    for hyps in beam_search(model, SOURCES, bos_id=BOS, eos_id=EOS, num_beams=4, n_best=4, max_new_tokens=10):
        assert len(hyps) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)


class BigramDecoder(nn.Module):
    """A stand-in seq2seq model whose next-token distribution depends on the previous token only.

    From bos: A (0.5) or B (0.4). After A every token is unlikely (at most 0.3, eos included);
    after B, eos has 0.9. Greedy takes A and ends near 0.5 * 0.3; beam search finds B, eos (0.36).
    """

    A, B = 3, 4
    cfg = Seq2SeqConfig(vocab_size=8)

    def __init__(self) -> None:
        super().__init__()
        probs = torch.full((8, 8), 1e-3)
        probs[BOS, [self.A, self.B]] = torch.tensor([0.5, 0.4])
        probs[self.A, [EOS, 5, 6, 7]] = torch.tensor([0.3, 0.25, 0.25, 0.2])
        probs[self.B, EOS] = 0.9
        probs[[EOS, 5, 6, 7], EOS] = 0.9
        self.table = nn.Parameter((probs / probs.sum(-1, keepdim=True)).log())

    def encode(self, src_ids: Tensor, src_mask: Tensor | None = None) -> Tensor:
        return torch.zeros(src_ids.shape[0], src_ids.shape[1], 1)

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_mask=None, tgt_mask=None, cache=None) -> Tensor:
        return self.table[tgt_ids]

    def new_cache(self) -> KVCache:
        return KVCache.empty(0, cross=True)

    def logprob(self, tokens: list[int]) -> float:
        seq = [BOS, *tokens, EOS]
        return sum(float(self.table[a, b].detach()) for a, b in itertools.pairwise(seq))


def test_beam_search_finds_a_sequence_greedy_misses() -> None:
    model = BigramDecoder()
    greedy = greedy_decode(model, [[5]], bos_id=BOS, eos_id=EOS, max_new_tokens=5)[0]
    best = beam_search(
        model, [[5]], bos_id=BOS, eos_id=EOS, num_beams=2, length_penalty=0.0, max_new_tokens=5
    )[0][0]
    assert greedy[0] == model.A
    assert best.tokens == [model.B]
    assert best.score == pytest.approx(model.logprob(best.tokens))
    assert best.score > model.logprob(greedy) + 0.5


class CountingDecoder(BigramDecoder):
    """BigramDecoder counting its decoder steps (under FSDP each would be a collective)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def decode(self, *args: object, **kwargs: object) -> Tensor:
        self.steps += 1
        return super().decode(*args, **kwargs)


class OtherProcess:
    """``in_step`` beside another process that decodes ``steps`` steps of at most ``limit``: the larger
    of each number and the other's (its limit first, then, step by step, whether it still runs)."""

    def __init__(self, limit: int, steps: int) -> None:
        self.limit, self.steps, self.calls = limit, steps, 0

    def __call__(self, n: int) -> int:
        self.calls += 1
        theirs = self.limit if self.calls == 1 else int(self.calls - 1 < self.steps)
        return max(n, theirs)


@pytest.mark.parametrize(("max_new", "limit", "theirs", "steps"), [(5, 9, 7, 7), (5, 9, 1, 2), (1, 4, 4, 4)])
def test_decoding_in_step_runs_the_longest_process_steps_and_keeps_its_own_outputs(
    max_new: int, limit: int, theirs: int, steps: int
) -> None:
    """With ``in_step`` (processes whose decoder steps are collectives, FSDP), this process (A then eos:
    two steps alone) runs as many decoder steps as another that decodes longer (``theirs`` steps of at
    most ``limit``), its own where the other stops first; its outputs are those of decoding alone, cut
    at its own ``max_new_tokens``."""
    other = OtherProcess(limit, theirs)
    src = torch.tensor([[5], [6]])
    alone = greedy_tokens(CountingDecoder(), src, bos_id=BOS, eos_id=EOS, max_new_tokens=max_new)
    model = CountingDecoder()
    in_step = greedy_tokens(model, src, bos_id=BOS, eos_id=EOS, max_new_tokens=max_new, in_step=other)
    assert in_step == alone == [[BigramDecoder.A]] * 2
    assert model.steps == steps and other.calls == steps + 1  # the limit, then one "still running" a step


def test_length_penalty_divides_by_length() -> None:
    model = BigramDecoder()
    hyps = beam_search(
        model, [[5]], bos_id=BOS, eos_id=EOS, num_beams=2, n_best=2, length_penalty=1.0, max_new_tokens=5
    )[0]
    for h in hyps:
        assert h.score == pytest.approx(model.logprob(h.tokens) / (len(h.tokens) + 1))


def test_bad_beam_arguments_are_named(tiny_model) -> None:
    model = tiny_model("seq2seq", **GENERATOR)
    with pytest.raises(ValueError, match="num_beams=2, n_best=3"):
        beam_search(model, SOURCES, bos_id=BOS, eos_id=EOS, num_beams=2, n_best=3)
    with pytest.raises(ValueError, match="source 1 is empty"):
        greedy_decode(model, [[3], []], bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match=r"need an encoder-decoder .*got 'gpt'"):
        greedy_decode(tiny_model("gpt", **GENERATOR), SOURCES, bos_id=BOS, eos_id=EOS)
