"""Decoding with an encoder-decoder: batched greedy search and beam search.

The source is encoded once; the decoder then runs one token at a time with a KV cache whose
cross-attention keys and values are computed at the first step. Beam search keeps ``num_beams``
rows per source; since a beam only ever continues a beam of the same source, reordering touches
the self-attention caches only (every beam of a source shares the same cross-attention cache).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.blocks.cache import KVCache
from attnlab.generate.common import pad_batch
from attnlab.generate.threads import single_query_threads
from attnlab.models.common import eval_mode, model_device

Sources = Tensor | Sequence[Sequence[int]]


@dataclass
class Hypothesis:
    """A finished beam: generated tokens (no bos, no eos) and its length-normalised log-probability."""

    tokens: list[int]
    score: float


def _sources(
    model: nn.Module, src: Sources, src_mask: Tensor | None, pad_id: int
) -> tuple[Tensor, Tensor | None]:
    if not all(hasattr(model, name) for name in ("encode", "decode", "new_cache")):
        family = getattr(model, "family", type(model).__name__)
        raise ValueError(
            f"greedy_decode/beam_search need an encoder-decoder (family 'seq2seq'), got {family!r}"
        )
    device = model_device(model)
    if isinstance(src, Tensor):
        ids = src.to(device).unsqueeze(0) if src.dim() == 1 else src.to(device)
        return ids, None if src_mask is None else src_mask.to(device).bool()
    if src_mask is not None:
        raise ValueError("src_mask is only for tensor sources; lists of ids are padded here")
    return pad_batch(src, pad_id, left=False, device=device, what="source")


def _check(max_new_tokens: int) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")


def next_log_probs(
    model: nn.Module, tokens: Tensor, memory: Tensor, src_mask: Tensor | None, cache: KVCache | None
) -> Tensor:
    """Log-probabilities (B, V) of the token after ``tokens`` (B, t) from an encoder-decoder (``decode``);
    with a cache, only the last token is new (the cache holds the others)."""
    new = tokens[:, -1:] if cache is not None else tokens
    return model.decode(new, memory, src_mask, cache=cache)[:, -1].float().log_softmax(dim=-1)


@torch.no_grad()
def greedy_tokens(
    model: nn.Module,
    src_ids: Tensor,
    src_mask: Tensor | None = None,
    *,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int,
    pad_id: int = 0,
    use_cache: bool = True,
    in_step: Callable[[int], int] | None = None,
) -> list[list[int]]:
    """The most likely token at each step for each source (B, S); each output ends before its eos.

    ``model`` is an encoder-decoder (``encode``, ``decode``, ``new_cache``: a Seq2SeqModel), run in its
    current mode; the source is encoded once and the decoder reuses the cached keys and values. The
    seq2seq task decodes its validation batches with it; ``greedy_decode`` is its checked entry point.
    ``in_step`` (the largest of a number over processes, e.g. an all-reduce) is for processes whose
    every decoder step is a collective (FSDP): each then runs as many steps as the longest, its own
    outputs unchanged (cut at ``max_new_tokens``; a finished row only takes padding).
    """
    memory = model.encode(src_ids, src_mask)
    batch = src_ids.shape[0]
    steps = max_new_tokens if in_step is None else in_step(max_new_tokens)
    tokens = torch.full((batch, steps + 1), pad_id, dtype=torch.long, device=src_ids.device)
    tokens[:, 0] = bos_id
    finished = torch.zeros(batch, dtype=torch.bool, device=src_ids.device)
    cache = model.new_cache() if use_cache else None
    for t in range(1, steps + 1):
        token = next_log_probs(model, tokens[:, :t], memory, src_mask, cache).argmax(dim=-1)
        tokens[:, t] = token.masked_fill(finished, pad_id)
        finished |= token == eos_id
        if not still_running(bool(finished.all()) or t >= max_new_tokens, in_step):
            break
    rows = tokens[:, 1 : max_new_tokens + 1].tolist()
    return [row[: row.index(eos_id)] if eos_id in row else row for row in rows]


def still_running(done: bool, in_step: Callable[[int], int] | None) -> bool:
    """Whether to decode another step: this process is not ``done``, or (``in_step``) another is not."""
    return not done if in_step is None else in_step(int(not done)) > 0


@torch.inference_mode()
def greedy_decode(
    model: nn.Module,
    src: Sources,
    *,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int = 64,
    src_mask: Tensor | None = None,
    pad_id: int = 0,
    use_cache: bool = True,
) -> list[list[int]]:
    """The most likely token at each step, for each source; each output ends before its eos."""
    _check(max_new_tokens)
    src_ids, src_mask = _sources(model, src, src_mask, pad_id)
    with eval_mode(model), single_query_threads(model):
        return greedy_tokens(
            model,
            src_ids,
            src_mask,
            bos_id=bos_id,
            eos_id=eos_id,
            max_new_tokens=max_new_tokens,
            pad_id=pad_id,
            use_cache=use_cache,
        )


class _Finished:
    """The best ``size`` finished hypotheses of one source, scored with the length penalty."""

    def __init__(self, size: int, length_penalty: float) -> None:
        self.size, self.length_penalty = size, length_penalty
        self.hyps: list[Hypothesis] = []

    def score(self, logprob: float, length: int) -> float:
        return logprob / length**self.length_penalty

    def add(self, tokens: list[int], logprob: float, length: int) -> None:
        self.hyps.append(Hypothesis(tokens, self.score(logprob, length)))
        self.hyps.sort(key=lambda h: h.score, reverse=True)
        del self.hyps[self.size :]

    def is_done(self, best_running_logprob: float, length: int, early_stopping: bool) -> bool:
        """Full, and (unless ``early_stopping``) no running beam can still beat the worst kept one."""
        if len(self.hyps) < self.size:
            return False
        return early_stopping or self.hyps[-1].score >= self.score(best_running_logprob, length)


@torch.inference_mode()
def beam_search(
    model: nn.Module,
    src: Sources,
    *,
    bos_id: int,
    eos_id: int,
    num_beams: int = 4,
    max_new_tokens: int = 64,
    length_penalty: float = 1.0,
    early_stopping: bool = True,
    n_best: int = 1,
    src_mask: Tensor | None = None,
    pad_id: int = 0,
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """The ``n_best`` highest-scoring hypotheses per source, best first.

    A hypothesis scores ``sum(log p) / length**length_penalty``, its length counting the eos.
    ``early_stopping=True`` stops a source once ``num_beams`` hypotheses have finished; ``False``
    goes on while a running beam could still beat the worst of them (the Hugging Face heuristic).
    """
    _check(max_new_tokens)
    if num_beams < 1 or not 1 <= n_best <= num_beams:
        raise ValueError(
            f"num_beams={num_beams}, n_best={n_best}: need num_beams >= 1 and 1 <= n_best <= num_beams"
        )
    src_ids, src_mask = _sources(model, src, src_mask, pad_id)
    batch, beams = src_ids.shape[0], num_beams
    device = src_ids.device
    with eval_mode(model), single_query_threads(model):
        memory = model.encode(src_ids, src_mask).repeat_interleave(beams, dim=0)
        src_mask = src_mask.repeat_interleave(beams, dim=0) if src_mask is not None else None
        tokens = torch.full((batch * beams, max_new_tokens + 1), pad_id, dtype=torch.long, device=device)
        tokens[:, 0] = bos_id
        beam_scores = torch.zeros(batch, beams, device=device)
        beam_scores[:, 1:] = float("-inf")  # every beam starts equal: expand from the first only
        finished = [_Finished(beams, length_penalty) for _ in range(batch)]
        done = [False] * batch
        cache = model.new_cache() if use_cache else None
        base = torch.arange(batch, device=device).unsqueeze(1) * beams

        for t in range(1, max_new_tokens + 1):
            logprobs = next_log_probs(model, tokens[:, :t], memory, src_mask, cache)
            vocab = logprobs.shape[-1]
            candidates = (beam_scores.view(-1, 1) + logprobs).view(batch, beams * vocab)
            top_scores, top_index = candidates.topk(min(2 * beams, beams * vocab), dim=1)
            origin, token = top_index // vocab, top_index % vocab
            is_eos = token == eos_id

            for b, r in (is_eos[:, :beams]).nonzero().tolist():  # eos ranked among the best: a finished beam
                if not done[b]:
                    row = int(base[b, 0] + origin[b, r])
                    finished[b].add(tokens[row, 1:t].tolist(), float(top_scores[b, r]), t)

            keep = torch.argsort(is_eos.to(torch.int8), dim=1, stable=True)[:, :beams]  # best non-eos first
            beam_scores = top_scores.gather(1, keep)
            index = (base + origin.gather(1, keep)).view(-1)
            tokens = tokens.index_select(0, index)
            tokens[:, t] = token.gather(1, keep).view(-1)
            if cache is not None:
                for layer_cache in cache.self_attn:
                    layer_cache.reorder(index)

            best_running = beam_scores.max(dim=1).values.tolist()
            for b in range(batch):
                done[b] = done[b] or finished[b].is_done(best_running[b], t, early_stopping)
            if all(done):
                break

        for b in range(batch):  # sources still running at the limit: their beams count as hypotheses
            if not done[b]:
                for k in range(beams):
                    finished[b].add(tokens[b * beams + k, 1 : t + 1].tolist(), float(beam_scores[b, k]), t)
    return [f.hyps[:n_best] for f in finished]
