"""Multi-head attention for self- and cross-attention, with one fused and one explicit path.

The fused path (``"sdpa"``, the default) calls ``scaled_dot_product_attention`` so PyTorch's
flash/memory-efficient kernels run. The explicit path computes the softmax itself and passes the
weights through a probe submodule (an identity), whose forward hooks can read them; the fused
kernels do not return weights, so ``record_attention`` switches to it while it records. A third path,
``"flex"`` (``model.attn_backend=flex``), runs FlexAttention (``attnlab.blocks.flex``): masks and score
biases as functions of positions, never a (B, H, Tq, Tk) tensor. All paths mask with the same
``KeyRule`` (causality, a sliding window, packed documents; ``attnlab.blocks.masks``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.blocks.cache import AttentionCache
from attnlab.blocks.flex import MaskMemo, block_mask, flex, per_row
from attnlab.blocks.masks import KeyRule, additive_mask
from attnlab.blocks.norm import RMSNorm
from attnlab.blocks.positional import PositionalEncoding, ScoreMod
from attnlab.blocks.static_cache import StaticAttentionCache
from attnlab.schema.model import ModelConfig, check_heads, kept_kv_groups

# fused kernels; the softmax written out (its weights are probed); FlexAttention
ATTENTION_PATHS = ("sdpa", "explicit", "flex")


class MultiHeadAttention(nn.Module):
    """Multi-head attention with grouped-query heads, optional biases and a KV cache.

    ``n_kv_heads`` < ``n_heads`` gives grouped-query attention (1 gives multi-query).
    ``scale`` defaults to 1/sqrt(head_dim); T5 uses 1.0. ``cross=True`` builds cross-attention,
    whose keys and values come from a context (the encoder output) of width ``d_context``.
    ``window`` limits self-attention to keys less than ``window`` positions away (before the query when
    causal); a KV cache then keeps only the last ``window`` keys. ``qk_norm`` puts an RMSNorm (of
    epsilon ``norm_eps``) on each head's queries and keys, before RoPE, as Qwen3 does. ``backend`` is
    the path it runs: ``"sdpa"`` or ``"flex"`` (``record_attention`` switches to ``"explicit"``).
    ``head_ids`` builds a pruned module (``attnlab.compress.prune``): only those of the ``n_heads``
    heads, whole key/value groups of them; the head size stays ``d_model // n_heads``, and a per-head
    score bias (ALiBi's slopes, T5's buckets) is taken at the kept heads' indices.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        scale: float | None = None,
        cross: bool = False,
        d_context: int | None = None,
        window: int | None = None,
        qk_norm: bool = False,
        norm_eps: float = ModelConfig.norm_eps,
        head_ids: Sequence[int] | None = None,
        backend: str = "sdpa",
    ) -> None:
        super().__init__()
        if backend not in ("sdpa", "flex"):
            raise ValueError(f"attention backend {backend!r} is not one of sdpa, flex")
        check_heads(d_model, n_heads, n_kv_heads)
        if cross and window is not None:
            raise ValueError("cross-attention is never windowed: every query sees the whole context")
        if window is not None and window < 1:
            raise ValueError(f"attention window={window}: must be positive")
        self.head_dim = d_model // n_heads
        self.total_heads = n_heads  # before pruning: the index space of head_ids
        self.head_ids = tuple(range(n_heads)) if head_ids is None else tuple(head_ids)
        self.n_heads = len(self.head_ids)
        self.n_kv_heads = len(kept_kv_groups(self.head_ids, n_heads, n_kv_heads))
        pruned = torch.tensor(self.head_ids) if self.n_heads < n_heads else None
        self.register_buffer("bias_heads", pruned, persistent=False)  # None: every head kept
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.dropout = dropout
        self.cross = cross
        self.window = window
        self.q_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, norm_eps) if qk_norm else None
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.split_sizes = (q_dim, kv_dim, kv_dim)  # the rows of qkv_proj's weight: queries, keys, values
        self.head_splits = (self.n_heads, self.n_kv_heads, self.n_kv_heads)  # the same, in heads
        if cross:  # queries from the decoder, keys and values from the encoder output
            self.q_proj = nn.Linear(d_model, q_dim, bias=bias)
            self.kv_proj = nn.Linear(d_context or d_model, 2 * kv_dim, bias=bias)
        else:  # one matrix product for queries, keys and values
            self.qkv_proj = nn.Linear(d_model, q_dim + 2 * kv_dim, bias=bias)
        self.out_proj = nn.Linear(q_dim, d_model, bias=bias)  # input: heads concatenated
        self.path = backend  # one of ATTENTION_PATHS; set for a whole model with use_attention_path()
        self.weights_probe = nn.Identity()  # the explicit path passes its weights (B, H, Tq, Tk) through it

    def _split(self, x: Tensor, n: int) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.head_dim).transpose(1, 2)

    def _qkv_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (B, H, T, hd), keys and values (B, Hkv, T, hd) of ``x`` (B, T, D), views of one product.

        The fused product is split along its heads before the heads move in front of the positions, as
        nanoGPT does: the backward pass then concatenates three gradients laid out as the product
        already is (the fused kernels return them in their inputs' layout) with no copy. Splitting after
        the transpose cost a copy of the whole product's gradient per layer (about 0.5 ms of a 40 ms
        training step at nanoGPT's baby size), and three narrows a zero-filled gradient each.
        """
        if "qkv_proj" not in self._modules:  # split by the tensor-parallel plan (models.parallel)
            projections = (self.q_proj, self.k_proj, self.v_proj)
            q, k, v = (self._split(p(x), n) for p, n in zip(projections, self.head_splits, strict=True))
            return q, k, v
        b, t, _ = x.shape
        heads = self.qkv_proj(x).view(b, t, self.n_heads + 2 * self.n_kv_heads, self.head_dim)
        q, k, v = heads.split(self.head_splits, dim=2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _normed(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Queries and keys (B, H, T, hd) with QK-norm applied per head, where the module has it."""
        if self.q_norm is None:
            return q, k
        return self.q_norm(q), self.k_norm(k)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        positions: Tensor,
        pos: PositionalEncoding | None = None,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        cache: AttentionCache | StaticAttentionCache | None = None,
        document_ids: Tensor | None = None,
        masks: MaskMemo | None = None,
    ) -> Tensor:
        """Attend from ``x`` (B, Tq, D) to itself, or (cross-attention) to ``context`` (B, Tk, D).

        ``positions`` are the absolute positions of the queries; positional hooks apply to
        self-attention only. ``key_padding_mask`` covers every key, cached ones included.
        ``document_ids`` (B, T) pack several documents into one sequence: a query sees only keys of
        its own document (self-attention without a cache; decoding runs one document at a time).
        ``masks`` keeps the flex path's block masks for the other layers of the same forward pass.
        """
        if document_ids is not None and (self.cross or cache is not None):
            raise ValueError(
                "document ids apply to self-attention over a packed sequence without a KV cache "
                "(decode one document at a time)"
            )
        if not self.cross:
            q, k, v = self._qkv_heads(x)
            q, k = self._normed(q, k)
            k_pos = positions
            if pos is not None:
                q, k = pos.rotate(q, k, positions, positions)
            if cache is not None:
                if key_padding_mask is not None:  # it has columns for the keys a window trimmed before
                    key_padding_mask = key_padding_mask[:, cache.dropped :]
                k, v, k_pos = cache.append(k, v, positions, keep=self.window if causal else None)
                key_padding_mask = written_only(cache, key_padding_mask, q.shape[0])
            rule = KeyRule(causal=causal, window=self.window)
        else:
            q = self._split(self.q_proj(x), self.n_heads)
            if cache is not None and cache.k is not None:
                k, v = cache.k, cache.v
            else:
                if context is None:
                    raise ValueError("cross-attention needs a context (the encoder output) or a filled cache")
                if "kv_proj" in self._modules:
                    k, v = self.kv_proj(context).chunk(2, dim=-1)
                else:  # split by the tensor-parallel plan (models.parallel)
                    k, v = self.k_proj(context), self.v_proj(context)
                k, v = self._split(k, self.n_kv_heads), self._split(v, self.n_kv_heads)
                k = k if self.k_norm is None else self.k_norm(k)
                if cache is not None:
                    cache.k, cache.v = k, v
            q = q if self.q_norm is None else self.q_norm(q)
            k_pos, pos, rule = torch.arange(k.shape[2], device=x.device), None, KeyRule()

        if key_padding_mask is not None and tuple(key_padding_mask.shape) != (q.shape[0], k.shape[2]):
            raise ValueError(
                f"attention mask of shape {tuple(key_padding_mask.shape)} does not match the keys: expected "
                f"({q.shape[0]}, {k.shape[2] + (cache.dropped if cache is not None else 0)}), "
                "one entry per cached and new token"
            )
        if self.path == "flex":
            y = self._flex(q, k, v, positions, k_pos, rule, key_padding_mask, pos, masks, document_ids)
        else:
            bias = self._kept(pos.score_bias(positions, k_pos)) if pos is not None else None
            y = self._attend(q, k, v, positions, k_pos, rule, key_padding_mask, bias, document_ids)
        y = y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.out_proj(y)

    def _kept(self, bias: Tensor | None) -> Tensor | None:
        """A score bias (B, n_heads, Tq, Tk) of the unpruned heads at the heads this module keeps."""
        if bias is None or self.bias_heads is None:
            return bias
        return bias.index_select(1, self.bias_heads)

    def _kept_mod(self, score_mod: ScoreMod | None) -> ScoreMod | None:
        """A ``score_mod`` of the unpruned heads, called with the original index of each kept head."""
        if score_mod is None or self.bias_heads is None:
            return score_mod
        heads = self.bias_heads

        def kept(score: Tensor, b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
            return score_mod(score, b, heads[h], q, k)

        return kept

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        rule: KeyRule,
        key_padding_mask: Tensor | None,
        bias: Tensor | None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        dropout = self.dropout if self.training else 0.0
        plain_causal = (
            rule.causal
            and rule.window is None
            and bias is None
            and key_padding_mask is None
            and document_ids is None
        )
        if plain_causal and q.shape[2] == 1:
            mask, is_causal = None, False  # one new query sees every cached key
        elif plain_causal and q.shape[2] == k.shape[2] and self.path == "sdpa":
            mask, is_causal = None, True  # the fused kernels' fast path
        else:
            mask = additive_mask(
                rule,
                q_pos,
                k_pos,
                key_padding_mask=key_padding_mask,
                bias=bias,
                dtype=q.dtype,
                document_ids=document_ids,
            )
            is_causal = False
        if self.path != "sdpa":
            return self._explicit(q, k, v, mask, dropout)
        if not needs_one_thread(q):
            return self._sdpa(q, k, v, mask, dropout, is_causal)
        with one_thread():
            return self._sdpa(q, k, v, mask, dropout, is_causal)

    def _sdpa(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float, is_causal: bool
    ) -> Tensor:
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout,
            is_causal=is_causal,
            scale=self.scale,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )

    def _flex(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        rule: KeyRule,
        key_padding_mask: Tensor | None,
        pos: PositionalEncoding | None,
        masks: MaskMemo | None,
        document_ids: Tensor | None,
    ) -> Tensor:
        """FlexAttention with ``rule``, padding and documents as a block mask (the forward pass's, from
        ``masks``, where another layer built it) and the positional score bias as a ``score_mod``."""
        q_rows, k_rows = per_row(q_pos, q.shape[0]), per_row(k_pos, q.shape[0])
        kind = "cross" if self.cross else "self"
        if masks is None or kind not in masks:
            mask = block_mask(rule, q_rows, k_rows, key_padding_mask, document_ids)
            if masks is not None:
                masks[kind] = mask
        else:
            mask = masks[kind]
        score_mod = self._kept_mod(pos.score_mod(q_rows, k_rows)) if pos is not None else None
        return flex(q, k, v, mask=mask, score_mod=score_mod, scale=self.scale)

    def _explicit(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float) -> Tensor:
        """Softmax attention written out; the weights (B, H, Tq, Tk) pass through ``weights_probe``."""
        groups = self.n_heads // self.n_kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            scores = scores + mask
        weights = self.weights_probe(scores.float().softmax(dim=-1).to(q.dtype))
        return F.dropout(weights, p=dropout, training=dropout > 0) @ v


