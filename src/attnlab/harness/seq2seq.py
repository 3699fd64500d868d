"""attnlab's encoder-decoder as an lm-evaluation-harness ``LM``: a request's context is the source, its
continuation the target. Log-likelihoods are teacher-forced from ``<bos>``, as attnlab trains the
decoder; generation is greedy on the KV cache (``attnlab.generate.greedy_decode``) until ``<eos>``.

Requests are tokenized as the harness's Hugging Face backend tokenizes them for a seq2seq model (a
context's trailing spaces go to the continuation; context and continuation are encoded separately)
so that an exported copy scored by that backend gives the same numbers. A source or target longer
than ``max_seq_len`` keeps its last tokens. A text scored whole (``loglikelihood_rolling``, the
perplexity tasks) has no source, and is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from lm_eval.api.model import LM
from torch import nn

from attnlab.generate import greedy_decode, pad_batch
from attnlab.harness.lm import batches, cut_at_stops
from attnlab.harness.texts import check_request_texts
from attnlab.models.seq2seq import Seq2SeqModel

ROLLING_REFUSAL = (
    "an encoder-decoder scores a target given a source; a text scored whole (loglikelihood_rolling: "
    "perplexity tasks such as wikitext) has no source: score it with a decoder-only model"
)


class AttnlabSeq2SeqLM(LM):
    """An attnlab encoder-decoder (``Seq2SeqModel``) and its tokenizer, which has ``<bos>`` (the decoder's
    start) and ``<eos>`` (its end), for ``lm_eval.simple_evaluate``."""

    refused: ClassVar[dict[str, str]] = {"loglikelihood_rolling": ROLLING_REFUSAL}

    def __init__(self, model: nn.Module, tokenizer: Any, batch_size: int = 8) -> None:
        super().__init__()
        if not isinstance(model, Seq2SeqModel):
            raise ValueError(f"AttnlabSeq2SeqLM scores encoder-decoders (family seq2seq), not {model.family}")
        ids = tokenizer.special_ids
        if "bos" not in ids or "eos" not in ids:
            raise ValueError(f"an encoder-decoder's tokenizer needs <bos> and <eos>; it has {sorted(ids)}")
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, batch_size
        self.max_length = model.cfg.max_seq_len
        self.bos_id, self.eos_id, self.pad_id = ids["bos"], ids["eos"], ids.get("pad", 0)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Source and target ids; an empty context is the source ``[<bos>]`` (the backend's prefix token)."""
        if not context:
            return [self.bos_id], self.tokenizer.encode(continuation)
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        return self.tokenizer.encode(context), self.tokenizer.encode(continuation)

    @torch.no_grad()
    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """Log-likelihood of each target given its source, and whether greedy decoding gives it."""
        device = next(self.model.parameters()).device
        out = []
        for chunk in batches(pairs, self.batch_size):
            sources = [src[-self.max_length :] for src, _ in chunk]
            targets = [tgt[-self.max_length :] for _, tgt in chunk]
            src, src_mask = pad_batch(sources, self.pad_id, left=False, device=device, what="source")
            tgt_in = [[self.bos_id, *t[:-1]] for t in targets]
            tgt, tgt_mask = pad_batch(tgt_in, self.pad_id, left=False, device=device, what="target")
            logp = self.model(src, tgt, src_mask, tgt_mask).float().log_softmax(-1)
            for target, lp in zip(targets, logp, strict=True):
                picked, ids = lp[: len(target)], torch.tensor(target, device=device)
                total = picked.gather(-1, ids[:, None]).sum().item()
                out.append((total, bool((picked.argmax(-1) == ids).all())))
        return out

    def loglikelihood(self, requests: list) -> list[tuple[float, bool]]:
        check_request_texts(requests, self.tokenizer)  # a text it cannot encode: task and document named
        return self.score([self.encode_pair(*r.args) for r in requests])

    def loglikelihood_rolling(self, requests: list) -> list[float]:
        raise ValueError(ROLLING_REFUSAL)

    @torch.no_grad()
    def generate_until(self, requests: list) -> list[str]:
        """Greedy targets of each context on the KV cache, batch by batch of requests with one length
        limit (at most ``max_seq_len - 1`` tokens after ``<bos>``), each cut before ``<eos>`` and
        before the first of its ``until`` strings."""
        check_request_texts(requests, self.tokenizer)
        args = [r.args for r in requests]
        out: list[str] = []
        for chunk in batches(args, self.batch_size):
            n = min(max(o.get("max_gen_toks", 256) for _, o in chunk), self.max_length - 1)
            sources = [
                self.tokenizer.encode(context)[-self.max_length :] or [self.bos_id] for context, _ in chunk
            ]
            rows = greedy_decode(
                self.model,
                sources,
                bos_id=self.bos_id,
                eos_id=self.eos_id,
                max_new_tokens=n,
                pad_id=self.pad_id,
            )
            for ids, (_, options) in zip(rows, chunk, strict=True):
                text = self.tokenizer.decode(ids[: options.get("max_gen_toks", 256)])
                out.append(cut_at_stops(text, options.get("until")))
        return out
