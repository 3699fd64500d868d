"""The model calls of a decoding loop: each gives the logits (B, V) that choose the token of column t.

``EagerSteps`` is the plain path: a KV cache that grows (or none, recomputing everything), the
model's shapes changing at every token. ``CompiledSteps`` is gpt-fast's approach
(``generate(..., compile=True)``): a cache of the final length allocated once
(``attnlab.blocks.static_cache``), the prompt run by one compiled graph (the prefill) and every later
token by another of fixed shapes (the step), whose inputs are copied into the same small tensors at
each token. Nothing changes shape between tokens, so the step compiles once and, on a GPU, runs as
one CUDA graph (``mode="reduce-overhead"``) instead of hundreds of small kernel launches.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor, nn

from attnlab.blocks.static_cache import StaticCache


class EagerSteps:
    """Logits for column t from the model run eagerly, with a growing KV cache or none."""

    def __init__(
        self, model: nn.Module, tokens: Tensor, mask: Tensor | None, positions: Tensor, use_cache: bool
    ):
        self.model, self.tokens, self.mask, self.positions = model, tokens, mask, positions
        self.cache = model.new_cache(reserve=tokens.shape[1]) if use_cache else None
        self.start = 0  # the first column not yet in the cache

    def __call__(self, t: int) -> Tensor:
        logits = self.model(
            self.tokens[:, self.start : t],
            attention_mask=None if self.mask is None else self.mask[:, :t],
            positions=self.positions[..., self.start : t],
            cache=self.cache,
        )[:, -1]
        if self.cache is not None:
            self.start = t
        return logits


def _last_logits(
    model: nn.Module, ids: Tensor, mask: Tensor | None, positions: Tensor, cache: StaticCache
) -> Tensor:
    return model(ids, attention_mask=mask, positions=positions, cache=cache)[:, -1]


# Two functions, so that torch.compile keeps a graph for each: the prompt's and a single token's.
def prefill_logits(
    model: nn.Module, ids: Tensor, mask: Tensor | None, positions: Tensor, cache: StaticCache
) -> Tensor:
    """The last position's logits of the whole prompt, its keys and values written into ``cache``."""
    return _last_logits(model, ids, mask, positions, cache)


def step_logits(
    model: nn.Module, ids: Tensor, mask: Tensor | None, positions: Tensor, cache: StaticCache
) -> Tensor:
    """The logits after one new token (B, 1), its keys and values written into ``cache``."""
    return _last_logits(model, ids, mask, positions, cache)


_COMPILED: dict[tuple[str, str], object] = {}


def compiled(fn, device_type: str):
    """``fn`` compiled once per process and device type: fixed shapes, no graph break allowed; on a
    GPU with CUDA graphs."""
    key = (fn.__name__, device_type)
    if key not in _COMPILED:
        mode = "reduce-overhead" if device_type == "cuda" else None
        _COMPILED[key] = torch.compile(fn, fullgraph=True, dynamic=False, mode=mode)
    return _COMPILED[key]


# The last static cache of each model, reused when the next call has the same batch and length: its
# buffers keep their addresses, so a CUDA graph recorded on them is replayed rather than recorded again.
_CACHES: weakref.WeakKeyDictionary[nn.Module, StaticCache] = weakref.WeakKeyDictionary()


def static_cache(model: nn.Module, batch: int, length: int) -> StaticCache:
    """A static cache of ``batch`` rows and ``length`` columns for ``model``, the last one if it fits.
    Reuse needs no clearing: prefill rewrites the prompt's columns and later columns stay masked until
    written."""
    cache = _CACHES.get(model)
    if cache is None or cache.self_attn[0].k.shape[0] != batch or cache.self_attn[0].length != length:
        cache = model.new_static_cache(batch, length)
        if cache.self_attn[0].k.is_cuda:
            for tensor in cache.tensors():
                torch._dynamo.mark_static_address(tensor)
        _CACHES[model] = cache
    return cache


class SlidingSteps:
    """Logits for column t from at most ``window`` tokens: ``inner`` (the exact cached path) while the
    sequence fits, then, as nanoGPT's sample.py crops its context, the model run on the last
    ``window`` tokens alone, their positions counted from the window's first real token."""

    def __init__(self, model: nn.Module, inner, tokens: Tensor, mask: Tensor | None, window: int):
        self.model, self.inner, self.tokens, self.mask, self.window = model, inner, tokens, mask, window

    def __call__(self, t: int) -> Tensor:
        if t <= self.window:
            return self.inner(t)
        ids = self.tokens[:, t - self.window : t]
        if self.mask is None:
            return self.model(ids, positions=torch.arange(self.window, device=ids.device))[:, -1]
        mask = self.mask[:, t - self.window : t]
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        return self.model(ids, attention_mask=mask, positions=positions)[:, -1]


class CompiledSteps:
    """Logits for column t from the compiled prefill (at the first call) and step (at every later one)."""

    def __init__(
        self,
        model: nn.Module,
        tokens: Tensor,
        mask: Tensor | None,
        positions: Tensor,
        prompt_len: int,
        length: int,
    ):
        """``length``: the columns the cache holds (the whole sequence, or the window it slides over)."""
        self.model, self.tokens, self.positions = model, tokens, positions
        self.mask = None if mask is None else mask[:, :length]
        self.prompt_len = prompt_len
        self.cache = static_cache(model, tokens.shape[0], length)
        device = tokens.device
        self.prompt_columns = torch.arange(prompt_len, device=device)
        # the step's inputs: the same tensors at every token, their values copied in
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.ids = torch.zeros_like(tokens[:, :1])
        self.step_positions = torch.zeros_like(positions[..., :1])
        self.prefill = compiled(prefill_logits, device.type)
        self.step = compiled(step_logits, device.type)

    def __call__(self, t: int) -> Tensor:
        if t == self.prompt_len:
            self.cache.write_at(self.prompt_columns)
            ids, positions, run = self.tokens[:, :t], self.positions[..., :t], self.prefill
        else:  # the token of column t-1 is new
            self.column.fill_(t - 1)
            self.ids.copy_(self.tokens[:, t - 1 : t])
            self.step_positions.copy_(self.positions[..., t - 1 : t])
            self.cache.write_at(self.column)
            ids, positions, run = self.ids, self.step_positions, self.step
        if self.tokens.is_cuda:
            torch.compiler.cudagraph_mark_step_begin()  # the last logits are used: the graph may reuse them
        return run(self.model, ids, self.mask, positions, self.cache)