def written_only(
    cache: AttentionCache | StaticAttentionCache, key_padding_mask: Tensor | None, batch: int
) -> Tensor | None:
    """The key padding mask (B, Tk) with a static cache's unwritten columns hidden as well (a growing
    cache holds written keys only: its mask is returned as it is)."""
    if not cache.static:
        return key_padding_mask
    written = cache.written_keys().expand(batch, -1)
    return written if key_padding_mask is None else key_padding_mask.bool() & written


def needs_one_thread(q: Tensor) -> bool:
    """Whether ``q`` (B, H, Tq, hd), a decoding step's single query on the CPU, should run on one thread.

    Its attention is microseconds of work, but with two threads the fused kernel opens a parallel
    region between two of MKL's matrix products, and handing the threads over costs milliseconds
    on a busy machine (GPT-2-small at two threads: 21 ms per call, 58% of a token's time, against
    tens of microseconds alone). One thread keeps the step in MKL's hands. Asked only in eager mode,
    and answered before any context manager is entered: at one thread a step pays nothing for it.
    """
    return q.shape[2] == 1 and q.is_cpu and not torch.compiler.is_compiling() and torch.get_num_threads() > 1


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one CPU thread, then restore the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def attention_modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    """Every attention module of ``model`` by name, in the order the model runs them."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)}


@contextmanager
def use_attention_path(model: nn.Module, path: str) -> Iterator[None]:
    """Run every attention module of ``model`` on ``path`` (one of ATTENTION_PATHS) while the block runs."""
    if path not in ATTENTION_PATHS:
        raise ValueError(f"attention path {path!r} is not one of {', '.join(ATTENTION_PATHS)}")
    modules = list(attention_modules(model).values())
    previous = [m.path for m in modules]
    for m in modules:
        m.path = path
    try:
        yield
    finally:
        for m, p in zip(modules, previous):
            m.path = p


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Collect attention weights of every attention module of ``model`` while the block runs.

    Yields a dict, filled by each forward pass, from module name (``layers.0.self_attn.fn``
    style, as in ``model.named_modules()``) to its weights (B, H, Tq, Tk). The explicit path runs
    while recording, so use it for inspection, not for speed.
    """
    maps: dict[str, Tensor] = {}

    def keep(name: str):
        return lambda _probe, _inputs, weights: maps.__setitem__(name, weights)

    modules = attention_modules(model)
    hooks = [m.weights_probe.register_forward_hook(keep(n)) for n, m in modules.items()]
    try:
        with use_attention_path(model, "explicit"):
            yield maps
    finally:
        for hook in hooks:
            hook.remove()
