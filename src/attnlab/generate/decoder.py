"""Text generation with a decoder-only model: sampling or greedy, batched, with a KV cache.

Prompts of different lengths are left-padded, so every row's next token sits in the same column;
each row gets its own positions (counting real tokens only) and an attention mask that hides
its padding. Buffers for tokens, mask and positions are allocated once before the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnlab.generate.common import pad_batch
from attnlab.generate.sampling import check_sampling_args, next_token, penalize_repetition
from attnlab.generate.steps import CompiledSteps, EagerSteps, SlidingSteps
from attnlab.generate.threads import single_query_threads
from attnlab.models.common import eval_mode, model_device
from attnlab.models.decoder import DecoderLM

Prompts = Tensor | Sequence[Sequence[int]]


def _as_batch(
    prompts: Prompts, attention_mask: Tensor | None, pad_id: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Prompts as a left-padded (B, T) tensor and its mask, checking a given mask is left padding."""
    if not isinstance(prompts, Tensor):
        if attention_mask is not None:
            raise ValueError("attention_mask is only for tensor prompts; lists of ids are padded here")
        return pad_batch(prompts, pad_id, left=True, device=device, what="prompt")
    ids = prompts.to(device)
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError(
            f"prompt tensor of shape {tuple(prompts.shape)}: expected (B, T) token ids with T >= 1"
        )
    if attention_mask is None:
        return ids, torch.ones_like(ids, dtype=torch.bool)
    mask = attention_mask.to(device).bool().reshape(ids.shape)
    if not bool(mask[:, -1].all()) or bool((mask[:, :-1] & ~mask[:, 1:]).any()):
        raise ValueError("attention_mask must describe left padding: real tokens last in every row")
    return ids, mask


def _check_model(model: nn.Module, prompt_len: int, max_new_tokens: int, max_context: int | None) -> None:
    if not isinstance(getattr(model, "_orig_mod", model), DecoderLM):  # torch.compile wraps it
        family = getattr(model, "family", type(model).__name__)
        raise ValueError(
            f"generate() needs a decoder-only model (family 'gpt'), got {family!r}; "
            "for family 'seq2seq' use attnlab.generate.greedy_decode or beam_search"
        )
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")
    cfg = model.cfg
    limit = cfg.max_seq_len if cfg.pos.name == "learned" else None  # a learned table's size
    if max_context is not None and (max_context < 1 or (limit is not None and max_context > limit)):
        allowed = (
            f"between 1 and {limit}, the size of the learned positional table" if limit else "at least 1"
        )
        raise ValueError(f"max_context={max_context} must be {allowed}")
    context = min(max_context or prompt_len + max_new_tokens, prompt_len + max_new_tokens)
    if limit is not None and context > limit:
        raise ValueError(
            f"prompt length {prompt_len} + max_new_tokens={max_new_tokens} exceeds model.max_seq_len="
            f"{limit}, the size of its learned positional table; shorten the prompt or max_new_tokens, "
            f"or slide the context (max_context={limit})"
        )


def _cut_at_stop(rows: list[list[int]], stop_tokens: set[int]) -> list[list[int]]:
    """Each row up to (not including) its first stop token."""
    if not stop_tokens:
        return rows
    out = []
    for row in rows:
        end = next((i for i, t in enumerate(row) if t in stop_tokens), len(row))
        out.append(row[:end])
    return out


@torch.inference_mode()
def generate(
    model: nn.Module,
    prompts: Prompts,
    *,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop_tokens: Sequence[int] = (),
    num_samples: int = 1,
    seed: int | torch.Generator | None = None,
    use_cache: bool = True,
    pad_id: int = 0,
    attention_mask: Tensor | None = None,
    compile: bool = False,
    max_context: int | None = None,
) -> list[list[int]]:
    """New token ids for each prompt and sample, row ``i * num_samples + j`` for prompt i, sample j.

    ``prompts`` is a (B, T) tensor (left-padded if ``attention_mask`` is given) or a list of
    token-id lists of any lengths. ``temperature=0`` decodes greedily; otherwise tokens are sampled
    after the optional top-k and top-p filters. A row stops at its first token in ``stop_tokens``
    (not included in the output). ``seed`` (an int or a ``torch.Generator``) makes sampling
    reproducible. ``use_cache=False`` recomputes the whole sequence every step (for checks).
    ``compile=True`` decodes with a KV cache of the final length and two compiled graphs, one for the
    prompt and one for every later token (CUDA graphs on a GPU): the same tokens as the eager path,
    faster once compiled (``attnlab.generate.steps``). Each new batch size, prompt length or total
    length compiles anew, so it pays where one shape decodes many tokens or many times.
    ``max_context`` slides the context: once the sequence is longer, each token is predicted from the
    last ``max_context`` tokens alone (nanoGPT's sample.py crops the same way); shorter sequences take
    the exact KV-cache path. A model with learned positions cannot go past its table without it.
    """
    check_sampling_args(temperature, top_k, top_p, repetition_penalty)
    if compile and not use_cache:
        raise ValueError(
            "compile=True decodes with a static KV cache: it cannot be combined with use_cache=False"
        )
    if num_samples < 1:
        raise ValueError(f"num_samples={num_samples} must be at least 1")
    device = model_device(model)
    ids, prompt_mask = _as_batch(prompts, attention_mask, pad_id, device)
    _check_model(model, ids.shape[1], max_new_tokens, max_context)
    if num_samples > 1:
        ids, prompt_mask = (
            ids.repeat_interleave(num_samples, 0),
            prompt_mask.repeat_interleave(num_samples, 0),
        )
    generator = (
        seed
        if isinstance(seed, torch.Generator) or seed is None
        else torch.Generator(device).manual_seed(seed)
    )

    # eager even when the model was compiled (compile=False): a growing KV cache changes the shapes at
    # every step, which would recompile the model until torch._dynamo's recompile limit
    model = getattr(model, "_orig_mod", model)
    stance = torch.compiler.set_stance("default" if compile else "force_eager")
    # each new batch size, prompt length or total length is a graph: allow more than dynamo's 8
    with (
        eval_mode(model),
        stance,
        torch._dynamo.config.patch(recompile_limit=64),
        single_query_threads(model),
    ):
        new = _decode(
            model,
            ids,
            prompt_mask,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            repetition_penalty,
            stop_tokens,
            generator,
            "compiled" if compile else ("cached" if use_cache else "uncached"),
            pad_id,
            max_context,
        )
    return _cut_at_stop(new.tolist(), set(stop_tokens))


