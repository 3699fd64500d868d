"""attnlab's decoder as an lm-evaluation-harness ``LM``: log-likelihoods of continuations, of whole
texts (rolling windows), and greedy generation on the KV cache, batched.

Requests are tokenized as the harness's own Hugging Face backend does (a context's trailing spaces
go to the continuation; the continuation's ids are those of context + continuation after the
context's), so that scores are comparable with it. Sequences longer than the model's ``max_seq_len``
keep their last tokens. A text scored whole is predicted from the tokenizer's ``<eos>`` or ``<bos>``
when it has one; a tokenizer without either (a char model's corpus alphabet) cannot predict a first
token, so the first token is given and the rest scored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torch import nn

from attnlab.generate.decoder import generate
from attnlab.harness.texts import check_request_texts
from attnlab.models import DecoderLM


def batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def cut_at_stops(text: str, until: str | Sequence[str] | None) -> str:
    """``text`` up to the first of the ``until`` strings (a generation request's stop sequences)."""
    for stop in [until] if isinstance(until, str) else until or []:
        text = text.split(stop)[0]
    return text


class AttnlabLM(LM):
    """A decoder-only attnlab model and its tokenizer (``attnlab.data.tokenizers.Tokenizer``, or any
    object with ``encode``, ``decode`` and ``special_ids``) for ``lm_eval.simple_evaluate``."""

    def __init__(self, model: nn.Module, tokenizer: Any, batch_size: int = 8) -> None:
        super().__init__()
        if not isinstance(model, DecoderLM):
            raise ValueError(f"the harness scores decoder-only models (family gpt), not {model.family}")
        self.model, self.tokenizer, self.batch_size = model.eval(), tokenizer, batch_size
        self.max_length = model.cfg.max_seq_len
        ids = tokenizer.special_ids
        self.prefix_id = ids.get("eos", ids.get("bos"))

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """The ids of ``context`` and of ``continuation`` after it, as the harness's HF backend splits them."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.tokenizer.encode(context + continuation)
        context_ids = self.tokenizer.encode(context)
        return context_ids, whole[len(context_ids) :]

    @torch.no_grad()
    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """Log-likelihood of each continuation given its context, and whether greedy decoding gives it."""
        out = []
        device = next(self.model.parameters()).device  # the harness callback scores a model in training
        for chunk in batches(pairs, self.batch_size):
            rows = [(ctx + cont)[-(self.max_length + 1) :][:-1] for ctx, cont in chunk]
            width = max(len(r) for r in rows)
            ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device)
            mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
            logp = self.model(ids, attention_mask=mask).float().log_softmax(-1)
            for row, (_, cont), lp in zip(rows, chunk, logp, strict=True):
                end = len(row)
                picked = lp[end - len(cont) : end]
                target = torch.tensor(cont, device=device)
                total = picked.gather(-1, target[:, None]).sum().item()
                out.append((total, bool((picked.argmax(-1) == target).all())))
        return out

    def loglikelihood(self, requests: list) -> list[tuple[float, bool]]:
        check_request_texts(requests, self.tokenizer)  # a text it cannot encode: task and document named
        pairs = []
        for context, continuation in (r.args for r in requests):
            if context:
                pairs.append(self.encode_pair(context, continuation))
            else:
                pairs.append(self.first_token_given(self.tokenizer.encode(continuation)))
        return self.score(pairs)

    def first_token_given(self, ids: list[int]) -> tuple[list[int], list[int]]:
        """(context, continuation) for a text scored from its start."""
        return ([self.prefix_id], ids) if self.prefix_id is not None else (ids[:1], ids[1:])

    def loglikelihood_rolling(self, requests: list) -> list[float]:
        check_request_texts(requests, self.tokenizer)
        out = []
        for (text,) in (r.args for r in requests):
            prefix, ids = self.first_token_given(self.tokenizer.encode(text))
            windows = get_rolling_token_windows(ids, prefix[-1], self.max_length, 1)
            pairs = [make_disjoint_window(w) for w in windows]
            out.append(sum(ll for ll, _ in self.score(pairs)))
        return out

    @torch.no_grad()
    def generate_until(self, requests: list) -> list[str]:
        """Greedy continuations on the KV cache, batch by batch of requests with one length limit,
        each cut before the first of its ``until`` strings."""
        check_request_texts(requests, self.tokenizer)
        args = [r.args for r in requests]
        out: list[str] = []
        for chunk in batches(args, self.batch_size):
            n = max(options.get("max_gen_toks", 256) for _, options in chunk)
            prompts = [self.tokenizer.encode(context)[-max(self.max_length - n, 1) :] for context, _ in chunk]
            stop = [self.prefix_id] if self.prefix_id is not None else []
            rows = generate(self.model, prompts, max_new_tokens=n, temperature=0.0, stop_tokens=stop)
            for ids, (_, options) in zip(rows, chunk, strict=True):
                text = self.tokenizer.decode(ids[: options.get("max_gen_toks", 256)])
                out.append(cut_at_stops(text, options.get("until")))
        return out