def _decode(
    model: nn.Module,
    ids: Tensor,
    prompt_mask: Tensor,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    repetition_penalty: float,
    stop_tokens: Sequence[int],
    generator: torch.Generator | None,
    how: str,
    pad_id: int,
    max_context: int | None = None,
) -> Tensor:
    """The decode loop; returns the new tokens (B, max_new_tokens), pad after a row's stop token.
    ``how``: "compiled" (static cache, compiled graphs), "cached" (growing cache) or "uncached"."""
    batch, prompt_len = ids.shape
    total = prompt_len + max_new_tokens
    tokens = torch.full((batch, total), pad_id, dtype=torch.long, device=ids.device)
    tokens[:, :prompt_len] = ids
    mask = None
    positions = torch.arange(total, device=ids.device)  # made once: each step passes a view of it
    if not bool(prompt_mask.all()):  # left padding: per-row positions and a mask over every column
        mask = torch.ones((batch, total), dtype=torch.bool, device=ids.device)
        mask[:, :prompt_len] = prompt_mask
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    seen = None
    if repetition_penalty != 1.0:
        vocab = model.cfg.vocab_size
        seen = torch.zeros((batch, vocab), dtype=torch.bool, device=ids.device)
        rows = torch.arange(batch, device=ids.device).unsqueeze(1).expand_as(ids)
        seen[rows[prompt_mask], ids[prompt_mask]] = True
    stops = torch.tensor(list(stop_tokens), dtype=torch.long, device=ids.device) if stop_tokens else None
    finished = torch.zeros(batch, dtype=torch.bool, device=ids.device)
    window = max_context if max_context is not None and max_context < total else None
    if window is not None and prompt_len > window:  # the prompt itself is cropped: every step slides
        logits_for = SlidingSteps(model, None, tokens, mask, window)
    elif how == "compiled":
        logits_for = CompiledSteps(model, tokens, mask, positions, prompt_len, length=window or total)
    else:
        logits_for = EagerSteps(model, tokens, mask, positions, use_cache=how == "cached")
    if window is not None and not isinstance(logits_for, SlidingSteps):
        logits_for = SlidingSteps(model, logits_for, tokens, mask, window)

    for t in range(prompt_len, total):
        logits = logits_for(t)
        if seen is not None:
            logits = penalize_repetition(logits, seen, repetition_penalty)
        token = next_token(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        if seen is not None:
            seen.scatter_(1, token, True)
        if stops is not None:
            token = token.masked_fill(finished.unsqueeze(1), pad_id)
            finished |= torch.isin(token.squeeze(1), stops)
        tokens[:, t] = token.squeeze(1)
        if stops is not None and bool(finished.all()):
            break
    return tokens[:, prompt_len:]


def sample_in_windows(
    model: nn.Module,
    prompt: Sequence[int],
    *,
    window: int,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
) -> list[int]:
    """The prompt's last ``window // 2`` tokens and ``max_new_tokens`` sampled after them.

    Every call of ``generate`` stays within ``window`` tokens (a model's trained context: positions
    beyond it were never trained), each with its own KV cache: a longer sample restarts from the last
    half window, so that every chunk keeps half a window of context. Fewer tokens come back if a
    chunk adds none.
    """
    half = window // 2
    ids = list(prompt)[-half:]
    start = len(ids)
    while len(ids) - start < max_new_tokens:
        context = ids[-half:]
        n = min(window - len(context), max_new_tokens - (len(ids) - start))
        new = generate(
            model, [context], max_new_tokens=n, temperature=temperature, top_k=top_k, seed=generator
        )[0]
        if not new:
            break
        ids += new
    return ids
